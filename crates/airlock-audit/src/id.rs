//! Decision ids (docs/contract.md §4 and §5): every decision gets one, written as `"id"` on
//! its audit line and in its refusal body, so that the agent (or the person reading its
//! output) can quote the refusal and the operator find its line.
//!
//! An id is 128 bits written as 32 lowercase hex digits. The first 16 are drawn at random
//! once per process (a run, a proxy, a sandbox daemon); the last 16 count that process's
//! decisions from 1. Ids are thus unique within a run, differ between runs but for a 2⁻⁶⁴
//! chance, sort in the order a process decided, and cost one atomic increment each (no
//! system call on the request path).

use std::fmt;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Serialize, Serializer};

/// The id of one decision (`"id"` on its audit line and in its refusal body).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DecisionId(u128);

/// This process's random half of every id, drawn on first use.
fn process_half() -> u64 {
    static HALF: OnceLock<u64> = OnceLock::new();
    *HALF.get_or_init(rand::random::<u64>)
}

/// The decisions numbered so far by this process.
static DECIDED: AtomicU64 = AtomicU64::new(0);

impl DecisionId {
    /// A new id, unique within this process.
    pub fn next() -> DecisionId {
        let count = DECIDED.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        DecisionId((u128::from(process_half()) << 64) | u128::from(count))
    }

    /// This process's half of every id (16 hex digits): names the instance that decided
    /// (`service.instance.id` of its OTLP records, [`crate::otlp`]).
    pub fn instance() -> String {
        format!("{:016x}", process_half())
    }

    /// The id whose 32 hex digits are `hex` (as written on a line), if they are.
    pub fn parse(hex: &str) -> Option<DecisionId> {
        if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        u128::from_str_radix(hex, 16).ok().map(DecisionId)
    }
}

impl fmt::Display for DecisionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl Serialize for DecisionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Formatted on the stack: no allocation per line.
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_unique_and_ordered_within_a_process() {
        let ids: Vec<DecisionId> = (0..1000).map(|_| DecisionId::next()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
        }
        let text = ids[0].to_string();
        assert_eq!(text.len(), 32);
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(DecisionId::parse(&text), Some(ids[0]));
        assert_eq!(&ids[0].to_string()[..16], &ids[999].to_string()[..16]);
        let json = serde_json::to_string(&ids[1]).unwrap();
        assert_eq!(json, format!("\"{}\"", ids[1]));
    }

    #[test]
    fn only_32_lowercase_hex_digits_parse() {
        assert_eq!(DecisionId::parse(&"0".repeat(31)), None);
        assert_eq!(DecisionId::parse(&"A".repeat(32)), None);
        assert_eq!(DecisionId::parse(&format!("+{}", "0".repeat(31))), None);
        assert!(DecisionId::parse(&"f".repeat(32)).is_some());
    }
}
