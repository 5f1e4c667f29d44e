//! The places where a real value reaches the outbound guard changed on its way, and the
//! matchers for them (docs/security.md, "Outbound guard"):
//!
//! * **lower-cased**: host names (CONNECT target, SNI, `Host`, `:authority`) and header
//!   names (HTTP/2 sends them lower-case, the `http` crate keeps them so) are compared
//!   with every form of every value, ASCII case ignored ([`ValueMatcher::insensitive`]);
//! * **wrapped**: base64 broken into lines (MIME wraps at 76 columns, PEM at 64) or spread
//!   out with spaces. The data is searched once more with ASCII white space and the JSON
//!   escapes `\n`, `\r`, `\t` taken out ([`Squeezer`]), for the base64 forms of every
//!   value ([`ValueMatcher::wrapped`]).

use aho_corasick::{AhoCorasick, BuildError, MatchKind};

use crate::finder::Finder;

/// Finds the forms of real values in data; each pattern stands for one secret.
pub(super) struct ValueMatcher {
    /// The first candidate, at SIMD speed (`None` for a case-insensitive matcher, which
    /// only searches short names).
    first: Option<Finder>,
    /// Every match from the first candidate on (overlapping: a match of one secret cannot
    /// hide another's).
    matcher: AhoCorasick,
    /// The secret (policy index) of each pattern.
    secrets: Vec<usize>,
    /// The longest pattern, in bytes.
    pub(super) longest: usize,
}

impl ValueMatcher {
    /// A matcher for `(secret, form)` pairs that ignores ASCII case. `None` when there are
    /// no forms.
    pub(super) fn insensitive(forms: &[(usize, String)]) -> Result<Option<Self>, BuildError> {
        Self::build(forms, true)
    }

    /// A case-sensitive matcher for `(secret, form)` pairs, searched in squeezed data.
    /// `None` when there are no forms.
    pub(super) fn wrapped(forms: &[(usize, String)]) -> Result<Option<Self>, BuildError> {
        Self::build(forms, false)
    }

    fn build(forms: &[(usize, String)], insensitive: bool) -> Result<Option<Self>, BuildError> {
        let forms: Vec<&(usize, String)> = forms.iter().filter(|(_, f)| !f.is_empty()).collect();
        if forms.is_empty() {
            return Ok(None);
        }
        let patterns: Vec<&[u8]> = forms.iter().map(|(_, form)| form.as_bytes()).collect();
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .ascii_case_insensitive(insensitive)
            .build(&patterns)?;
        let first = if insensitive {
            None
        } else {
            Some(Finder::new(&patterns)?)
        };
        Ok(Some(ValueMatcher {
            first,
            matcher,
            secrets: forms.iter().map(|(secret, _)| *secret).collect(),
            longest: patterns.iter().map(|p| p.len()).max().unwrap_or(0),
        }))
    }

    /// The secrets whose forms occur in `data` (a secret may come more than once).
    pub(super) fn secrets_in(&self, data: &[u8]) -> Vec<usize> {
        let from = match &self.first {
            Some(first) => match first.find(data) {
                Some(found) => found.start,
                None => return Vec::new(),
            },
            None => 0,
        };
        self.matcher
            .find_overlapping_iter(&data[from..])
            .map(|found| self.secrets[found.pattern().as_usize()])
            .collect()
    }
}

/// 1 for the bytes a [`Squeezer`] takes out: ASCII white space.
const WHITE: [u8; 256] = byte_table(b" \t\r\n");
/// 1 for the letters of the JSON escapes a [`Squeezer`] takes out (`\n`, `\r`, `\t`).
const ESCAPED: [u8; 256] = byte_table(b"nrt");

const fn byte_table(bytes: &[u8]) -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut index = 0;
    while index < bytes.len() {
        table[bytes[index] as usize] = 1;
        index += 1;
    }
    table
}

/// Whether any byte of `word` is one a [`Squeezer`] looks at (white space, backslash):
/// the zero-byte test of each comparison, exact for "any".
fn has_special(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    [b' ', b'\t', b'\r', b'\n', b'\\']
        .iter()
        .fold(0, |found, &byte| {
            found | zero_in(word ^ (ONES * u64::from(byte)))
        })
        != 0
}

/// Squeezes `data` into `out` from `len` (room already made), one byte at a time:
/// `backslash` says the byte written last is a backslash that starts an escape whose
/// second byte has not come yet.
fn squeeze_bytes(data: &[u8], out: &mut [u8], len: &mut usize, backslash: &mut usize) {
    for &byte in data {
        // An escape's letter: its backslash (the byte before) goes too.
        let pair = *backslash & usize::from(ESCAPED[usize::from(byte)]);
        let white = usize::from(WHITE[usize::from(byte)]);
        out[*len] = byte;
        *len = *len + 1 - (white | pair) - pair;
        // A backslash starts an escape unless it ends one: in `\\n` the first backslash
        // escapes the second, and the `n` after them is a letter of the data.
        *backslash = usize::from(byte == b'\\') & (1 - *backslash);
    }
}

/// Takes ASCII white space (space, tab, CR, LF) and the JSON escapes `\n`, `\r`, `\t` out
/// of data that may arrive in chunks: a backslash ending one chunk is paired with the
/// next chunk's first byte (it must still be the last byte of the output then: see
/// [`Squeezer::keep`]). An escaped backslash (`\\`) is kept and escapes nothing after it.
#[derive(Clone, Debug, Default)]
pub(super) struct Squeezer {
    /// The last byte written is a backslash that starts an escape whose letter has not
    /// come yet: the next byte may take it out of the output.
    pending_backslash: bool,
}

impl Squeezer {
    /// How many of the last squeezed bytes a stream must keep so that a match of up to
    /// `longest` bytes ending in the next chunk is still whole: `longest - 1`, plus the
    /// pending backslash (the next chunk may take it out, and with it a byte of the
    /// window).
    pub(super) fn keep(&self, longest: usize) -> usize {
        longest.saturating_sub(1) + usize::from(self.pending_backslash)
    }

    /// Appends `data` to `out`, squeezed. Eight bytes at a time where none of them is
    /// taken out (most words of binary data), else branch-free per byte.
    pub(super) fn squeeze_into(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + data.len(), 0);
        let mut len = start;
        let mut backslash = usize::from(self.pending_backslash && start > 0);
        let mut words = data.chunks_exact(8);
        for word in words.by_ref() {
            let bytes: [u8; 8] = word.try_into().unwrap_or_default();
            if backslash == 0 && !has_special(u64::from_ne_bytes(bytes)) {
                out[len..len + 8].copy_from_slice(word);
                len += 8;
            } else {
                squeeze_bytes(word, out, &mut len, &mut backslash);
            }
        }
        squeeze_bytes(words.remainder(), out, &mut len, &mut backslash);
        out.truncate(len);
        self.pending_backslash = backslash == 1;
    }

    /// `data` squeezed, on its own.
    pub(super) fn squeeze(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(data.len());
        Squeezer::default().squeeze_into(data, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn white_space_and_json_escapes_go_across_chunks() {
        assert_eq!(
            Squeezer::squeeze(b"ab cd\r\nef\tgh\\nij\\rkl\\\"m"),
            b"abcdefghijkl\\\"m"
        );
        let mut squeezer = Squeezer::default();
        let mut out = Vec::new();
        for chunk in [&b"ab\\"[..], b"", b"ncd\\", b"xef"] {
            squeezer.squeeze_into(chunk, &mut out);
        }
        assert_eq!(out, b"abcd\\xef");
    }

    #[test]
    fn an_escaped_backslash_escapes_nothing_after_it() {
        let cases: [(&[u8], &[u8]); 5] = [
            (b"ab\\\\ncd", b"ab\\\\ncd"),
            (b"ab\\\\\\ncd", b"ab\\\\cd"),
            (b"ab\\\\\\\\ncd", b"ab\\\\\\\\ncd"),
            (b"\\\\n\\n\\\\\\t", b"\\\\n\\\\"),
            (b"a\\ \\nb", b"a\\b"),
        ];
        for (data, squeezed) in cases {
            assert_eq!(Squeezer::squeeze(data), squeezed);
            // Cut anywhere, the same.
            for cut in 0..=data.len() {
                let mut squeezer = Squeezer::default();
                let mut out = Vec::new();
                squeezer.squeeze_into(&data[..cut], &mut out);
                squeezer.squeeze_into(&data[cut..], &mut out);
                assert_eq!(out, squeezed, "cut at {cut}");
            }
        }
    }

    #[test]
    fn a_pending_backslash_is_kept_on_top_of_the_window() {
        let mut squeezer = Squeezer::default();
        let mut out = Vec::new();
        squeezer.squeeze_into(b"abc", &mut out);
        assert_eq!(squeezer.keep(10), 9);
        squeezer.squeeze_into(b"\\", &mut out);
        assert_eq!(squeezer.keep(10), 10);
        squeezer.squeeze_into(b"\\", &mut out);
        assert_eq!(squeezer.keep(10), 9);
    }

    proptest::proptest! {
        #[test]
        fn squeezing_in_chunks_is_squeezing_whole(
            data in proptest::collection::vec(
                proptest::sample::select(b"abn\\ \r\n\tt".to_vec()), 0..64),
            cuts in proptest::collection::vec(0usize..64, 0..8),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut squeezer = Squeezer::default();
            let mut out = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([data.len()]) {
                squeezer.squeeze_into(&data[from..cut], &mut out);
                from = cut;
            }
            proptest::prop_assert_eq!(out, Squeezer::squeeze(&data));
        }
    }

    #[test]
    fn the_insensitive_matcher_ignores_case_and_names_the_secret() {
        let forms = [
            (0, "ghp_AbC123xyz".to_owned()),
            (1, "Other-Value-9".to_owned()),
        ];
        let matcher = ValueMatcher::insensitive(&forms).unwrap().unwrap();
        assert_eq!(matcher.secrets_in(b"ghp_abc123xyz.example.test"), vec![0]);
        assert_eq!(matcher.secrets_in(b"x-other-value-9"), vec![1]);
        assert!(matcher.secrets_in(b"ghp_abc123xy").is_empty());
        assert!(ValueMatcher::insensitive(&[]).unwrap().is_none());
    }
}
