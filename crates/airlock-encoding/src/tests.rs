use std::io::Write as _;

use proptest::prelude::*;

use super::*;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn raw_deflate(data: &[u8]) -> Vec<u8> {
    let mut encoder =
        flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn brotli(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut encoder = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
        encoder.write_all(data).unwrap();
    }
    out
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(data, 3).unwrap()
}

fn encode(coding: Coding, data: &[u8]) -> Vec<u8> {
    match coding {
        Coding::Gzip => gzip(data),
        Coding::Deflate => zlib(data),
        Coding::Brotli => brotli(data),
        Coding::Zstd => zstd(data),
    }
}

/// Decodes `coded` pushed in chunks of `size`.
fn decode(
    codings: &[Coding],
    coded: &[u8],
    size: usize,
    limits: Limits,
) -> Result<Vec<u8>, DecodeError> {
    let mut decoder = Decoder::new(codings, limits)?;
    let mut out = Vec::new();
    for chunk in coded.chunks(size.max(1)) {
        out.extend(decoder.push(chunk)?);
    }
    out.extend(decoder.finish()?);
    Ok(out)
}

#[test]
fn headers_name_the_codings_in_order() {
    let list = codings([b"gzip, identity".as_slice(), b"BR".as_slice()]).unwrap();
    assert_eq!(list, [Coding::Gzip, Coding::Brotli]);
    assert!(codings([b"identity".as_slice()]).unwrap().is_empty());
    assert!(
        matches!(codings([b"gzip, compress".as_slice()]), Err(DecodeError::Unknown(c)) if c == "compress")
    );
    assert!(matches!(
        codings([b"gzip,gzip,gzip,gzip,gzip".as_slice()]),
        Err(DecodeError::TooManyLayers)
    ));
}

#[test]
fn every_coding_and_raw_deflate_decode() {
    let text = b"the quick brown fox ".repeat(5000);
    for coding in [Coding::Gzip, Coding::Deflate, Coding::Brotli, Coding::Zstd] {
        let coded = encode(coding, &text);
        for size in [1, 13, 4096, coded.len()] {
            assert_eq!(
                decode(&[coding], &coded, size, Limits::default()).unwrap(),
                text,
                "{coding:?} {size}"
            );
        }
    }
    let raw = raw_deflate(&text);
    assert_eq!(
        decode(&[Coding::Deflate], &raw, 7, Limits::default()).unwrap(),
        text
    );
}

#[test]
fn stacked_codings_are_undone_last_first() {
    let text = b"layered ".repeat(1000);
    let coded = zstd(&gzip(&text));
    assert_eq!(
        decode(
            &[Coding::Gzip, Coding::Zstd],
            &coded,
            100,
            Limits::default()
        )
        .unwrap(),
        text
    );
}

#[test]
fn bombs_stop_at_the_limits() {
    let zeros = vec![0u8; 64 * 1024 * 1024];
    let limits = Limits {
        max_output: 8 * 1024 * 1024,
        max_ratio: 1_000_000,
        ratio_floor: 0,
    };
    for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
        let coded = encode(coding, &zeros);
        let result = decode(&[coding], &coded, 64 * 1024, limits);
        assert!(
            matches!(result, Err(DecodeError::TooLarge(_))),
            "{coding:?}: {:?}",
            result.map(|o| o.len())
        );
    }
    let limits = Limits {
        max_output: u64::MAX,
        max_ratio: 50,
        ratio_floor: 1024,
    };
    let result = decode(
        &[Coding::Gzip],
        &gzip(&zeros[..4 * 1024 * 1024]),
        512,
        limits,
    );
    assert!(
        matches!(result, Err(DecodeError::Ratio(50))),
        "{:?}",
        result.map(|o| o.len())
    );
}

#[test]
fn corrupt_data_is_an_error() {
    for coding in [Coding::Gzip, Coding::Deflate, Coding::Brotli, Coding::Zstd] {
        let result = decode(
            &[coding],
            b"\x1f\x8b this is not compressed at all, not at all",
            5,
            Limits::default(),
        );
        assert!(result.is_err(), "{coding:?}");
    }
}

proptest! {
    #[test]
    fn any_data_round_trips_in_any_chunking(
        data in prop::collection::vec(any::<u8>(), 0..20_000),
        which in 0usize..4,
        size in 1usize..5000,
    ) {
        let coding = [Coding::Gzip, Coding::Deflate, Coding::Brotli, Coding::Zstd][which];
        let coded = encode(coding, &data);
        prop_assert_eq!(decode(&[coding], &coded, size, Limits::default()).unwrap(), data);
    }

    #[test]
    fn garbage_never_panics(data in prop::collection::vec(any::<u8>(), 0..2000), which in 0usize..4) {
        let coding = [Coding::Gzip, Coding::Deflate, Coding::Brotli, Coding::Zstd][which];
        let _ = decode(&[coding], &data, 64, Limits::default());
    }
}

/// Decodes `coded` pulling at most `step` bytes at a time, checking every pull's size.
fn decode_in_steps(codings: &[Coding], coded: &[u8], step: usize) -> Result<Vec<u8>, DecodeError> {
    let mut decoder = Decoder::new(codings, Limits::default())?;
    let mut out = Vec::new();
    let mut chunks = coded.chunks(1000);
    for _ in 0..1_000_000 {
        if decoder.is_finished() {
            return Ok(out);
        }
        if decoder.wants_input() {
            match chunks.next() {
                Some(chunk) => decoder.feed(chunk),
                None => decoder.end_input(),
            }
        }
        let pulled = decoder.pull(step)?;
        assert!(pulled.len() <= step, "{} > {step}", pulled.len());
        out.extend(pulled);
    }
    panic!("the decoder made no progress");
}

#[test]
fn pulls_never_exceed_their_step_and_lose_nothing() {
    let text: Vec<u8> = (0..40_000u32)
        .flat_map(|i| format!("line {} of the body\n", i % 977).into_bytes())
        .collect();
    for coding in [Coding::Gzip, Coding::Deflate, Coding::Brotli, Coding::Zstd] {
        let coded = encode(coding, &text);
        for step in [7, 4096, 64 * 1024] {
            let out = decode_in_steps(&[coding], &coded, step).unwrap();
            assert!(out == text, "{coding:?} step {step}");
        }
    }
    let layered = zstd(&gzip(&text));
    let out = decode_in_steps(&[Coding::Gzip, Coding::Zstd], &layered, 4096).unwrap();
    assert!(out == text, "stacked");
}

#[test]
fn memory_counts_windows_as_they_fill_up_to_their_caps() {
    let mut decoder = Decoder::new(&[Coding::Zstd], Limits::default()).unwrap();
    assert_eq!(decoder.memory(1000), 512 * 1024 + 1000);
    decoder.feed(&zstd(&vec![7u8; 4 << 20]));
    let first = decoder.pull(1 << 20).unwrap();
    assert_eq!(first.len(), 1 << 20);
    assert_eq!(decoder.memory(1000), 512 * 1024 + (1 << 20) + 1000);
    assert_eq!(
        decoder.memory(usize::MAX),
        512 * 1024 + (1 << ZSTD_WINDOW_LOG_MAX)
    );
    // brotli applied first is undone last: only the outermost window fills lazily.
    let stacked = Decoder::new(&[Coding::Gzip, Coding::Brotli], Limits::default()).unwrap();
    let brotli_state = 2 * 1024 * 1024 + BROTLI_WINDOW_MAX;
    assert_eq!(stacked.memory(0), brotli_state + 128 * 1024 + 64 * 1024);
}

#[test]
fn a_zstd_window_over_8_mib_is_refused() {
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    encoder
        .set_parameter(zstd::stream::raw::CParameter::WindowLog(25))
        .unwrap();
    encoder.write_all(&b"0123456789".repeat(1000)).unwrap();
    let coded = encoder.finish().unwrap();
    let result = decode(&[Coding::Zstd], &coded, 4096, Limits::default());
    assert!(
        matches!(&result, Err(DecodeError::Corrupt(Coding::Zstd, _))),
        "{:?}",
        result.map(|o| o.len())
    );
    let mut fits = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    fits.set_parameter(zstd::stream::raw::CParameter::WindowLog(23))
        .unwrap();
    fits.write_all(&b"0123456789".repeat(1000)).unwrap();
    let coded = fits.finish().unwrap();
    assert!(decode(&[Coding::Zstd], &coded, 4096, Limits::default()).is_ok());
}

#[test]
fn a_cut_zstd_or_brotli_stream_is_truncated() {
    let text = b"cut short ".repeat(10_000);
    for coding in [Coding::Zstd, Coding::Brotli, Coding::Gzip] {
        let coded = encode(coding, &text);
        let result = decode(&[coding], &coded[..coded.len() / 2], 512, Limits::default());
        assert!(result.is_err(), "{coding:?}");
    }
}

#[test]
fn a_windowed_coding_under_another_is_refused() {
    for stack in [
        [Coding::Brotli, Coding::Gzip],
        [Coding::Zstd, Coding::Gzip],
        [Coding::Brotli, Coding::Brotli],
    ] {
        assert!(
            matches!(
                Decoder::new(&stack, Limits::default()),
                Err(DecodeError::InnerWindow(_))
            ),
            "{stack:?}"
        );
    }
    assert!(Decoder::new(&[Coding::Gzip, Coding::Brotli], Limits::default()).is_ok());
}
