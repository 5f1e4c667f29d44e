//! Counters derived from audit lines, and the Prometheus text exposition of them together
//! with the gauges the proxy and the policy store expose.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::summary::Summary;

/// Upper bounds (seconds) of the request latency histogram.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Counters fed by [`crate::Hub::observe`].
#[derive(Default)]
pub struct Metrics {
    /// (kind, decision, reason) → lines.
    decisions: Mutex<BTreeMap<(String, String, String), u64>>,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    /// Per bucket (non-cumulative), then +Inf.
    latency: Mutex<Latency>,
}

#[derive(Default)]
struct Latency {
    buckets: [u64; LATENCY_BUCKETS.len() + 1],
    sum: f64,
    count: u64,
}

/// The gauges read when `/metrics` is served.
pub struct Gauges {
    /// Client connections open now.
    pub open_connections: usize,
    /// Interception certificates cached.
    pub cached_certificates: usize,
    /// The policy version in force.
    pub policy_version: u64,
    /// Event-stream lines lost by slow subscribers.
    pub events_lagged: u64,
    /// The audit log's state (docs/reliability.md, "The audit log's disk").
    pub audit: airlock_audit::Status,
}

impl Metrics {
    pub(crate) fn count(&self, line: &Summary) {
        // A connection is counted once, by the line that closes it.
        if line.phase.as_deref() == Some("open") {
            return;
        }
        let events = line.count.unwrap_or(1).max(1);
        let key = (
            line.kind.clone(),
            line.decision.clone(),
            line.reason.clone().unwrap_or_default(),
        );
        *self
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_default() += events;
        self.bytes_up.fetch_add(
            line.bytes_up.unwrap_or(0).saturating_mul(events),
            Ordering::Relaxed,
        );
        self.bytes_down.fetch_add(
            line.bytes_down.unwrap_or(0).saturating_mul(events),
            Ordering::Relaxed,
        );
        if let Some(ms) = line.ms
            && matches!(line.kind.as_str(), "http" | "ws" | "mcp")
        {
            let seconds = ms / 1000.0;
            let mut latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
            let index = LATENCY_BUCKETS
                .iter()
                .position(|bound| seconds <= *bound)
                .unwrap_or(LATENCY_BUCKETS.len());
            latency.buckets[index] += 1;
            latency.sum += seconds;
            latency.count += 1;
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP airlock_decisions_total Audit lines by kind, decision and refusal reason.\n",
        );
        out.push_str("# TYPE airlock_decisions_total counter\n");
        for ((kind, decision, reason), count) in self
            .decisions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "airlock_decisions_total{{kind=\"{kind}\",decision=\"{decision}\",reason=\"{reason}\"}} {count}"
            );
        }
        out.push_str("# HELP airlock_bytes_total Bytes relayed, by direction.\n");
        out.push_str("# TYPE airlock_bytes_total counter\n");
        let _ = writeln!(
            out,
            "airlock_bytes_total{{direction=\"up\"}} {}",
            self.bytes_up.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "airlock_bytes_total{{direction=\"down\"}} {}",
            self.bytes_down.load(Ordering::Relaxed)
        );
        out.push_str("# HELP airlock_request_duration_seconds Time to serve an HTTP, WebSocket or MCP request.\n");
        out.push_str("# TYPE airlock_request_duration_seconds histogram\n");
        {
            let latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
            let mut cumulative = 0;
            for (bound, count) in LATENCY_BUCKETS.iter().zip(latency.buckets.iter()) {
                cumulative += count;
                let _ = writeln!(
                    out,
                    "airlock_request_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "airlock_request_duration_seconds_bucket{{le=\"+Inf\"}} {}",
                latency.count
            );
            let _ = writeln!(out, "airlock_request_duration_seconds_sum {}", latency.sum);
            let _ = writeln!(
                out,
                "airlock_request_duration_seconds_count {}",
                latency.count
            );
        }
        gauge(
            &mut out,
            "airlock_open_connections",
            "Client connections open now.",
            gauges.open_connections as u64,
        );
        gauge(
            &mut out,
            "airlock_policy_version",
            "Version of the policy in force.",
            gauges.policy_version,
        );
        gauge(
            &mut out,
            "airlock_certificate_cache_size",
            "Interception certificates cached.",
            gauges.cached_certificates as u64,
        );
        out.push_str(
            "# HELP airlock_events_lagged_total Event-stream lines lost by slow subscribers.\n",
        );
        out.push_str("# TYPE airlock_events_lagged_total counter\n");
        let _ = writeln!(out, "airlock_events_lagged_total {}", gauges.events_lagged);
        render_audit(&mut out, &gauges.audit);
        out
    }
}

/// The audit log's gauges and counters.
fn render_audit(out: &mut String, audit: &airlock_audit::Status) {
    gauge(
        out,
        "airlock_audit_log_available",
        "1 while the audit log is written, 0 while it is unavailable (requests refused).",
        u64::from(audit.healthy),
    );
    gauge(
        out,
        "airlock_audit_log_refused_now",
        "Requests refused since the audit log became unavailable (0 while available).",
        audit.refused,
    );
    for (name, help, value) in [
        (
            "airlock_audit_log_refused_total",
            "Requests refused because the audit log could not be written.",
            audit.refused_total,
        ),
        (
            "airlock_audit_log_outages_total",
            "Times the audit log became unavailable.",
            audit.outages,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
    if let Some(otlp) = &audit.otlp {
        render_otlp(out, otlp);
    }
}

/// The OTLP export's counters (`--audit-otlp`, docs/operations.md "OTLP export").
fn render_otlp(out: &mut String, otlp: &airlock_audit::otlp::Counts) {
    gauge(
        out,
        "airlock_audit_otlp_queued",
        "Audit lines waiting to be exported over OTLP.",
        otlp.queued,
    );
    for (name, help, value) in [
        (
            "airlock_audit_otlp_exported_total",
            "Audit lines the OTLP collector accepted.",
            otlp.exported,
        ),
        (
            "airlock_audit_otlp_dropped_total",
            "Audit lines not exported (queue full, refused, or not sent before shutdown).",
            otlp.dropped,
        ),
        (
            "airlock_audit_otlp_failures_total",
            "OTLP export requests that failed and were tried again.",
            otlp.failures,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}
