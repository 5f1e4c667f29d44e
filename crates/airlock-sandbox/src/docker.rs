//! Placeholder: replaced by the docker CLI wrapper.
#![allow(missing_docs, dead_code, unused_variables)]
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
#[error("docker: {0}")]
pub struct DockerError(pub String);

#[derive(Clone, Debug)]
pub struct Docker {
    engine: PathBuf,
}

#[derive(Clone, Debug, Default)]
pub struct RunSpec {
    pub name: String,
    pub image: String,
    pub labels: Vec<(String, String)>,
    pub memory_mib: Option<u64>,
    pub millicpus: Option<u64>,
    pub pids: Option<u64>,
    pub workspace: Option<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct ContainerSummary {
    pub id: String,
    pub name: String,
    pub labels: Vec<(String, String)>,
}

impl Docker {
    pub fn detect() -> Result<Docker, DockerError> {
        Err(DockerError("stub".into()))
    }
    pub fn with_engine(engine: PathBuf) -> Docker {
        Docker { engine }
    }
    pub fn engine(&self) -> &Path {
        &self.engine
    }
    pub fn run_detached(&self, spec: &RunSpec) -> Result<String, DockerError> {
        Err(DockerError("stub".into()))
    }
    pub fn init_pid(&self, id: &str) -> Result<u32, DockerError> {
        Err(DockerError("stub".into()))
    }
    pub fn copy_into(&self, id: &str, host: &Path, inside: &Path) -> Result<(), DockerError> {
        Err(DockerError("stub".into()))
    }
    pub fn exec_command(
        &self,
        id: &str,
        cwd: &Path,
        env: &[(String, String)],
        argv: &[String],
    ) -> Command {
        Command::new("false")
    }
    pub fn is_running(&self, id: &str) -> Result<bool, DockerError> {
        Ok(false)
    }
    pub fn remove(&self, id: &str) -> Result<(), DockerError> {
        Ok(())
    }
    pub fn list_labelled(&self, key: &str) -> Result<Vec<ContainerSummary>, DockerError> {
        Ok(Vec::new())
    }
}
