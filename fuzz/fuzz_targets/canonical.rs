//! Fuzz target for the request canonicaliser: feeds arbitrary text to `canonical_path`,
//! `canonical_host` and `parse_authority` and checks their invariants:
//! no panic; a canonical path is a fixed point, starts with `/` (or is `*`), holds no `.`
//! or `..` segment, no `//`, no backslash, no NUL and no encoded slash, backslash or NUL;
//! a canonical host reads back as itself from its display form.

#![no_main]

use airlock_policy::canonical::{Host, canonical_host, canonical_path, parse_authority};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    check_path(text);
    check_host(text);
    if let Ok((host, port)) = parse_authority(text, 443) {
        assert!(port != 0);
        assert_host_fixed_point(&host);
    }
});

fn check_path(text: &str) {
    let (path, _query) = canonical_path(text);
    let Ok(path) = path else {
        return;
    };
    let (again, query) = canonical_path(&path);
    assert_eq!(
        again.as_deref(),
        Ok(path.as_str()),
        "not idempotent for {text:?}"
    );
    assert_eq!(query, None, "a canonical path split off a query: {text:?}");
    if path == "*" {
        return;
    }
    assert!(path.starts_with('/'), "{text:?} -> {path:?}");
    assert!(
        !path.contains('\\') && !path.contains('\0'),
        "{text:?} -> {path:?}"
    );
    assert!(!path.contains("//"), "{text:?} -> {path:?}");
    for segment in path.split('/') {
        assert!(segment != "." && segment != "..", "{text:?} -> {path:?}");
    }
    let lower = path.to_ascii_lowercase();
    for encoded in ["%2f", "%5c", "%00"] {
        assert!(!lower.contains(encoded), "{text:?} -> {path:?}");
    }
}

fn check_host(text: &str) {
    if let Ok(host) = canonical_host(text) {
        assert_host_fixed_point(&host);
    }
}

fn assert_host_fixed_point(host: &Host) {
    let shown = host.to_string();
    assert_eq!(canonical_host(&shown).as_ref(), Ok(host), "{shown:?}");
    if let Host::Name(name) = host {
        assert!(name.len() <= 253 && !name.is_empty());
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        );
        assert!(!name.ends_with('.'));
    }
}
