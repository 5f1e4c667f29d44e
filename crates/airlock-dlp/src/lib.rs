//! Well-known credential formats and how to recognise one in bytes that leave the sandbox
//! (the outbound guard, docs/security.md "Outbound guard"). Pure: no I/O.
//!
//! [`FORMATS`] is the one table: each entry names a `kind` (what `dlp.allow[].kinds`
//! lists), the literal prefixes that start a token and the shape of what follows. A caller
//! finds prefixes with one automaton over [`prefixes`] (together with whatever else it
//! looks for) and asks [`examine`] whether the bytes from a prefix on are a token. To add a
//! format, add a row to [`FORMATS`]; nothing else changes.

#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

/// What may follow a format's prefix.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// Exactly `len` bytes of `charset`, not followed by another byte of it, passing
    /// `check` (on the bytes after the prefix) when there is one.
    Fixed {
        /// How many bytes follow the prefix.
        len: usize,
        /// Which bytes they may be.
        charset: fn(u8) -> bool,
        /// A checksum or other test on those bytes.
        check: Option<fn(&[u8]) -> bool>,
    },
    /// At least `min` bytes of `charset` (the token is the whole run).
    AtLeast {
        /// The shortest run that counts.
        min: usize,
        /// Which bytes the run may hold.
        charset: fn(u8) -> bool,
    },
    /// A PEM private-key header: `[A-Z0-9 ]*` ending in `PRIVATE KEY-----` or
    /// `PRIVATE KEY BLOCK-----` (PGP), within [`PEM_LABEL_MAX`] bytes.
    PemPrivateKey,
}

/// One well-known credential format.
#[derive(Clone, Copy, Debug)]
pub struct Format {
    /// The name used in `dlp.allow[].kinds` and in audit lines (`"credential"`).
    pub kind: &'static str,
    /// Literal prefixes, case-sensitive.
    pub prefixes: &'static [&'static str],
    /// What follows the prefix.
    pub shape: Shape,
    /// A documentation example that is not a credential (AWS's `...EXAMPLE` keys).
    pub example_suffix: Option<&'static str>,
}

/// The longest label between `-----BEGIN ` and `-----` looked at.
pub const PEM_LABEL_MAX: usize = 48;

/// Every format the guard knows, one row each.
pub const FORMATS: &[Format] = &[
    Format {
        kind: "github",
        prefixes: &["ghp_", "gho_", "ghu_", "ghs_", "ghr_"],
        shape: Shape::Fixed {
            len: 36,
            charset: is_alnum,
            check: Some(github_checksum_ok),
        },
        example_suffix: None,
    },
    Format {
        kind: "github",
        prefixes: &["github_pat_"],
        shape: Shape::Fixed {
            len: 82,
            charset: is_word,
            check: None,
        },
        example_suffix: None,
    },
    Format {
        kind: "aws",
        prefixes: &["AKIA", "ASIA"],
        shape: Shape::Fixed {
            len: 16,
            charset: is_base32_upper,
            check: None,
        },
        example_suffix: Some("EXAMPLE"),
    },
    Format {
        kind: "anthropic",
        prefixes: &["sk-ant-"],
        shape: Shape::AtLeast {
            min: 32,
            charset: is_token,
        },
        example_suffix: None,
    },
    Format {
        kind: "openai",
        prefixes: &["sk-proj-", "sk-svcacct-", "sk-admin-"],
        shape: Shape::AtLeast {
            min: 32,
            charset: is_token,
        },
        example_suffix: None,
    },
    Format {
        kind: "slack",
        prefixes: &["xoxa-", "xoxb-", "xoxe-", "xoxp-", "xoxr-", "xoxs-"],
        shape: Shape::AtLeast {
            min: 10,
            charset: is_slack,
        },
        example_suffix: None,
    },
    Format {
        kind: "gitlab",
        prefixes: &["glpat-"],
        shape: Shape::AtLeast {
            min: 20,
            charset: is_token,
        },
        example_suffix: None,
    },
    Format {
        kind: "npm",
        prefixes: &["npm_"],
        shape: Shape::Fixed {
            len: 36,
            charset: is_alnum,
            check: None,
        },
        example_suffix: None,
    },
    Format {
        kind: "private_key",
        prefixes: &["-----BEGIN "],
        shape: Shape::PemPrivateKey,
        example_suffix: None,
    },
];

/// The kinds of [`FORMATS`], each once, in table order.
pub fn kinds() -> Vec<&'static str> {
    let mut kinds: Vec<&'static str> = Vec::new();
    for format in FORMATS {
        if !kinds.contains(&format.kind) {
            kinds.push(format.kind);
        }
    }
    kinds
}

/// Every prefix with the index of its row in [`FORMATS`].
pub fn prefixes() -> impl Iterator<Item = (&'static str, usize)> {
    FORMATS
        .iter()
        .enumerate()
        .flat_map(|(index, format)| format.prefixes.iter().map(move |prefix| (*prefix, index)))
}

/// The most bytes from the start of a prefix that [`examine`] needs to decide.
pub fn lookahead() -> usize {
    FORMATS
        .iter()
        .map(|format| {
            let longest_prefix = format.prefixes.iter().map(|p| p.len()).max().unwrap_or(0);
            longest_prefix
                + match format.shape {
                    Shape::Fixed { len, .. } => len + 1,
                    Shape::AtLeast { min, .. } => min,
                    Shape::PemPrivateKey => PEM_LABEL_MAX + " BLOCK-----".len(),
                }
        })
        .max()
        .unwrap_or(0)
}

/// What the bytes after a prefix are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A credential of the format, `len` bytes long from the start of the prefix.
    Token {
        /// Its length including the prefix.
        len: usize,
    },
    /// Not a credential (wrong shape, bad checksum, documentation example).
    Not,
    /// Cannot tell yet: more bytes are needed and the data may not have ended.
    NeedMore,
}

/// Whether `data`, which starts with a prefix of `FORMATS[format]` of `prefix_len` bytes,
/// is a token of that format. `at_end` says that `data` holds everything there is (no
/// byte follows its last one).
pub fn examine(format: usize, data: &[u8], prefix_len: usize, at_end: bool) -> Verdict {
    examine_run(format, data, prefix_len, at_end, None)
}

/// [`examine`], given for an [`Shape::AtLeast`] format the length of the run after the
/// prefix when the caller already knows it (`run`), so that the run is not counted again.
fn examine_run(
    format: usize,
    data: &[u8],
    prefix_len: usize,
    at_end: bool,
    run: Option<usize>,
) -> Verdict {
    let Some(row) = FORMATS.get(format) else {
        return Verdict::Not;
    };
    let rest = data.get(prefix_len..).unwrap_or_default();
    let verdict = match row.shape {
        Shape::Fixed {
            len,
            charset,
            check,
        } => fixed(rest, len, charset, check, at_end),
        Shape::AtLeast { min, charset } => {
            let run = run.unwrap_or_else(|| run_length(rest, charset));
            (run >= min).then_some(run)
        }
        Shape::PemPrivateKey => pem(rest),
    };
    match (verdict, row.example_suffix) {
        (Some(len), Some(suffix)) if rest[..len].ends_with(suffix.as_bytes()) => Verdict::Not,
        (Some(len), _) => Verdict::Token {
            len: prefix_len + len,
        },
        (None, _) if undecided(row.shape, rest, at_end) => Verdict::NeedMore,
        (None, _) => Verdict::Not,
    }
}

/// A [`Verdict::Token`]'s tail length, or `None` (not a token, or not yet decidable).
fn fixed(
    rest: &[u8],
    len: usize,
    charset: fn(u8) -> bool,
    check: Option<fn(&[u8]) -> bool>,
    at_end: bool,
) -> Option<usize> {
    let body = rest.get(..len)?;
    if !body.iter().all(|&b| charset(b)) {
        return None;
    }
    match rest.get(len) {
        Some(&next) if charset(next) => return None,
        None if !at_end => return None,
        _ => {}
    }
    check.is_none_or(|check| check(body)).then_some(len)
}

/// How many bytes of `charset` `rest` starts with (an [`Shape::AtLeast`] token is the whole
/// run, at least `min` long: its end need not be known yet).
fn run_length(rest: &[u8], charset: fn(u8) -> bool) -> usize {
    let run = rest.iter().take_while(|&&b| charset(b)).count();
    #[cfg(test)]
    tests::SCANNED.with(|scanned| scanned.set(scanned.get() + run));
    run
}

fn pem(rest: &[u8]) -> Option<usize> {
    let label = rest
        .iter()
        .take(PEM_LABEL_MAX)
        .take_while(|&&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' ')
        .count();
    let after = &rest[label..];
    let head = &rest[..label];
    if !(head.ends_with(b"PRIVATE KEY") || head.ends_with(b"PRIVATE KEY BLOCK")) {
        return None;
    }
    after.starts_with(b"-----").then_some(label + 5)
}

/// Whether a shape that is not (yet) a token could still become one with more bytes.
fn undecided(shape: Shape, rest: &[u8], at_end: bool) -> bool {
    if at_end {
        return false;
    }
    match shape {
        Shape::Fixed { len, charset, .. } => rest.len() <= len && rest.iter().all(|&b| charset(b)),
        Shape::AtLeast { min, charset } => rest.len() < min && rest.iter().all(|&b| charset(b)),
        Shape::PemPrivateKey => {
            let label_ok = rest
                .iter()
                .take(PEM_LABEL_MAX)
                .all(|&b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' ' || b == b'-');
            label_ok && rest.len() < PEM_LABEL_MAX + " BLOCK-----".len()
        }
    }
}

/// One token found by [`find_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its format's kind.
    pub kind: &'static str,
    /// Where it starts.
    pub start: usize,
    /// Its length including the prefix.
    pub len: usize,
}

/// Every token in `data` (which holds everything there is), overlapping ones included,
/// in order of their start: each prefix tried at each position. The reference the
/// streaming guard is tested against; also used on whole header values and paths.
///
/// Linear in `data`: a byte no prefix starts with is passed over, and the run after an
/// [`Shape::AtLeast`] prefix is counted once for all the prefixes inside it
/// ([`RunEnds`]), not again from each of them (a value of `xoxa-` repeated would
/// otherwise cost the square of its length).
pub fn find_all(data: &[u8]) -> Vec<Found> {
    let mut first = [false; 256];
    for (prefix, _) in prefixes() {
        first[usize::from(prefix.as_bytes()[0])] = true;
    }
    let mut runs = RunEnds::default();
    let mut found = Vec::new();
    for start in (0..data.len()).filter(|&start| first[usize::from(data[start])]) {
        for (prefix, format) in prefixes() {
            if !data[start..].starts_with(prefix.as_bytes()) {
                continue;
            }
            let after = start + prefix.len();
            let run = runs.run(format, data, after);
            if let Verdict::Token { len } =
                examine_run(format, &data[start..], prefix.len(), true, run)
            {
                found.push(Found {
                    kind: FORMATS[format].kind,
                    start,
                    len,
                });
            }
        }
    }
    found
}

/// The last run of each [`Shape::AtLeast`] format's bytes counted by [`find_all`]:
/// `(from, end)` with every byte of `from..end` in the charset and the byte at `end`
/// (if any) not. A run from a position inside it ends at `end` too.
#[derive(Default)]
struct RunEnds {
    last: [Option<(usize, usize)>; FORMATS.len()],
}

impl RunEnds {
    /// The length of the run of `FORMATS[format]`'s charset from `at` in `data`, or `None`
    /// for a format of another shape.
    fn run(&mut self, format: usize, data: &[u8], at: usize) -> Option<usize> {
        let Shape::AtLeast { charset, .. } = FORMATS.get(format)?.shape else {
            return None;
        };
        let slot = &mut self.last[format];
        let end = match *slot {
            Some((from, end)) if (from..=end).contains(&at) => end,
            _ => {
                let end = at + run_length(data.get(at..).unwrap_or_default(), charset);
                *slot = Some((at, end));
                end
            }
        };
        Some(end - at)
    }
}

/// The passes [`redact`] makes before it gives up on a text.
pub const REDACT_PASSES: usize = 4;

/// What [`redact`] returns for a text that still holds a token after [`REDACT_PASSES`].
pub const REDACTED_WHOLE: &str = "[REDACTED]";

/// `text` with every token replaced by `[REDACTED:KIND]` (for what is logged about a
/// request); borrowed when it holds none. Replacing a token can turn a run before it into
/// a token (a fixed-length one whose next character was part of the replaced token), so
/// passes repeat until none is left; a text built to chain such runs (one pass per
/// token, each over the whole text) is replaced whole by [`REDACTED_WHOLE`] after
/// [`REDACT_PASSES`], so the work stays linear in the text.
pub fn redact(text: &str) -> std::borrow::Cow<'_, str> {
    let mut current = std::borrow::Cow::Borrowed(text);
    for _ in 0..REDACT_PASSES {
        let found = find_all(current.as_bytes());
        if found.is_empty() {
            return current;
        }
        current = std::borrow::Cow::Owned(redact_once(&current, &found));
    }
    if find_all(current.as_bytes()).is_empty() {
        current
    } else {
        std::borrow::Cow::Borrowed(REDACTED_WHOLE)
    }
}

/// One pass of [`redact`]: `found` (in order) replaced, overlapping ones skipped.
fn redact_once(text: &str, found: &[Found]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for token in found {
        // Tokens are ASCII from an ASCII prefix on, so these are character boundaries.
        if token.start < done {
            continue;
        }
        out.push_str(&text[done..token.start]);
        out.push_str(&format!("[REDACTED:{}]", token.kind));
        done = token.start + token.len;
    }
    out.push_str(&text[done..]);
    out
}

/// GitHub's token checksum: the last 6 characters are the CRC-32 of the first 30, in
/// base 62 (`0-9A-Za-z`), left-padded with `0`.
pub fn github_checksum_ok(body: &[u8]) -> bool {
    let Some((payload, checksum)) = body.split_at_checked(body.len().saturating_sub(6)) else {
        return false;
    };
    if checksum.len() != 6 {
        return false;
    }
    base62(checksum) == Some(u64::from(crc32fast::hash(payload)))
}

/// `digits` read as a base-62 number (`0-9A-Za-z`).
fn base62(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |value, &digit| {
        let d = match digit {
            b'0'..=b'9' => digit - b'0',
            b'A'..=b'Z' => digit - b'A' + 10,
            b'a'..=b'z' => digit - b'a' + 36,
            _ => return None,
        };
        value.checked_mul(62)?.checked_add(u64::from(d))
    })
}

/// `value` in base 62 (`0-9A-Za-z`), left-padded with `0` to 6 digits: the checksum
/// [`github_checksum_ok`] expects. For tests and examples.
pub fn github_checksum(payload: &[u8]) -> String {
    const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut value = u64::from(crc32fast::hash(payload));
    let mut out = vec![b'0'; 6];
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(value % 62) as usize];
        value /= 62;
    }
    String::from_utf8(out).unwrap_or_default()
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn is_slack(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

fn is_base32_upper(b: u8) -> bool {
    b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b)
}

#[cfg(test)]
mod tests;
