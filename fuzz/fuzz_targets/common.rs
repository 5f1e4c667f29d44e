//! Shared by the targets: the fixed secret they search for and a way to cut input into
//! chunks. (Each target includes this module and uses part of it.)
#![allow(dead_code)]

use airlock_credentials::Credentials;

/// The real value of the one configured secret.
pub const REAL: &str = "ghp_R3alValueOfTheTokenXYZ0123456789abc";

/// Credentials with one secret (`GH_TOKEN`, real value [`REAL`], hosts `home.example`),
/// built once per process.
pub fn credentials() -> &'static Credentials {
    static CREDENTIALS: std::sync::OnceLock<Credentials> = std::sync::OnceLock::new();
    CREDENTIALS.get_or_init(|| {
        let spec = format!("GH_TOKEN=ghp_SurrogateOfTheTokenXYZ012345678def={REAL}@home.example");
        let secret = airlock_policy::rule::parse_secret(&spec).expect("the fixed secret parses");
        Credentials::new(vec![(secret, REAL.to_owned())]).expect("the fixed secret builds")
    })
}

/// `data` cut into chunks whose sizes come from `sizes` (1..=256 each, cycled).
pub fn chunks<'a>(data: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut index = 0;
    while !rest.is_empty() {
        let size = sizes.get(index % sizes.len().max(1)).map_or(64, |&s| usize::from(s) + 1);
        let (head, tail) = rest.split_at(size.min(rest.len()));
        out.push(head);
        rest = tail;
        index += 1;
    }
    out
}
