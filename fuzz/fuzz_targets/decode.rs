//! Fuzz target for content decoding (`airlock_encoding`): arbitrary bytes as a gzip,
//! deflate, br or zstd body (or a stack of two), pushed in fuzzed chunk sizes, with small
//! limits. Checks: no panic, no hang; the decoded output never exceeds the limits.

#![no_main]

mod common;

use airlock_encoding::{Coding, Decoder, Limits};
use libfuzzer_sys::fuzz_target;

const CODINGS: [Coding; 4] = [Coding::Gzip, Coding::Deflate, Coding::Brotli, Coding::Zstd];

fuzz_target!(|input: (u8, u8, Vec<u8>, Vec<u8>)| {
    let (first, second, sizes, data) = input;
    let mut codings = vec![CODINGS[usize::from(first % 4)]];
    if second % 5 < 4 {
        codings.push(CODINGS[usize::from(second % 4)]);
    }
    let limits = Limits {
        max_output: 1 << 20,
        max_ratio: 50,
        ratio_floor: 4096,
    };
    let Ok(mut decoder) = Decoder::new(&codings, limits) else {
        return;
    };
    let mut total = 0usize;
    for chunk in common::chunks(&data, &sizes) {
        match decoder.push(chunk) {
            Ok(out) => total += out.len(),
            Err(_) => return,
        }
        assert!(total as u64 <= limits.max_output, "past the output limit");
    }
    if let Ok(out) = decoder.finish() {
        total += out.len();
    }
    assert!(total as u64 <= limits.max_output, "past the output limit");
});
