//! A strict reader of the Prometheus text exposition format (version 0.0.4), for the tests
//! that scrape `/metrics`. Written here rather than taken from a crate: `prometheus-parse`
//! (0.2.5) skips lines and values it cannot read, and `openmetrics-parser` is LGPL; this
//! one refuses the whole text instead, naming the line.
//!
//! Checked: every line is blank, a comment, a `# HELP`/`# TYPE` line or a sample; names and
//! label names are well formed; label values are quoted with only `\\`, `\"` and `\n`
//! escapes; values are floats (`+Inf`, `-Inf`, `NaN` included); a sample belongs to the
//! family the last `# TYPE` line declared (a histogram's `_bucket`, `_sum` and `_count`, a
//! summary's `_sum` and `_count`), each family is one group, no sample appears twice, and a
//! histogram's buckets are cumulative and end in `le="+Inf"` equal to its `_count`.

use std::collections::{BTreeMap, HashMap, HashSet};

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name, e.g. `airlock_request_duration_seconds_bucket`.
    pub name: String,
    /// Label name to (unescaped) value.
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// The samples of a whole exposition, in order.
#[derive(Debug)]
pub struct Exposition {
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the sample with exactly this name and these labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == labels)
            .map(|s| s.value)
    }

    /// The samples with this name, whatever their labels.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

struct Family {
    name: String,
    kind: Kind,
}

/// Parses a whole exposition, or says which line is wrong and why.
pub fn parse(text: &str) -> Result<Exposition, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("the exposition does not end with a line feed".to_owned());
    }
    let mut samples: Vec<Sample> = Vec::new();
    let mut family: Option<Family> = None;
    let mut typed: HashSet<String> = HashSet::new();
    let mut helped: HashSet<String> = HashSet::new();
    let mut finished: HashSet<String> = HashSet::new();
    let mut seen: HashSet<(String, BTreeMap<String, String>)> = HashSet::new();
    let mut histograms: Vec<String> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}: {line:?}", index + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment
                .trim_start_matches([' ', '\t'])
                .splitn(2, [' ', '\t']);
            let keyword = words.next().unwrap_or_default();
            if keyword != "HELP" && keyword != "TYPE" {
                continue; // an ordinary comment
            }
            let rest = words
                .next()
                .unwrap_or_default()
                .trim_start_matches([' ', '\t']);
            let (name, tail) = rest.split_once([' ', '\t']).unwrap_or((rest, ""));
            if !is_metric_name(name) {
                return Err(at(format!("bad metric name {name:?} in # {keyword}")));
            }
            if family.as_ref().is_none_or(|f| f.name != name) {
                if finished.contains(name) {
                    return Err(at(format!("family {name} appears in two groups")));
                }
                if let Some(old) = family.take() {
                    finished.insert(old.name);
                }
                family = Some(Family {
                    name: name.to_owned(),
                    kind: Kind::Untyped,
                });
            }
            if keyword == "HELP" {
                if !helped.insert(name.to_owned()) {
                    return Err(at(format!("second # HELP for {name}")));
                }
                check_help(tail.trim_start_matches([' ', '\t'])).map_err(at)?;
            } else {
                if !typed.insert(name.to_owned()) {
                    return Err(at(format!("second # TYPE for {name}")));
                }
                if samples
                    .iter()
                    .any(|s| belongs(name, Kind::Untyped, &s.name))
                {
                    return Err(at(format!("# TYPE for {name} after its samples")));
                }
                let kind = match tail.trim_matches([' ', '\t']) {
                    "counter" => Kind::Counter,
                    "gauge" => Kind::Gauge,
                    "histogram" => Kind::Histogram,
                    "summary" => Kind::Summary,
                    "untyped" => Kind::Untyped,
                    other => return Err(at(format!("unknown metric type {other:?}"))),
                };
                if kind == Kind::Histogram {
                    histograms.push(name.to_owned());
                }
                if let Some(current) = family.as_mut() {
                    current.kind = kind;
                }
            }
            continue;
        }
        let sample = parse_sample(line).map_err(at)?;
        let current = family
            .as_ref()
            .ok_or_else(|| at("a sample before any # TYPE line".to_owned()))?;
        if !belongs(&current.name, current.kind, &sample.name) {
            return Err(at(format!(
                "sample {} is not part of family {} ({:?})",
                sample.name, current.name, current.kind
            )));
        }
        let needs = match current.kind {
            Kind::Histogram if sample.name.ends_with("_bucket") => Some("le"),
            Kind::Summary if sample.name == current.name => Some("quantile"),
            _ => None,
        };
        if let Some(label) = needs {
            let bound = sample
                .labels
                .get(label)
                .ok_or_else(|| at(format!("no {label} label")))?;
            parse_float(bound).ok_or_else(|| at(format!("{label}={bound:?} is not a number")))?;
        }
        if !seen.insert((sample.name.clone(), sample.labels.clone())) {
            return Err(at("the same sample twice".to_owned()));
        }
        samples.push(sample);
    }
    for name in &histograms {
        check_histogram(name, &samples)?;
    }
    Ok(Exposition { samples })
}

/// Whether `sample` is a sample name of the family `family` of type `kind`.
fn belongs(family: &str, kind: Kind, sample: &str) -> bool {
    let suffixes: &[&str] = match kind {
        Kind::Histogram => &["_bucket", "_sum", "_count"],
        Kind::Summary => &["", "_sum", "_count"],
        Kind::Counter | Kind::Gauge | Kind::Untyped => &[""],
    };
    sample
        .strip_prefix(family)
        .is_some_and(|rest| suffixes.contains(&rest))
}

/// Buckets per label set are cumulative, include `+Inf`, and `+Inf` equals `_count`.
fn check_histogram(name: &str, samples: &[Sample]) -> Result<(), String> {
    let bucket_name = format!("{name}_bucket");
    let count_name = format!("{name}_count");
    let mut series: HashMap<BTreeMap<String, String>, Vec<(f64, f64)>> = HashMap::new();
    for sample in samples.iter().filter(|s| s.name == bucket_name) {
        let mut labels = sample.labels.clone();
        let le = labels.remove("le").and_then(|le| parse_float(&le));
        series
            .entry(labels)
            .or_default()
            .push((le.unwrap_or(f64::NAN), sample.value));
    }
    for (labels, mut buckets) in series {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
            return Err(format!("{name}{labels:?}: buckets are not cumulative"));
        }
        let last = buckets.last().copied().unwrap_or((0.0, 0.0));
        if last.0 != f64::INFINITY {
            return Err(format!("{name}{labels:?}: no le=\"+Inf\" bucket"));
        }
        let count = samples
            .iter()
            .find(|s| s.name == count_name && s.labels == labels)
            .map(|s| s.value);
        if count != Some(last.1) {
            return Err(format!(
                "{name}{labels:?}: _count {count:?} differs from the +Inf bucket {}",
                last.1
            ));
        }
    }
    Ok(())
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A HELP text may escape only `\\` and `\n`.
fn check_help(help: &str) -> Result<(), String> {
    let mut chars = help.chars();
    while let Some(c) = chars.next() {
        if c == '\\' && !matches!(chars.next(), Some('\\' | 'n')) {
            return Err("bad escape in # HELP text".to_owned());
        }
    }
    Ok(())
}

/// A value as the format writes it: a Go float, including `+Inf`, `-Inf` and `NaN`.
fn parse_float(text: &str) -> Option<f64> {
    let digits_or_special = text
        .trim_start_matches(['+', '-'])
        .chars()
        .next()
        .is_some_and(|c| {
            c.is_ascii_digit() || c == '.' || c == 'I' || c == 'i' || c == 'N' || c == 'n'
        });
    if !digits_or_special {
        return None;
    }
    text.parse::<f64>().ok()
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' ', '\t'])
        .ok_or_else(|| "a sample without a value".to_owned())?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        rest = parse_labels(after_brace, &mut labels)?;
    }
    let mut fields = rest.split([' ', '\t']).filter(|f| !f.is_empty());
    if !rest.starts_with([' ', '\t']) {
        return Err("no blank between the name or labels and the value".to_owned());
    }
    let value = fields.next().ok_or_else(|| "no value".to_owned())?;
    let value = parse_float(value).ok_or_else(|| format!("value {value:?} is not a number"))?;
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("timestamp {timestamp:?} is not an integer"))?;
    }
    if let Some(extra) = fields.next() {
        return Err(format!("unexpected {extra:?} after the value"));
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// Reads `name="value",...}` and returns what follows the closing brace.
fn parse_labels<'a>(
    mut rest: &'a str,
    labels: &mut BTreeMap<String, String>,
) -> Result<&'a str, String> {
    if let Some(after) = rest.strip_prefix('}') {
        return Ok(after);
    }
    loop {
        let (name, after_name) = rest
            .split_once("=\"")
            .ok_or_else(|| "a label without =\"value\"".to_owned())?;
        if !is_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        let mut value = String::new();
        let mut chars = after_name.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    _ => return Err(format!("bad escape in the value of label {name}")),
                },
                Some((at, '"')) => break at,
                Some((_, c)) => value.push(c),
                None => return Err(format!("unterminated value of label {name}")),
            }
        };
        if labels.insert(name.to_owned(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        rest = &after_name[end + 1..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if let Some(after) = rest.strip_prefix('}') {
            return Ok(after);
        } else {
            return Err(format!("expected , or }} after label {name}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# HELP requests_total Requests, by code.\n\
        # TYPE requests_total counter\n\
        requests_total{code=\"200\",path=\"/a \\\"b\\\" \\\\ \\n\"} 3\n\
        requests_total{code=\"403\"} 1 1700000000000\n\
        \n\
        # a plain comment\n\
        # TYPE latency_seconds histogram\n\
        latency_seconds_bucket{le=\"0.1\"} 1\n\
        latency_seconds_bucket{le=\"1\"} 2\n\
        latency_seconds_bucket{le=\"+Inf\"} 4\n\
        latency_seconds_sum 7.5\n\
        latency_seconds_count 4\n\
        # TYPE up gauge\n\
        up NaN\n\
        # TYPE rpc summary\n\
        rpc{quantile=\"0.5\"} -Inf\n\
        rpc_sum 1e3\n\
        rpc_count 2\n";

    #[test]
    fn reads_a_well_formed_exposition() {
        let exposition = parse(GOOD).expect("parses");
        assert_eq!(exposition.samples.len(), 11);
        assert_eq!(
            exposition.value(
                "requests_total",
                &[("code", "200"), ("path", "/a \"b\" \\ \n")]
            ),
            Some(3.0)
        );
        assert_eq!(
            exposition.value("requests_total", &[("code", "403")]),
            Some(1.0)
        );
        assert_eq!(exposition.value("latency_seconds_count", &[]), Some(4.0));
        assert_eq!(
            exposition.value("latency_seconds_bucket", &[("le", "+Inf")]),
            Some(4.0)
        );
        assert!(exposition.value("up", &[]).unwrap().is_nan());
        assert_eq!(
            exposition.value("rpc", &[("quantile", "0.5")]),
            Some(f64::NEG_INFINITY)
        );
        assert_eq!(exposition.value("rpc_sum", &[]), Some(1000.0));
        assert_eq!(exposition.named("requests_total").count(), 2);
        assert_eq!(exposition.value("requests_total", &[]), None);
    }

    /// Each broken text, with the words its error must contain.
    #[test]
    fn refuses_what_the_format_does_not_allow() {
        let cases: &[(&str, &str)] = &[
            ("# TYPE a counter\na 1", "line feed"),
            ("a 1\n", "before any # TYPE"),
            ("# TYPE a counter\nb 1\n", "not part of family"),
            ("# TYPE a counter\na_bucket 1\n", "not part of family"),
            ("# TYPE a counter\na\n", "without a value"),
            ("# TYPE a counter\na one\n", "not a number"),
            ("# TYPE a counter\na 0x10\n", "not a number"),
            ("# TYPE a counter\na 1 now\n", "timestamp"),
            ("# TYPE a counter\na 1 2 3\n", "after the value"),
            ("# TYPE a counter\na{x=\"1\"}1\n", "no blank"),
            ("# TYPE a counter\na{x=1} 1\n", "without =\"value\""),
            ("# TYPE a counter\na{1x=\"1\"} 1\n", "bad label name"),
            ("# TYPE a counter\na{x=\"1\\t\"} 1\n", "bad escape"),
            ("# TYPE a counter\na{x=\"1} 1\n", "unterminated"),
            ("# TYPE a counter\na{x=\"1\",x=\"2\"} 1\n", "twice"),
            (
                "# TYPE a counter\na{x=\"1\" y=\"2\"} 1\n",
                "expected , or }",
            ),
            ("# TYPE a counter\na{x=\"1\",} 1\n", "without =\"value\""),
            ("# TYPE a counter\na 1\na 2\n", "the same sample twice"),
            ("# TYPE 9a counter\n", "bad metric name"),
            ("# TYPE a countr\n", "unknown metric type"),
            ("# TYPE a counter\n# TYPE a gauge\n", "second # TYPE"),
            ("# HELP a x\n# HELP a y\n", "second # HELP"),
            ("# HELP a bad \\t escape\n", "bad escape"),
            (
                "# TYPE a counter\na 1\n# TYPE b gauge\nb 1\n# HELP a again\n",
                "two groups",
            ),
            ("# TYPE h histogram\nh_bucket 1\n", "no le label"),
            ("# TYPE h histogram\nh_bucket{le=\"x\"} 1\n", "not a number"),
            (
                "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
                "not cumulative",
            ),
            (
                "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n",
                "no le=\"+Inf\"",
            ),
            (
                "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n",
                "differs",
            ),
            ("# TYPE s summary\ns 1\n", "no quantile label"),
        ];
        for (text, words) in cases {
            let error = parse(text).expect_err(text);
            assert!(error.contains(words), "{text:?}: {error}");
        }
    }
}
