//! `--audit-otlp URL` and its companions, shared by `proxy` (and so the gateway) and `run`:
//! every audit line also sent to an OpenTelemetry collector (docs/operations.md, "OTLP
//! export").

use std::path::PathBuf;

use clap::Args;

/// The OTLP export options.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct OtlpArgs {
    /// Also send every audit line as an OpenTelemetry log record (OTLP/HTTP, protobuf) to
    /// URL, normally `http(s)://COLLECTOR:4318/v1/logs`; batched, retried, never holding
    /// a request (docs/operations.md, "OTLP export").
    #[arg(long = "audit-otlp", value_name = "URL")]
    pub audit_otlp: Option<String>,
    /// Trust FILE's PEM certificates (beside the system's) for an https:// --audit-otlp.
    #[arg(long = "audit-otlp-ca", value_name = "FILE", requires = "audit_otlp")]
    pub audit_otlp_ca: Option<PathBuf>,
    /// Lines waiting for the collector at most; beyond, lines are dropped from the export
    /// (counted in /metrics and in a line of the audit file).
    #[arg(long = "audit-otlp-queue", value_name = "N", requires = "audit_otlp",
          default_value_t = airlock_audit::otlp::DEFAULT_QUEUE,
          value_parser = clap::value_parser!(usize))]
    pub audit_otlp_queue: usize,
}

impl OtlpArgs {
    /// The exporter's configuration, when `--audit-otlp` is given.
    pub(crate) fn config(&self) -> Option<airlock_audit::otlp::Config> {
        let url = self.audit_otlp.clone()?;
        Some(airlock_audit::otlp::Config {
            url,
            ca: self.audit_otlp_ca.clone(),
            queue: self.audit_otlp_queue.max(1),
        })
    }
}
