//! Reading the `credentials` section (the type is [`crate::credential_files`]).

use super::{Checker, Kind, Node, nearest};
use crate::credential_files::{CredentialFiles, STORE_NAMES};

const CREDENTIALS_KEYS: &[&str] = &["files", "hide"];

impl Checker<'_> {
    /// `credentials: {files: [STORE...] | all, hide: [STORE...] | all}`.
    pub(super) fn credentials(&mut self, node: &Node) -> CredentialFiles {
        let mut out = CredentialFiles::default();
        if matches!(node.kind, Kind::Null) {
            return out;
        }
        let Some(fields) = self.fields(node, "credentials", CREDENTIALS_KEYS) else {
            return out;
        };
        if let Some(list) = fields.get("files") {
            out.projected = self.store_names(list, "credentials.files");
        }
        if let Some(list) = fields.get("hide") {
            out.hidden = self.store_names(list, "credentials.hide");
        }
        let mut sorted = CredentialFiles::default();
        sorted.merge(out);
        sorted
    }

    /// A list of store names, or `all`.
    fn store_names(&mut self, node: &Node, what: &str) -> Vec<String> {
        if let Kind::Str(text) = &node.kind
            && text == "all"
        {
            return STORE_NAMES.iter().map(|name| (*name).to_owned()).collect();
        }
        let Some(items) = self.list(node, what, true) else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let Some(name) = self.string(item, &format!("{what}[{index}]")) else {
                continue;
            };
            if STORE_NAMES.contains(&name) {
                names.push(name.to_owned());
            } else {
                let suggestion = nearest(name, &STORE_NAMES)
                    .map(|near| format!(" (did you mean `{near}`?)"))
                    .unwrap_or_default();
                let message = format!(
                    "{what}[{index}]: `{}` is not a credential store{suggestion}; the stores are {} (or `all`)",
                    super::shown(name),
                    STORE_NAMES.join(", ")
                );
                self.error(item.pos, message);
            }
        }
        names
    }
}
