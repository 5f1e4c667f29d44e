//! The parts of `docker version` and `docker inspect` JSON that [`super::Docker`] reads.

use std::collections::BTreeMap;

use serde::Deserialize;

/// `docker version --format '{{json .}}'`, the parts used here.
#[derive(Deserialize)]
pub(super) struct EngineVersion {
    #[serde(rename = "Server")]
    pub(super) server: Option<ServerVersion>,
}

/// The server part of `docker version`.
#[derive(Deserialize)]
pub(super) struct ServerVersion {
    #[serde(rename = "Components", default)]
    pub(super) components: Vec<ServerComponent>,
}

/// One server component (`Engine`, `containerd`, `runc`, `docker-init`).
#[derive(Deserialize)]
pub(super) struct ServerComponent {
    #[serde(rename = "Name")]
    pub(super) name: String,
}

/// `docker inspect`, the parts used here.
#[derive(Deserialize)]
pub(super) struct Inspected {
    #[serde(rename = "Id")]
    pub(super) id: String,
    #[serde(rename = "Name")]
    pub(super) name: String,
    #[serde(rename = "Config")]
    pub(super) config: InspectedConfig,
    #[serde(rename = "State")]
    pub(super) state: InspectedState,
}

/// `Config` of `docker inspect`.
#[derive(Deserialize)]
pub(super) struct InspectedConfig {
    #[serde(rename = "Labels")]
    pub(super) labels: Option<BTreeMap<String, String>>,
}

/// `State` of `docker inspect`.
#[derive(Deserialize)]
pub(super) struct InspectedState {
    #[serde(rename = "Running")]
    pub(super) running: bool,
}
