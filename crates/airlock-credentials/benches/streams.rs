//! Throughput of the streaming rewriters on a 16 MiB body in 64 KiB chunks: request body
//! swapping ([`airlock_credentials::BodySwap`]) and response scrubbing
//! ([`airlock_credentials::ScrubStream`]), each with a few hits in the body; and of the
//! outbound guard's search of an upload ([`airlock_credentials::GuardStream`]) on text
//! and on random bytes, where nothing is found.

use std::hint::black_box;
use std::sync::Arc;

use airlock_credentials::{Credentials, GuardScope};
use airlock_policy::model::{DlpMode, Secret, SecretSource};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const BODY_BYTES: usize = 16 * 1024 * 1024;
const CHUNK_BYTES: usize = 64 * 1024;

fn credentials() -> Arc<Credentials> {
    let secret = |name: &str| Secret {
        body: true,
        ..Secret::new(name, SecretSource::Env(name.to_owned()))
    };
    Arc::new(
        Credentials::new(vec![
            (
                secret("LLM_KEY"),
                "sk-proj-RealOpenAiKey0123456789".to_owned(),
            ),
            (
                secret("GH_TOKEN"),
                "ghp_RealRealRealRealRealRealRealReal1234".to_owned(),
            ),
        ])
        .expect("credentials"),
    )
}

/// JSON-ish text with `needle` every MiB.
fn body(needle: &str) -> Vec<u8> {
    let filler = b"{\"role\":\"user\",\"content\":\"lorem ipsum dolor sit amet\"},";
    let mut body = Vec::with_capacity(BODY_BYTES);
    while body.len() < BODY_BYTES {
        if body.len() % (1024 * 1024) < filler.len() {
            body.extend_from_slice(needle.as_bytes());
        }
        body.extend_from_slice(filler);
    }
    body.truncate(BODY_BYTES);
    body
}

fn streams(c: &mut Criterion) {
    let credentials = credentials();
    let surrogate = credentials.surrogates()[0].1.clone();
    let request = body(&surrogate);
    let response = body("sk-proj-RealOpenAiKey0123456789");
    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Bytes(BODY_BYTES as u64));
    group.sample_size(20);
    group.bench_function("body_swap_16MiB", |b| {
        b.iter(|| {
            let mut swap = credentials.body_swap(&["LLM_KEY"]).expect("scanning");
            let mut out = 0;
            for chunk in request.chunks(CHUNK_BYTES) {
                out += swap.push(black_box(chunk)).expect("in scope").len();
            }
            out += swap.finish().expect("in scope").len();
            out
        })
    });
    let scrubber = credentials.scrubber();
    group.bench_function("scrub_16MiB", |b| {
        b.iter(|| {
            let mut stream = scrubber.stream();
            let mut out = 0;
            for chunk in response.chunks(CHUNK_BYTES) {
                out += stream.push(black_box(chunk)).len();
            }
            out + stream.finish().len()
        })
    });
    let random: Vec<u8> = (0..BODY_BYTES as u64)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect();
    let text = body("no credential here");
    let guard = credentials.guard();
    let scope = GuardScope {
        values: credentials.value_scopes(&[], true),
        formats: DlpMode::Refuse,
        allowed_kinds: Some(Vec::new()),
    };
    for (name, data) in [("guard_text_16MiB", &text), ("guard_random_16MiB", &random)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut stream = guard.stream(scope.clone());
                let mut out = 0;
                for chunk in data.chunks(CHUNK_BYTES) {
                    let released = stream.push(black_box(bytes::Bytes::copy_from_slice(chunk)));
                    let released = released.expect("clean");
                    out += released.first.len() + released.second.len();
                }
                out + stream.finish().expect("clean").len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, streams);
criterion_main!(benches);
