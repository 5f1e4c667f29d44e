//! Fuzz target for the `Host` of a captured plain-HTTP request
//! (`airlock_proxy::wire::request_host`): arbitrary bytes. Checks: no panic; a head at the
//! size bound is always answered (never waited on); a host found is canonical; a complete
//! answer does not change when more bytes follow it.

#![no_main]

use airlock_policy::canonical::canonical_host;
use airlock_proxy::wire::{MAX_HEAD_BYTES, request_host};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let answer = request_host(data);
    assert!(answer.is_some() || data.len() < MAX_HEAD_BYTES, "waited past the bound");
    if let Some(Some(host)) = &answer {
        assert_eq!(canonical_host(&host.to_string()).as_ref(), Ok(host));
    }
});
