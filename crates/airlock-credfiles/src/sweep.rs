//! The last check of a projection, and the check of the text a line parser skips: a
//! real token must never be shown raw, even one the parser did not see (a commented-out
//! login, a line it does not read, the first of two duplicate JSON keys). Both look for
//! *token-shaped* text, and a hit hides the file (fail closed):
//!
//! - a well-known credential prefix (`airlock_credentials::KNOWN_PREFIXES`: `ghp_`,
//!   `sk-ant-`, `npm_`, `pypi-`, ...) at the start of a word, followed by at least
//!   [`PREFIXED_MIN`] token characters with a digit among them;
//! - a run of base64 / base64url characters (`A-Za-z0-9+/_-`) of at least [`MIXED_MIN`]
//!   characters holding an upper-case letter, a lower-case letter and a digit;
//! - a run of `A-Za-z0-9_` of at least [`LONG_MIN`] characters holding a letter and a
//!   digit (hex digests, long lower-case keys; a UUID's parts are shorter).
//!
//! The whole projected file is swept after every surrogate (and the text written in its
//! place) is masked out; text a line parser skips (comments, continuation lines) is also
//! refused when it reads like an entry of the file (`password = ...`, `_authToken=...`).

use airlock_credentials::KNOWN_PREFIXES;

use crate::formats::looks_like_credential;

/// Characters after a known prefix that make a word a token.
const PREFIXED_MIN: usize = 12;
/// Length of a mixed-case base64 run that is a token.
const MIXED_MIN: usize = 20;
/// Length of a letters-and-digits run that is a token.
const LONG_MIN: usize = 32;
/// Length of a word with a letter and a digit that makes a comment suspicious.
const COMMENT_WORD_MIN: usize = 16;

/// Whether `text`, once every string of `shown` (surrogates, the text written in their
/// place, values the file's format makes public) is masked out, still holds a
/// token-shaped run.
pub(crate) fn token_left(text: &str, shown: &[&str]) -> bool {
    let mut masked = text.to_owned();
    let mut shown: Vec<&str> = shown.iter().copied().filter(|s| !s.is_empty()).collect();
    shown.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for value in shown {
        masked = masked.replace(value, " ");
    }
    token_shaped(&masked)
}

/// Whether `text` holds a token-shaped run (see the module documentation).
pub(crate) fn token_shaped(text: &str) -> bool {
    prefixed(text)
        || runs(text, is_base64).any(|run| {
            run.len() >= MIXED_MIN
                && run.bytes().any(|b| b.is_ascii_uppercase())
                && run.bytes().any(|b| b.is_ascii_lowercase())
                && run.bytes().any(|b| b.is_ascii_digit())
        })
        || runs(text, is_word).any(|run| run.len() >= LONG_MIN && letters_and_digits(run))
}

/// Whether `comment` (a comment, or a line the parser does not read) holds anything
/// credential-like: a token-shaped run, a word of at least [`COMMENT_WORD_MIN`] letters
/// and digits, or a `KEY = VALUE` / `KEY: VALUE` whose key looks like a credential's (a
/// `${VARIABLE}` value is not one).
pub(crate) fn suspicious(comment: &str) -> bool {
    if token_shaped(comment)
        || runs(comment, |b| is_word(b) || b == b'-' || b == b'+')
            .any(|run| run.len() >= COMMENT_WORD_MIN && letters_and_digits(run))
    {
        return true;
    }
    comment.match_indices(['=', ':']).any(|(at, _)| {
        let key = comment[..at]
            .trim_end()
            .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .next()
            .unwrap_or_default();
        let value = comment[at + 1..].trim_start();
        !key.is_empty()
            && looks_like_credential(key)
            && !value.is_empty()
            && !value.starts_with("${")
    })
}

/// A known prefix at a word's start, then enough token characters with a digit.
fn prefixed(text: &str) -> bool {
    let bytes = text.as_bytes();
    (0..bytes.len()).any(|at| {
        let boundary = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
        boundary
            && KNOWN_PREFIXES.iter().any(|prefix| {
                bytes[at..].starts_with(prefix.as_bytes()) && {
                    let rest = &bytes[at + prefix.len()..];
                    let len = rest.iter().take_while(|b| is_base64(**b)).count();
                    len >= PREFIXED_MIN && rest[..len].iter().any(u8::is_ascii_digit)
                }
            })
    })
}

/// The maximal runs of bytes `keep` accepts.
fn runs(text: &str, keep: impl Fn(u8) -> bool + Copy) -> impl Iterator<Item = &str> {
    text.split(move |c: char| !c.is_ascii() || !keep(c as u8))
        .filter(|run| !run.is_empty())
}

fn is_base64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'_' | b'-')
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn letters_and_digits(run: &str) -> bool {
    run.bytes().any(|b| b.is_ascii_alphabetic()) && run.bytes().any(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_seen() {
        for text in [
            "; //registry.npmjs.org/:_authToken=npm_COMMENTEDrealCANARY0123456789",
            "old: ghp_abcdefghijkl0123456789",
            "x sk-ant-oat01-FIRSTdupREALcanary0123456789abcdef y",
            "aGVsbG8gd29ybGQgdGhpcyBpcyBhIHRva2VuMTIz",
            "0123456789abcdef0123456789abcdef01234567",
            "bWU6Z2hwX0ZJUlNUZHVwUkVBTGNhbmFyeTAxMjM0NTY3ODk=",
            "é→ghp_abcdefghijkl0123456789",
        ] {
            assert!(token_shaped(text), "{text}");
        }
    }

    #[test]
    fn ordinary_text_is_not_a_token() {
        for text in [
            r#"{"expiresAt": 4102444800000, "scopes": ["user:inference", "user:profile"]}"#,
            r#""account_id":"4f1e2d3c-5b6a-4789-9abc-def012345678""#,
            r#""last_refresh":"2026-11-27T00:00:00.123456789Z""#,
            r#""rateLimitTier":"default_claude_max_20x""#,
            "registry=https://registry.npmjs.org/\ncache=/home/user/.npm-cache\n",
            "index-servers =\n    pypi\n    private\n",
            "desk-top-application-settings-file",
            "https://index.docker.io/v1/",
            "é ghé_ sk-ünïcode ✓✓✓ ß",
        ] {
            assert!(!token_shaped(text), "{text}");
        }
    }

    #[test]
    fn masked_surrogates_are_not_tokens() {
        let text = "password ghp_SURROGATEabcdef0123456789 end";
        assert!(token_left(text, &[]));
        assert!(!token_left(text, &["ghp_SURROGATEabcdef0123456789"]));
    }

    #[test]
    fn credential_like_comments() {
        for comment in [
            "# password = hunter22",
            ";password=x1",
            "; //registry.npmjs.org/:_authToken=npm_x",
            "# old: machine h password COMMENTEDnetrcREAL012345",
            "# token: abc",
        ] {
            assert!(suspicious(comment), "{comment}");
        }
        for comment in [
            "# the company mirror",
            "; registry: https://npm.example.com/",
            "# private registry, see the wiki",
            "# //npm.example.com/:_authToken=${NPM_TOKEN}",
        ] {
            assert!(!suspicious(comment), "{comment}");
        }
    }
}
