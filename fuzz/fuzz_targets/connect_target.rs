//! Fuzz target for `CONNECT` targets (`airlock_proxy::wire::connect_target`), fed as hyper
//! would: only what `http::Uri` accepts as an authority-form target. Checks: no panic; an
//! accepted target prints as `host:port` and reads back to the same host and port; a
//! target with user information is never accepted.

#![no_main]

use airlock_proxy::wire::{BadTarget, connect_target};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for authority in [Some(text.to_owned()), http_authority(text)] {
        match connect_target(authority.as_deref()) {
            Ok((host, port)) => {
                let again = format!("{host}:{port}");
                assert_eq!(connect_target(Some(&again)), Ok((host, port)));
                // The authority handed over, not the whole text: `x://h:1/p@q` names
                // `h:1`, its `@` in the path.
                let given = authority.as_deref().unwrap_or_default();
                assert!(!given.contains('@'), "user information accepted: {given:?}");
            }
            Err(BadTarget::Missing) => assert!(authority.is_none()),
            Err(_) => {}
        }
    }
});

/// The authority hyper would hand over for a `CONNECT text HTTP/1.1` request line.
fn http_authority(text: &str) -> Option<String> {
    let uri = text.parse::<hyper::Uri>().ok()?;
    uri.authority().map(|authority| authority.as_str().to_owned())
}
