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
