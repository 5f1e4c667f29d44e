//! Reading `dlp:` (well-known credential formats) and `audit:`.

use super::node::Node;
use super::{Checker, shown};

const AUDIT_KEYS: &[&str] = &["traceparent"];
const DLP_KEYS: &[&str] = &["credentials", "allow"];
const DLP_ALLOW_KEYS: &[&str] = &["host", "kinds"];

impl Checker<'_> {
    /// `audit:`: what the audit asks of forwarded requests (docs/policy.md, "audit").
    pub(super) fn audit(&mut self, node: &Node) -> crate::model::Audit {
        let mut out = crate::model::Audit::default();
        let Some(fields) = self.fields(node, "audit", AUDIT_KEYS) else {
            return out;
        };
        if let Some(flag) = fields.get("traceparent") {
            out.traceparent = self.boolean(flag, "audit.traceparent").unwrap_or(false);
        }
        out
    }

    /// `dlp:`: the mode for well-known credential formats and where they may go
    /// (docs/policy.md, "dlp").
    pub(super) fn dlp(&mut self, node: &Node) -> crate::model::Dlp {
        let mut out = crate::model::Dlp::default();
        let Some(fields) = self.fields(node, "dlp", DLP_KEYS) else {
            return out;
        };
        if let Some(mode) = fields.get("credentials") {
            out.credentials = self.dlp_mode(mode);
        }
        if let Some(list) = fields.get("allow")
            && let Some(items) = self.list(list, "dlp.allow", true)
        {
            for (index, item) in items.iter().enumerate() {
                if let Some(entry) = self.dlp_allow(item, &format!("dlp.allow[{index}]")) {
                    out.allow.push(entry);
                }
            }
        }
        out
    }

    pub(super) fn dlp_mode(&mut self, node: &Node) -> Option<crate::model::DlpMode> {
        use crate::model::DlpMode;
        let text = self.string(node, "dlp.credentials")?;
        let mode = [DlpMode::Refuse, DlpMode::Log, DlpMode::Off]
            .into_iter()
            .find(|mode| mode.as_str() == text);
        if mode.is_none() {
            let message = format!(
                "dlp.credentials `{}` is not a mode: write refuse, log or off",
                shown(text)
            );
            self.error(node.pos, message);
        }
        mode
    }

    pub(super) fn dlp_allow(&mut self, node: &Node, what: &str) -> Option<crate::model::DlpAllow> {
        let fields = self.fields(node, what, DLP_ALLOW_KEYS)?;
        let Some(host_node) = fields.get("host") else {
            self.error(node.pos, format!("{what} needs a `host`"));
            return None;
        };
        let host = self.host(host_node, &format!("{what}.host"))?;
        let mut kinds = Vec::new();
        if let Some(list) = fields.get("kinds") {
            let known = airlock_dlp::kinds();
            for (index, item) in self
                .list(list, &format!("{what}.kinds"), true)?
                .iter()
                .enumerate()
            {
                let item_what = format!("{what}.kinds[{index}]");
                let Some(kind) = self.non_empty_string(item, &item_what) else {
                    continue;
                };
                if known.contains(&kind) {
                    kinds.push(kind.to_owned());
                } else {
                    let message = format!(
                        "{item_what} `{}` is not a credential kind: write one of {}",
                        shown(kind),
                        known.join(", ")
                    );
                    self.error(item.pos, message);
                }
            }
        }
        Some(crate::model::DlpAllow { host, kinds })
    }
}
