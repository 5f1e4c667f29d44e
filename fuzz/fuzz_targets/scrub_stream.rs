//! Fuzz target for response scrubbing across chunk boundaries (`ScrubStream`): arbitrary
//! bytes with the real value spliced in (raw or base64) at a fuzzed place, pushed in fuzzed
//! chunk sizes. Checks: no panic; the streamed output equals scrubbing the whole body; the
//! output never holds the real value.

#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (bool, u16, Vec<u8>, Vec<u8>)| {
    let (base64, at, sizes, mut data) = input;
    let at = usize::from(at).min(data.len());
    let value = if base64 {
        "Z2hwX1IzYWxWYWx1ZU9mVGhlVG9rZW5YWVowMTIzNDU2Nzg5YWJj".to_owned()
    } else {
        common::REAL.to_owned()
    };
    data.splice(at..at, value.bytes()).for_each(drop);
    let scrubber = common::credentials().scrubber();
    let whole = scrubber.scrub(&data).into_owned();
    let mut stream = scrubber.stream();
    let mut out = Vec::new();
    for chunk in common::chunks(&data, &sizes) {
        out.extend(stream.push(chunk));
    }
    out.extend(stream.finish());
    assert_eq!(out, whole, "streamed scrubbing differs from the whole");
    let real = common::REAL.as_bytes();
    assert!(!out.windows(real.len()).any(|w| w == real), "the real value came through");
});
