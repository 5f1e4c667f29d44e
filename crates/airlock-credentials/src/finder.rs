//! Finding the leftmost-longest occurrence of any of a set of byte patterns, at the same
//! speed on any traffic. Every body scanner of this crate (scrubbing, redaction, the swap
//! of surrogates, the outbound guard's first look) searches through a [`Finder`].
//!
//! aho-corasick's own choice of prefilter ranks bytes by their frequency in text: for a
//! set of real-value forms with few "rare" bytes it picks a rare-byte prefilter, which on
//! compressed or random data (package tarballs, model files) stops every 128 bytes and
//! cost 45% of the proxy's CPU on a download (docs/benchmarks.md, "Bulk download"). A
//! [`Finder`] instead searches with SIMD "Teddy" searchers directly, each over at most
//! [`GROUP`] patterns (where Teddy stays fast), and merges their leftmost matches; on a
//! CPU without the SIMD Teddy needs it falls back to an aho-corasick automaton.

use aho_corasick::packed::{self, Searcher};
use aho_corasick::{AhoCorasick, BuildError, Input, MatchKind, Span};

/// Patterns per Teddy searcher: aho-corasick's own limit past which Teddy slows down.
const GROUP: usize = 64;

/// A match: where it is and which pattern (an index into the patterns given to
/// [`Finder::new`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    /// The first byte of the match.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
    /// The caller's index of the pattern found.
    pub pattern: usize,
}

/// Leftmost-longest search over a fixed set of patterns. Cheap to search from many threads.
#[derive(Debug)]
pub(crate) struct Finder {
    engine: Engine,
    /// The caller's pattern index of each internal (longest-first) index.
    original: Vec<usize>,
}

#[derive(Debug)]
enum Engine {
    /// Teddy searchers over consecutive slices of the longest-first patterns.
    Packed(Vec<Searcher>),
    /// Where Teddy cannot be built (no SSSE3/AVX2 or NEON).
    Automaton(AhoCorasick),
}

impl Finder {
    /// A finder for `patterns` (none empty). Among matches that start at the same place
    /// the longest wins, so the result is the same whatever order the patterns come in.
    pub(crate) fn new<P: AsRef<[u8]>>(patterns: &[P]) -> Result<Finder, BuildError> {
        let mut original: Vec<usize> = (0..patterns.len()).collect();
        // Longest first: leftmost-first then means leftmost-longest.
        original.sort_by_key(|&i| std::cmp::Reverse(patterns[i].as_ref().len()));
        let sorted: Vec<&[u8]> = original.iter().map(|&i| patterns[i].as_ref()).collect();
        let engine = match packed_groups(&sorted) {
            Some(groups) => Engine::Packed(groups),
            None => Engine::Automaton(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostFirst)
                    .build(&sorted)?,
            ),
        };
        Ok(Finder { engine, original })
    }

    /// The leftmost-longest match that starts at or after `from`.
    pub(crate) fn find_at(&self, haystack: &[u8], from: usize) -> Option<Found> {
        if from > haystack.len() {
            return None;
        }
        match &self.engine {
            Engine::Packed(groups) => {
                let mut best: Option<Found> = None;
                for group in 0..groups.len() {
                    // Earlier groups hold longer patterns: they win a tie.
                    if let Some(found) = search_group(groups, group, haystack, from)
                        && best.is_none_or(|b| found.start < b.start)
                    {
                        best = Some(found);
                    }
                }
                best.map(|found| self.external(found))
            }
            Engine::Automaton(automaton) => {
                let input = Input::new(haystack).range(from..);
                automaton.find(input).map(|found| {
                    self.external(Found {
                        start: found.start(),
                        end: found.end(),
                        pattern: found.pattern().as_usize(),
                    })
                })
            }
        }
    }

    /// The leftmost-longest match in `haystack`.
    pub(crate) fn find(&self, haystack: &[u8]) -> Option<Found> {
        self.find_at(haystack, 0)
    }

    /// Whether any pattern occurs in `haystack`.
    pub(crate) fn is_match(&self, haystack: &[u8]) -> bool {
        self.find(haystack).is_some()
    }

    /// Every non-overlapping leftmost-longest match, left to right.
    pub(crate) fn find_iter<'f, 'h>(&'f self, haystack: &'h [u8]) -> FindIter<'f, 'h> {
        FindIter {
            finder: self,
            haystack,
            at: 0,
            cache: Vec::new(),
        }
    }

    /// `haystack` with every match replaced by `replacements[pattern]`.
    pub(crate) fn replace_all<R: AsRef<[u8]>>(
        &self,
        haystack: &[u8],
        replacements: &[R],
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(haystack.len());
        let mut done = 0;
        for found in self.find_iter(haystack) {
            out.extend_from_slice(&haystack[done..found.start]);
            out.extend_from_slice(replacements[found.pattern].as_ref());
            done = found.end;
        }
        out.extend_from_slice(&haystack[done..]);
        out
    }

    fn external(&self, found: Found) -> Found {
        Found {
            pattern: self.original[found.pattern],
            ..found
        }
    }
}

/// Teddy searchers over `sorted` in groups of [`GROUP`], or `None` where Teddy cannot be
/// built on this CPU.
fn packed_groups(sorted: &[&[u8]]) -> Option<Vec<Searcher>> {
    sorted
        .chunks(GROUP)
        .map(|group| {
            packed::Config::new()
                .match_kind(packed::MatchKind::LeftmostFirst)
                .builder()
                .extend(group)
                .build()
        })
        .collect()
}

/// Group `group`'s leftmost match at or after `from`, its pattern as an internal index.
fn search_group(groups: &[Searcher], group: usize, haystack: &[u8], from: usize) -> Option<Found> {
    groups[group]
        .find_in(haystack, Span::from(from..haystack.len()))
        .map(|m| Found {
            start: m.start(),
            end: m.end(),
            pattern: group * GROUP + m.pattern().as_usize(),
        })
}

/// Iterator of [`Finder::find_iter`]. With several Teddy groups each group's next match is
/// kept until the search passes it, so every group scans the haystack about once.
pub(crate) struct FindIter<'f, 'h> {
    finder: &'f Finder,
    haystack: &'h [u8],
    at: usize,
    /// Per group: its next match (internal pattern index) at or after where it was last
    /// searched from; `None` once the group has no more.
    cache: Vec<Option<Found>>,
}

impl FindIter<'_, '_> {
    /// The next match with several groups: the leftmost of each group's next match, the
    /// earlier (longer) group on a tie.
    fn next_grouped(&mut self, groups: &[Searcher]) -> Option<Found> {
        if self.cache.is_empty() {
            self.cache = (0..groups.len()).map(|g| self.search(groups, g)).collect();
        }
        let mut best: Option<Found> = None;
        for group in 0..groups.len() {
            if self.cache[group].is_some_and(|found| found.start < self.at) {
                self.cache[group] = self.search(groups, group);
            }
            if let Some(found) = self.cache[group]
                && best.is_none_or(|b| found.start < b.start)
            {
                best = Some(found);
            }
        }
        best
    }

    /// Group `group`'s leftmost match from the current position.
    fn search(&self, groups: &[Searcher], group: usize) -> Option<Found> {
        search_group(groups, group, self.haystack, self.at)
    }
}

impl Iterator for FindIter<'_, '_> {
    type Item = Found;

    fn next(&mut self) -> Option<Found> {
        if self.at > self.haystack.len() {
            return None;
        }
        let found = match &self.finder.engine {
            Engine::Packed(groups) if groups.len() > 1 => {
                let found = self.next_grouped(groups)?;
                self.finder.external(found)
            }
            _ => self.finder.find_at(self.haystack, self.at)?,
        };
        self.at = found.end;
        Some(found)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The reference: aho-corasick's own leftmost-longest search.
    fn reference(patterns: &[Vec<u8>], haystack: &[u8]) -> Vec<Found> {
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(patterns)
            .expect("automaton")
            .find_iter(haystack)
            .map(|m| Found {
                start: m.start(),
                end: m.end(),
                pattern: m.pattern().as_usize(),
            })
            .collect()
    }

    /// Distinct patterns: the pattern index of two equal patterns is arbitrary.
    fn distinct(patterns: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut seen = Vec::new();
        for pattern in patterns {
            if !seen.contains(&pattern) {
                seen.push(pattern);
            }
        }
        seen
    }

    #[test]
    fn longest_wins_at_the_same_start_in_any_order() {
        let finder = Finder::new(&["abc", "abcdef", "ab"]).expect("finder");
        let found: Vec<Found> = finder.find_iter(b"xxabcdefabcab").collect();
        let spans: Vec<(usize, usize, usize)> =
            found.iter().map(|f| (f.start, f.end, f.pattern)).collect();
        assert_eq!(spans, vec![(2, 8, 1), (8, 11, 0), (11, 13, 2)]);
        assert_eq!(finder.replace_all(b"-abcdef-", &["1", "2", "3"]), b"-2-");
    }

    #[test]
    fn many_groups_agree_with_the_automaton() {
        // 200 patterns: four Teddy groups.
        let patterns: Vec<Vec<u8>> = (0..200u32)
            .map(|i| format!("p{i:03}-{}", "x".repeat((i % 13) as usize)).into_bytes())
            .collect();
        let mut haystack = Vec::new();
        for i in (0..200u32).rev().step_by(7) {
            haystack.extend_from_slice(b"..");
            haystack.extend_from_slice(&patterns[i as usize]);
        }
        let finder = Finder::new(&patterns).expect("finder");
        let found: Vec<Found> = finder.find_iter(&haystack).collect();
        assert_eq!(found.len(), 29);
        assert_eq!(found, reference(&patterns, &haystack));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn same_matches_as_leftmost_longest(
            patterns in prop::collection::vec(prop::collection::vec(0u8..4, 1..6), 1..90),
            haystack in prop::collection::vec(0u8..4, 0..400),
        ) {
            let patterns = distinct(patterns);
            let finder = Finder::new(&patterns).expect("finder");
            let found: Vec<Found> = finder.find_iter(&haystack).collect();
            prop_assert_eq!(found, reference(&patterns, &haystack));
        }

        #[test]
        fn find_at_is_the_first_match_from_there(
            patterns in prop::collection::vec(prop::collection::vec(0u8..3, 1..5), 1..80),
            haystack in prop::collection::vec(0u8..3, 0..200),
            from in 0usize..220,
        ) {
            let patterns = distinct(patterns);
            let finder = Finder::new(&patterns).expect("finder");
            let expected = (from <= haystack.len())
                .then(|| reference(&patterns, &haystack[from..]).first().copied())
                .flatten()
                .map(|f| Found { start: f.start + from, end: f.end + from, ..f });
            prop_assert_eq!(finder.find_at(&haystack, from), expected);
        }
    }
}
