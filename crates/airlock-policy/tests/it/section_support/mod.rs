//! Shared helpers of the section tests (`dlp`, `limits`): load a policy text, or load it
//! expecting exactly one located error.

use airlock_policy::load::{LoadError, load_str};
use airlock_policy::model::Policy;

/// `text` loaded as `p.yaml`; panics with the errors if it does not load.
pub fn load(text: &str) -> Policy {
    load_str("p.yaml", text).unwrap_or_else(|e| panic!("{e:?}"))
}

/// The one error of `text`: line, column and message; panics if it loads or has several.
pub fn error(text: &str) -> (u32, u32, String) {
    match load_str("p.yaml", text) {
        Ok(policy) => panic!("expected an error, loaded {policy:?}"),
        Err(LoadError { errors }) => {
            assert_eq!(errors.len(), 1, "{errors:#?}");
            let e = &errors[0];
            (e.line, e.column, e.message.clone())
        }
    }
}
