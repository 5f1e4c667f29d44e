//! Reading `filesystem:` (the four path lists; docs/policy.md, "filesystem").

use super::node::Node;
use super::{Checker, shown};

const FILESYSTEM_KEYS: &[&str] = &["writable", "hidden", "readable", "protected"];

impl Checker<'_> {
    /// `filesystem:`: four lists of paths (docs/policy.md, "filesystem").
    pub(super) fn filesystem(&mut self, node: &Node) -> crate::model::Filesystem {
        let mut out = crate::model::Filesystem::default();
        let Some(fields) = self.fields(node, "filesystem", FILESYSTEM_KEYS) else {
            return out;
        };
        for key in FILESYSTEM_KEYS {
            let Some(list_node) = fields.get(key) else {
                continue;
            };
            let what = format!("filesystem.{key}");
            let Some(items) = self.list(list_node, &what, true) else {
                continue;
            };
            let mut paths = Vec::new();
            for (index, item) in items.iter().enumerate() {
                let item_what = format!("{what}[{index}]");
                let Some(text) = self.non_empty_string(item, &item_what) else {
                    continue;
                };
                match crate::filesystem::check_entry(key, text) {
                    Ok(()) if !paths.iter().any(|known: &String| known == text) => {
                        paths.push(text.to_owned());
                    }
                    Ok(()) => {}
                    Err(problem) => {
                        self.error(
                            item.pos,
                            format!("{item_what} `{}`: {problem}", shown(text)),
                        );
                    }
                }
            }
            match *key {
                "writable" => out.writable = Some(paths),
                "hidden" => out.hidden = paths,
                "readable" => out.readable = paths,
                _ => out.protected = paths,
            }
        }
        out
    }
}
