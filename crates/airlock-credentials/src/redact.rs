//! Replacing real secret values in the forms they are likely to take (raw, base64,
//! URL-encoded, JSON-escaped): [`Redactor`] turns them into `[REDACTED:NAME]` in any output
//! (errors, logs); [`Scrubber`] turns them into the same encoding of the surrogate in
//! responses sent back to the sandbox.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use bytes::Bytes;

use crate::finder::Finder;
use crate::released::Released;

/// A base64 run shorter than this is not redacted on its own (too likely by chance).
const MIN_BASE64_FRAGMENT: usize = 8;

/// Replaces real values in text. Cheap to clone.
#[derive(Clone)]
pub struct Redactor {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    matcher: Finder,
    /// `[REDACTED:NAME]` per pattern of `matcher`.
    replacements: Vec<String>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor").finish_non_exhaustive()
    }
}

impl Redactor {
    /// A redactor for `(name, real value)` pairs. Fails only if the matcher cannot be built.
    pub(crate) fn new<'a>(
        secrets: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, aho_corasick::BuildError> {
        let mut patterns: Vec<String> = Vec::new();
        let mut replacements = Vec::new();
        for (name, real) in secrets {
            for form in encoded_forms(real) {
                if !form.is_empty() && !patterns.contains(&form) {
                    patterns.push(form);
                    replacements.push(format!("[REDACTED:{name}]"));
                }
            }
        }
        if patterns.is_empty() {
            return Ok(Redactor { inner: None });
        }
        let matcher = Finder::new(&patterns)?;
        Ok(Redactor {
            inner: Some(Arc::new(Inner {
                matcher,
                replacements,
            })),
        })
    }

    /// `text` with every known form of every real value replaced by `[REDACTED:NAME]`;
    /// borrowed when there was nothing to replace.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some(inner) = &self.inner else {
            return Cow::Borrowed(text);
        };
        if !inner.matcher.is_match(text.as_bytes()) {
            return Cow::Borrowed(text);
        }
        // Patterns and replacements are whole UTF-8 strings: the result is UTF-8 too.
        let replaced = inner
            .matcher
            .replace_all(text.as_bytes(), &inner.replacements);
        Cow::Owned(String::from_utf8_lossy(&replaced).into_owned())
    }
}

/// Replaces real values in response bytes by the same encoding of their surrogates. Cheap
/// to clone.
#[derive(Clone)]
pub struct Scrubber {
    inner: Option<Arc<ScrubInner>>,
}

struct ScrubInner {
    matcher: Finder,
    /// The surrogate form per pattern of `matcher`.
    replacements: Vec<Vec<u8>>,
    longest: usize,
    /// Every replacement has the length of what it replaces.
    preserves_length: bool,
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubber").finish_non_exhaustive()
    }
}

impl Scrubber {
    /// A scrubber for `(real value, surrogate)` pairs: each encoded form of the real value
    /// is replaced by the same form of its surrogate. When their lengths differ (a fixed
    /// surrogate), a base64 fragment of the value embedded in a larger base64 text becomes
    /// the surrogate's fragment at the same alignment: no longer valid base64 of anything
    /// meaningful, but never the real value.
    pub(crate) fn new<'a>(
        secrets: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, aho_corasick::BuildError> {
        let mut patterns: Vec<String> = Vec::new();
        let mut replacements = Vec::new();
        for (real, surrogate) in secrets {
            for (from, to) in paired_forms(real, surrogate) {
                if !from.is_empty() && from != to && !patterns.contains(&from) {
                    patterns.push(from);
                    replacements.push(to.into_bytes());
                }
            }
        }
        if patterns.is_empty() {
            return Ok(Scrubber { inner: None });
        }
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        let preserves_length = patterns
            .iter()
            .zip(&replacements)
            .all(|(from, to)| from.len() == to.len());
        let matcher = Finder::new(&patterns)?;
        Ok(Scrubber {
            inner: Some(Arc::new(ScrubInner {
                matcher,
                replacements,
                longest,
                preserves_length,
            })),
        })
    }

    /// `data` with every known form of every real value replaced by the same form of its
    /// surrogate; borrowed when there was nothing to replace.
    pub fn scrub<'d>(&self, data: &'d [u8]) -> Cow<'d, [u8]> {
        let Some(inner) = &self.inner else {
            return Cow::Borrowed(data);
        };
        if !inner.matcher.is_match(data) {
            return Cow::Borrowed(data);
        }
        Cow::Owned(inner.matcher.replace_all(data, &inner.replacements))
    }

    /// The longest form looked for: a streaming caller must keep this many bytes minus one
    /// from the end of a chunk to catch a value split across chunks.
    pub fn longest_form(&self) -> usize {
        self.inner.as_ref().map_or(0, |inner| inner.longest)
    }

    /// Whether there is anything to scrub at all (some secret is configured).
    pub fn is_active(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether scrubbing never changes the length of the data (true unless a fixed
    /// surrogate differs in length from its real value); when false, a scrubbed body's
    /// `Content-Length` no longer holds.
    pub fn preserves_length(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|inner| inner.preserves_length)
    }

    /// A scrubber for a body that arrives in chunks: a real value split across chunk
    /// borders is still replaced.
    pub fn stream(&self) -> ScrubStream {
        ScrubStream {
            scrubber: self.clone(),
            carry: Vec::new(),
        }
    }
}

/// Scrubs a body chunk by chunk ([`Scrubber::stream`]). Holds back at most the longest
/// form minus one byte between chunks, so the output is exactly what [`Scrubber::scrub`]
/// gives on the whole body.
pub struct ScrubStream {
    scrubber: Scrubber,
    carry: Vec<u8>,
}

impl ScrubStream {
    /// Takes the next chunk; returns what can be released now. A chunk in which nothing
    /// is (or could become) a match passes as a slice of itself, not a copy: only the
    /// seam with the bytes held back and its own tail are copied.
    pub fn push_bytes(&mut self, chunk: Bytes) -> Released {
        let Some(inner) = &self.scrubber.inner else {
            return Released {
                first: Bytes::new(),
                second: chunk,
            };
        };
        let hold = inner.longest - 1;
        if chunk.len() >= hold {
            // A match that begins in the carry ends within `hold` bytes of the chunk.
            let mut seam = Vec::with_capacity(self.carry.len() + hold);
            seam.extend_from_slice(&self.carry);
            seam.extend_from_slice(&chunk[..hold]);
            if !inner.matcher.is_match(&seam) && !inner.matcher.is_match(&chunk) {
                let tail = chunk.len() - hold;
                let first = Bytes::from(std::mem::replace(&mut self.carry, chunk[tail..].to_vec()));
                return Released {
                    first,
                    second: chunk.slice(..tail),
                };
            }
        }
        Released {
            first: Bytes::from(self.push(&chunk)),
            second: Bytes::new(),
        }
    }

    /// Takes the next chunk; returns what can be released now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(inner) = self.scrubber.inner.clone() else {
            return chunk.to_vec();
        };
        let mut pending = std::mem::take(&mut self.carry);
        pending.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(pending.len());
        let mut done = 0;
        for found in inner.matcher.find_iter(&pending) {
            // A match that more data could still lengthen is decided on the next chunk.
            if found.start + inner.longest > pending.len() {
                break;
            }
            out.extend_from_slice(&pending[done..found.start]);
            out.extend_from_slice(&inner.replacements[found.pattern]);
            done = found.end;
        }
        let hold_from = done.max(pending.len().saturating_sub(inner.longest - 1));
        out.extend_from_slice(&pending[done..hold_from]);
        self.carry = pending.split_off(hold_from);
        out
    }

    /// The scrubber this stream applies, for text that travels beside the body (the
    /// trailers that end it).
    pub fn scrubber(&self) -> &Scrubber {
        &self.scrubber
    }

    /// Ends the body: releases what was held back, scrubbed.
    pub fn finish(&mut self) -> Vec<u8> {
        let carry = std::mem::take(&mut self.carry);
        self.scrubber.scrub(&carry).into_owned()
    }
}

/// The forms a real value may take in output.
pub(crate) fn encoded_forms(real: &str) -> Vec<String> {
    let mut forms = text_forms(real).to_vec();
    forms.extend(
        base64_fragments(real.as_bytes(), MIN_BASE64_FRAGMENT)
            .into_iter()
            .flatten(),
    );
    forms
}

/// The base64 forms of `real` alone (every alignment, standard and URL-safe alphabets):
/// the forms a line break or a space may interrupt (MIME and PEM wrapping).
pub(crate) fn base64_forms(real: &str) -> Vec<String> {
    base64_fragments(real.as_bytes(), MIN_BASE64_FRAGMENT)
        .into_iter()
        .flatten()
        .collect()
}

/// Each form of `real` with the same form of `surrogate`.
fn paired_forms(real: &str, surrogate: &str) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = text_forms(real)
        .into_iter()
        .zip(text_forms(surrogate))
        .collect();
    let fragments = base64_fragments(real.as_bytes(), MIN_BASE64_FRAGMENT)
        .into_iter()
        .zip(base64_fragments(surrogate.as_bytes(), 1));
    for (from, to) in fragments {
        if let Some(from) = from {
            // A surrogate too short to have a fragment at this alignment: its raw form.
            pairs.push((from, to.unwrap_or_else(|| surrogate.to_owned())));
        }
    }
    pairs
}

/// Raw, percent-encoded (upper- and lower-case hex), JSON-escaped (with and without `\/`).
fn text_forms(text: &str) -> [String; 5] {
    let json = serde_json::to_string(text).unwrap_or_else(|_| format!("\"{text}\""));
    let inner = json[1..json.len() - 1].to_owned();
    let slashed = inner.replace('/', "\\/");
    [
        text.to_owned(),
        percent_encode(text, true),
        percent_encode(text, false),
        inner,
        slashed,
    ]
}

/// Percent-encodes every byte outside the URL unreserved set, in upper- or lower-case hex.
fn percent_encode(text: &str, upper: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else if upper {
            out.push_str(&format!("%{byte:02X}"));
        } else {
            out.push_str(&format!("%{byte:02x}"));
        }
    }
    out
}

/// The base64 characters that depend only on `bytes`, for each of the three alignments the
/// value can have inside a larger encoded text (e.g. `user:TOKEN` in Basic auth), in the
/// standard and URL-safe alphabets: six slots, in a fixed order, `None` where the fragment
/// would be shorter than `min_len`. Padding and the characters shared with neighbouring
/// bytes are left out so that the fragment is found wherever the value sits.
fn base64_fragments(bytes: &[u8], min_len: usize) -> Vec<Option<String>> {
    let mut fragments = Vec::with_capacity(6);
    for offset in 0..3usize {
        let mut shifted = vec![0u8; offset];
        shifted.extend_from_slice(bytes);
        let total_bits = shifted.len() * 8;
        // Characters entirely inside the value's bits.
        let first = (offset * 8).div_ceil(6);
        let end = total_bits / 6;
        for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
            let fragment = (end > first && end - first >= min_len)
                .then(|| engine.encode(&shifted).get(first..end).map(str::to_owned))
                .flatten();
            fragments.push(fragment);
        }
    }
    fragments
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD;
    use proptest::prelude::*;

    use super::*;

    const REAL: &str = "ghp_R3al/Secret+Value\"42";

    fn redactor() -> Redactor {
        Redactor::new([("GH_TOKEN", REAL)]).expect("redactor")
    }

    #[test]
    fn raw_value_is_redacted() {
        let text = format!("error: upstream said {REAL} is bad");
        assert_eq!(
            redactor().redact(&text),
            "error: upstream said [REDACTED:GH_TOKEN] is bad"
        );
    }

    #[test]
    fn encoded_forms_are_redacted() {
        let url = percent_encode(REAL, true);
        let json = serde_json::to_string(REAL).expect("json");
        let slashed = json.replace('/', "\\/");
        for text in [
            format!("GET /x?token={url}"),
            format!("GET /x?token={}", percent_encode(REAL, false)),
            format!("{{\"token\":{json}}}"),
            format!("{{\"token\":{slashed}}}"),
            format!("Authorization: Basic {}", STANDARD.encode(REAL)),
            format!(
                "Authorization: Basic {}",
                STANDARD.encode(format!("x:{REAL}"))
            ),
            format!(
                "Authorization: Basic {}",
                STANDARD.encode(format!("xy:{REAL}"))
            ),
            format!(
                "Authorization: Basic {}",
                URL_SAFE_NO_PAD.encode(format!("u:{REAL}"))
            ),
        ] {
            let redacted = redactor().redact(&text).into_owned();
            assert!(
                redacted.contains("[REDACTED:GH_TOKEN]"),
                "{text} -> {redacted}"
            );
        }
    }

    #[test]
    fn scrubber_turns_each_form_into_the_surrogates_form() {
        let surrogate = "ghp_S7rg/Xabcde+Fghij\"09";
        assert_eq!(surrogate.len(), REAL.len());
        let scrubber = Scrubber::new([(REAL, surrogate)]).expect("scrubber");
        let raw = format!("token={REAL};");
        assert_eq!(
            scrubber.scrub(raw.as_bytes()).as_ref(),
            format!("token={surrogate};").as_bytes()
        );
        let url = format!("u={}", percent_encode(REAL, true));
        assert_eq!(
            scrubber.scrub(url.as_bytes()).as_ref(),
            format!("u={}", percent_encode(surrogate, true)).as_bytes()
        );
        let json = serde_json::to_string(REAL).expect("json");
        assert_eq!(
            scrubber.scrub(json.as_bytes()).as_ref(),
            serde_json::to_string(surrogate).expect("json").as_bytes()
        );
        let encoded = STANDARD.encode(format!("user:{REAL}"));
        let scrubbed = scrubber.scrub(encoded.as_bytes()).into_owned();
        let decoded = STANDARD.decode(&scrubbed).expect("still base64");
        let decoded = String::from_utf8_lossy(&decoded);
        assert!(!decoded.contains("R3al"), "{decoded}");
        assert!(
            decoded.starts_with("user:ghp_S7rg/Xabcde+Fghij"),
            "{decoded}"
        );
        assert!(scrubber.longest_form() >= REAL.len());
        assert!(matches!(scrubber.scrub(b"clean"), Cow::Borrowed(_)));
    }

    #[test]
    fn clean_text_is_borrowed() {
        assert!(matches!(
            redactor().redact("nothing to see"),
            Cow::Borrowed("nothing to see")
        ));
        let empty = Redactor::new([]).expect("redactor");
        assert!(matches!(empty.redact("x"), Cow::Borrowed("x")));
    }

    fn scrubber() -> Scrubber {
        Scrubber::new([
            (REAL, "ghp_Surr/Surrog+Xyzwv\"17"),
            ("short", "fixed-longer"),
        ])
        .expect("scrubber")
    }

    #[test]
    fn a_value_split_across_chunks_is_scrubbed() {
        let body = format!("{{\"token\":\"{REAL}\"}}");
        let (a, b) = body.as_bytes().split_at(15);
        let mut stream = scrubber().stream();
        let mut out = stream.push(a);
        out.extend(stream.push(b));
        out.extend(stream.finish());
        assert!(!String::from_utf8_lossy(&out).contains("R3al"));
        assert_eq!(out, scrubber().scrub(body.as_bytes()).into_owned());
    }

    #[test]
    fn length_preservation_is_reported() {
        assert!(!scrubber().preserves_length());
        let equal = Scrubber::new([("abcdef", "uvwxyz")]).expect("scrubber");
        assert!(equal.preserves_length());
    }

    proptest! {
        #[test]
        fn streaming_equals_scrubbing_the_whole(
            filler in proptest::collection::vec(prop_oneof![Just("x"), Just(REAL), Just("short"), Just("ghp_"), Just("sh")], 0..12),
            cuts in proptest::collection::vec(0usize..200, 0..6),
        ) {
            let body: Vec<u8> = filler.concat().into_bytes();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort_unstable();
            let mut stream = scrubber().stream();
            let mut out = Vec::new();
            let mut from = 0;
            for cut in cuts {
                out.extend(stream.push(&body[from..cut]));
                from = cut;
            }
            out.extend(stream.push(&body[from..]));
            out.extend(stream.finish());
            prop_assert_eq!(out, scrubber().scrub(&body).into_owned());
        }

        /// The zero-copy path gives the same bytes as the copying one, in any mix.
        #[test]
        fn pushing_bytes_equals_scrubbing_the_whole(
            filler in proptest::collection::vec(prop_oneof![Just("x"), Just(REAL), Just("short"), Just("ghp_"), Just(CLEAN)], 0..12),
            cuts in proptest::collection::vec(0usize..500, 0..6),
            zero_copy in proptest::collection::vec(any::<bool>(), 7),
        ) {
            let body = Bytes::from(filler.concat().into_bytes());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort_unstable();
            cuts.push(body.len());
            let mut stream = scrubber().stream();
            let mut out = Vec::new();
            let mut from = 0;
            for (cut, zero_copy) in cuts.into_iter().zip(zero_copy) {
                if zero_copy {
                    let released = stream.push_bytes(body.slice(from..cut));
                    out.extend_from_slice(&released.first);
                    out.extend_from_slice(&released.second);
                } else {
                    out.extend(stream.push(&body[from..cut]));
                }
                from = cut;
            }
            out.extend(stream.finish());
            prop_assert_eq!(out, scrubber().scrub(&body).into_owned());
        }
    }

    /// Longer than any form: a chunk of it takes the zero-copy path.
    const CLEAN: &str = "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz";

    #[test]
    fn a_clean_chunk_passes_as_a_slice_of_itself() {
        let mut stream = scrubber().stream();
        let chunk = Bytes::from(CLEAN.repeat(4));
        let released = stream.push_bytes(chunk.clone());
        assert!(released.first.is_empty());
        assert_eq!(released.second.as_ptr(), chunk.as_ptr());
        let mut out = released.second.to_vec();
        out.extend(stream.finish());
        assert_eq!(out, chunk);
    }
}
