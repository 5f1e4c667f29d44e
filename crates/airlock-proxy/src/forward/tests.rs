//! The request's future: every request's is moved whole into the box it is spawned in, so
//! its size is copied once per request (docs/benchmarks.md, "The request's future,
//! smaller").

use super::serve;

/// The size of what `f` returns, without calling it.
fn returned_size<F, A, B, R>(_: F) -> usize
where
    F: FnOnce(A, B) -> R,
{
    size_of::<R>()
}

/// The bound on the request's future: 9,792 bytes before the steps were split into
/// phases, 2,400 after, in this test's build and (within 16 bytes) in the shipped one.
/// Un-boxing one of the rare waits (a refresh's screen: 1,200 bytes) would exceed it.
const LIMIT: usize = 3072;

#[test]
fn the_request_future_stays_small() {
    let size = returned_size(serve);
    assert!(
        size <= LIMIT,
        "the request's future is {size} bytes, over {LIMIT}: a step keeps a value across a \
         wait it no longer needs, or a rare wait is not boxed (docs/benchmarks.md)"
    );
    println!("the request's future: {size} bytes");
}
