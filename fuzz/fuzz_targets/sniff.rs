//! Fuzz target for a tunnel's first bytes (`airlock_proxy::wire::Sniffer`): arbitrary
//! bytes (seeds: real ClientHellos of openssl, curl and Python, request lines), fed whole
//! and in pieces of 1, 7 and 100 bytes. Checks: no panic; the answer does not depend on
//! how the bytes were cut; an accepted server name is canonical (reads back to itself).

#![no_main]

use airlock_policy::canonical::canonical_host;
use airlock_proxy::wire::{Sniffed, Sniffer};
use libfuzzer_sys::fuzz_target;

/// Feeds `data` in pieces of `size` until an answer, else what the end means.
fn sniff(data: &[u8], size: usize) -> Sniffed {
    let mut sniffer = Sniffer::default();
    let mut end = 0;
    for _ in 0..=data.len() {
        end = (end + size).min(data.len());
        if let Some(answer) = sniffer.classify(&data[..end]) {
            return answer;
        }
        if end == data.len() {
            break;
        }
    }
    sniffer.at_end()
}

fuzz_target!(|data: &[u8]| {
    let whole = sniff(data, data.len().max(1));
    for size in [1, 7, 100] {
        assert_eq!(sniff(data, size), whole, "pieces of {size} bytes change the answer");
    }
    if let Sniffed::Tls(Some(Ok(host))) = whole {
        assert_eq!(canonical_host(&host.to_string()).as_ref(), Ok(&host));
    }
});
