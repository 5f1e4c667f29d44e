//! What the control plane reads of an audit line: the few fields that the fan-out filters
//! on and the metrics count. The lowest module of the crate: it imports nothing from it.

/// The fields of an audit line that the hub and the metrics look at.
#[derive(serde::Deserialize)]
pub(crate) struct Summary {
    pub(crate) kind: String,
    pub(crate) decision: String,
    #[serde(default)]
    pub(crate) reason: Option<String>,
    #[serde(default)]
    pub(crate) bytes_up: Option<u64>,
    #[serde(default)]
    pub(crate) bytes_down: Option<u64>,
    #[serde(default)]
    pub(crate) ms: Option<f64>,
    /// `open` on the line written when a long-lived connection opens.
    #[serde(default)]
    pub(crate) phase: Option<String>,
    /// How many identical events the line stands for (folded lines; absent = 1).
    #[serde(default)]
    pub(crate) count: Option<u64>,
}
