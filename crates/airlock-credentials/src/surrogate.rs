//! Format-preserving surrogates: what the sandbox holds instead of a real secret.
//!
//! A surrogate has the real value's length, each letter keeps its case class, each digit
//! stays a digit, every other character is kept, and the longest well-known prefix
//! (`ghp_`, `sk-ant-api03-`, `AKIA`, ...) is kept verbatim, so that clients validating the
//! shape of a key accept it. The random part comes from a CSPRNG.

use rand::CryptoRng;

/// Well-known credential prefixes kept verbatim (the longest one that matches wins).
pub const KNOWN_PREFIXES: &[&str] = &[
    // GitHub
    "github_pat_",
    "ghp_",
    "gho_",
    "ghs_",
    "ghu_",
    "ghr_",
    // Anthropic, OpenAI
    "sk-ant-api03-",
    "sk-ant-admin01-",
    "sk-ant-",
    "sk-proj-",
    "sk-svcacct-",
    "sk-",
    // Slack
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxe-",
    "xoxs-",
    "xapp-",
    // AWS
    "AKIA",
    "ASIA",
    // GitLab, npm, Hugging Face, PyPI
    "glpat-",
    "npm_",
    "hf_",
    "pypi-",
    // Google, Stripe, Groq, Replicate, DigitalOcean, Shopify, Linear
    "AIza",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "rk_test_",
    "gsk_",
    "r8_",
    "dop_v1_",
    "shpat_",
    "lin_api_",
];

/// How many draws may produce the real value again before giving up (only conceivable
/// for values with one or two random characters).
const MAX_ATTEMPTS: usize = 64;

/// The longest entry of [`KNOWN_PREFIXES`] that `value` starts with, or `""`.
pub fn known_prefix(value: &str) -> &'static str {
    KNOWN_PREFIXES
        .iter()
        .filter(|prefix| value.starts_with(**prefix))
        .max_by_key(|prefix| prefix.len())
        .copied()
        .unwrap_or("")
}

/// A fresh surrogate for `real` (see the module documentation), different from `real`.
/// `None` when `real` has no letter or digit after its prefix to randomise (or, against
/// all odds, every draw reproduced `real`).
pub fn generate_surrogate(real: &str, rng: &mut impl CryptoRng) -> Option<String> {
    let prefix = known_prefix(real);
    let rest = &real[prefix.len()..];
    if !rest.chars().any(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    for _ in 0..MAX_ATTEMPTS {
        let mut surrogate = String::with_capacity(real.len());
        surrogate.push_str(prefix);
        surrogate.extend(rest.chars().map(|c| randomise(c, rng)));
        if surrogate != real {
            return Some(surrogate);
        }
    }
    None
}

/// A random character of the same class as `c` (ASCII letters and digits), or `c` itself.
fn randomise(c: char, rng: &mut impl CryptoRng) -> char {
    let (base, count) = match c {
        'a'..='z' => (b'a', 26),
        'A'..='Z' => (b'A', 26),
        '0'..='9' => (b'0', 10),
        _ => return c,
    };
    char::from(base + uniform_below(count, rng))
}

/// A uniformly distributed number below `bound` (rejection sampling: no modulo bias).
fn uniform_below(bound: u8, rng: &mut impl CryptoRng) -> u8 {
    let limit = u8::MAX - u8::MAX % bound;
    loop {
        let mut byte = [0u8];
        rng.fill_bytes(&mut byte);
        if byte[0] < limit {
            return byte[0] % bound;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn same_shape(real: &str, surrogate: &str) -> bool {
        real.len() == surrogate.len()
            && real.chars().zip(surrogate.chars()).all(|(r, s)| match r {
                'a'..='z' => s.is_ascii_lowercase(),
                'A'..='Z' => s.is_ascii_uppercase(),
                '0'..='9' => s.is_ascii_digit(),
                _ => r == s,
            })
    }

    #[test]
    fn longest_known_prefix_is_kept() {
        let mut rng = rand::rng();
        for (real, prefix) in [
            ("ghp_abcdEFGH1234abcdEFGH1234abcdEFGH12", "ghp_"),
            ("github_pat_11ABCDEFG0123456789_abcdefXYZ", "github_pat_"),
            ("sk-ant-api03-abcDEF123-xyz", "sk-ant-api03-"),
            ("sk-proj-abcdef123456", "sk-proj-"),
            ("sk-abcdef123456", "sk-"),
            ("AKIAIOSFODNN7EXAMPLE", "AKIA"),
            ("xoxb-1234-5678-abcdef", "xoxb-"),
            ("plainsecret123", ""),
        ] {
            assert_eq!(known_prefix(real), prefix);
            let surrogate = generate_surrogate(real, &mut rng).expect("surrogate");
            assert!(surrogate.starts_with(prefix), "{surrogate}");
            assert!(same_shape(real, &surrogate), "{real} -> {surrogate}");
            assert_ne!(surrogate, real);
        }
    }

    #[test]
    fn nothing_to_randomise_is_refused() {
        let mut rng = rand::rng();
        assert_eq!(generate_surrogate("", &mut rng), None);
        assert_eq!(generate_surrogate("---...", &mut rng), None);
        assert_eq!(generate_surrogate("ghp_", &mut rng), None);
        assert_eq!(generate_surrogate("sk-ant-", &mut rng), None);
    }

    #[test]
    fn a_single_random_digit_still_differs() {
        let mut rng = rand::rng();
        for _ in 0..200 {
            assert_ne!(generate_surrogate("x-7", &mut rng).as_deref(), Some("x-7"));
        }
    }

    #[test]
    fn every_class_member_is_drawn() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2000 {
            seen.insert(randomise('a', &mut rng));
            seen.insert(randomise('A', &mut rng));
            seen.insert(randomise('0', &mut rng));
        }
        assert_eq!(seen.len(), 26 + 26 + 10);
    }

    proptest! {
        #[test]
        fn surrogates_keep_the_shape(prefix in proptest::sample::select(KNOWN_PREFIXES.to_vec()),
                                     body in "[A-Za-z0-9_./+=:-]{1,60}",
                                     seed in any::<u64>()) {
            let real = format!("{prefix}{body}");
            let mut rng = StdRng::seed_from_u64(seed);
            match generate_surrogate(&real, &mut rng) {
                Some(surrogate) => {
                    prop_assert!(same_shape(&real, &surrogate));
                    prop_assert!(surrogate.starts_with(known_prefix(&real)));
                    prop_assert_ne!(&surrogate, &real);
                }
                None => prop_assert!(!real[known_prefix(&real).len()..]
                    .chars()
                    .any(|c| c.is_ascii_alphanumeric())),
            }
        }

        #[test]
        fn two_draws_differ(body in "[A-Za-z0-9]{20,40}") {
            let mut rng = rand::rng();
            let first = generate_surrogate(&body, &mut rng);
            let second = generate_surrogate(&body, &mut rng);
            prop_assert!(first.is_some());
            prop_assert_ne!(first, second);
        }

        #[test]
        fn any_unicode_keeps_non_alphanumerics(real in "\\PC{1,30}", seed in any::<u64>()) {
            let mut rng = StdRng::seed_from_u64(seed);
            if let Some(surrogate) = generate_surrogate(&real, &mut rng) {
                prop_assert!(same_shape(&real, &surrogate));
            }
        }
    }
}
