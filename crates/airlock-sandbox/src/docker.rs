//! The `docker` command line, as the docker sandbox provider uses it: start a
//! long-lived container with no network of its own, find its init process
//! (whose network namespace airlock then captures), copy files in, build
//! `docker exec` commands, check, list and remove containers.
//!
//! Every call runs the CLI (`std::process::Command`; no Docker API client),
//! bounded in time: a call that does not finish in time is killed and is an
//! error. Podman is used, through the same commands, where `docker` is not
//! installed. Arguments are validated so that no value can be taken for an
//! option of the CLI.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

mod exec_status;
mod wire;

pub use exec_status::exec_failure_status;
use wire::{EngineVersion, Inspected};

/// Upper bound of every CLI call but copies.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound of `docker cp`.
const COPY_TIMEOUT: Duration = Duration::from_secs(600);
/// How often a running CLI call is checked for its end.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Most bytes of a call's standard output kept (the rest is read and dropped).
const MAX_STDOUT: usize = 4 << 20;
/// Most characters of a failed call's standard error kept in the error.
const MAX_STDERR_CHARS: usize = 2000;
/// Where the sandbox's workspace directory is mounted in the container.
pub const WORKSPACE_MOUNT: &str = "/workspace";

/// Errors of the container engine's command line.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// Neither `docker` nor `podman` is on `PATH`.
    #[error("no container engine: neither `docker` nor `podman` is on PATH")]
    NotInstalled,
    /// The command could not be started.
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why it could not start.
        #[source]
        source: io::Error,
    },
    /// The command ended unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// Its standard error, trimmed and cut to 2000 characters.
        stderr: String,
    },
    /// The command did not finish in time and was killed.
    #[error("`{command}` did not finish within {timeout:?} and was killed")]
    TimedOut {
        /// The command line.
        command: String,
        /// The time it was given.
        timeout: Duration,
    },
    /// The command succeeded but printed something this module cannot use.
    #[error("`{command}` printed unexpected output: {what}")]
    UnexpectedOutput {
        /// The command line.
        command: String,
        /// What was wrong with it.
        what: String,
    },
    /// An argument cannot be passed safely to the command line.
    #[error("invalid container request: {0}")]
    InvalidRequest(String),
}

/// Which engine the CLI talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Docker (`docker`).
    Docker,
    /// Podman (`podman`), used where `docker` is absent.
    Podman,
}

/// A container's full ID (lower-case hexadecimal, as `docker run -d` prints it).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerId(String);

impl ContainerId {
    /// The ID in `text`, if it is one: 12 to 64 lower-case hexadecimal digits.
    pub fn parse(text: &str) -> Option<ContainerId> {
        let valid = (12..=64).contains(&text.len())
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        valid.then(|| ContainerId(text.to_owned()))
    }

    /// The ID as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What to start: a long-lived container whose only process is
/// `sleep infinity` (the image must provide `sleep`, for example coreutils
/// or busybox), with no network (`--network none`), no capabilities
/// (`--cap-drop ALL`), `no-new-privileges`, and an init process as PID 1
/// where the engine has one. Commands are then run in it with
/// [`Docker::exec_command`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSpec {
    /// Container name: `[A-Za-z0-9][A-Za-z0-9_.-]*`.
    pub name: String,
    /// Image reference; it must already be present (`--pull never`).
    pub image: String,
    /// Labels (`--label KEY=VALUE`), for example `airlock.sandbox=NAME` to
    /// find the container again with [`Docker::list_labelled`].
    pub labels: Vec<(String, String)>,
    /// Memory limit in bytes (`--memory`).
    pub memory_bytes: Option<u64>,
    /// CPU limit in CPUs (`--cpus`), positive.
    pub cpus: Option<f64>,
    /// Process limit (`--pids-limit`).
    pub pids_limit: Option<u32>,
    /// Host directory bind-mounted read-write at [`WORKSPACE_MOUNT`]: the
    /// sandbox's private workspace, never the user's own tree. Absolute,
    /// existing, without `,` or `"`.
    pub workspace: Option<PathBuf>,
}

/// One container found by [`Docker::list_labelled`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSummary {
    /// Its full ID.
    pub id: ContainerId,
    /// Its name (without Docker's leading `/`).
    pub name: String,
    /// All its labels.
    pub labels: BTreeMap<String, String>,
    /// Whether it is running.
    pub running: bool,
}

/// The container engine's command line.
#[derive(Debug, Clone)]
pub struct Docker {
    program: PathBuf,
    engine: Engine,
    has_init: bool,
}

impl Docker {
    /// Finds `docker` on `PATH` (or `podman` if there is no `docker`) and
    /// checks that its daemon answers `version`. An engine that is
    /// installed but not running is an error carrying its own message.
    pub fn detect() -> Result<Docker, DockerError> {
        let (program, engine) = find_on_path("docker")
            .map(|program| (program, Engine::Docker))
            .or_else(|| find_on_path("podman").map(|program| (program, Engine::Podman)))
            .ok_or(DockerError::NotInstalled)?;
        let mut docker = Docker {
            program,
            engine,
            has_init: false,
        };
        let version = docker.call(["version", "--format", "{{json .}}"], CALL_TIMEOUT)?;
        let version: EngineVersion = docker.parse_json(&version, "version")?;
        // Docker lists its init (`docker-init`) among the server's components
        // and fails `version` when its daemon does not answer. Podman needs no
        // daemon, and its packages always bring an init (catatonit).
        docker.has_init = match (engine, version.server) {
            (Engine::Docker, Some(server)) => server
                .components
                .iter()
                .any(|component| component.name == "docker-init"),
            (Engine::Docker, None) => {
                return Err(DockerError::UnexpectedOutput {
                    command: docker.command_line(["version"]),
                    what: "no server answered".into(),
                });
            }
            (Engine::Podman, _) => true,
        };
        Ok(docker)
    }

    /// The engine recorded as `recorded` (only its file name counts: `docker` or
    /// `podman`), found on `PATH` again: a recorded path is never run as it is. `None` for
    /// any other name or when it is not on `PATH`.
    pub fn named(recorded: &Path) -> Option<Docker> {
        let name = recorded.file_name()?.to_str()?;
        if name != "docker" && name != "podman" {
            return None;
        }
        find_on_path(name).map(Docker::at)
    }

    /// The engine at `program`, as recorded by [`Docker::program`] of a detected one: for
    /// managing existing containers without asking the daemon for its version again.
    fn at(program: PathBuf) -> Docker {
        let engine = if program.file_name().is_some_and(|name| name == "podman") {
            Engine::Podman
        } else {
            Engine::Docker
        };
        Docker {
            program,
            engine,
            has_init: false,
        }
    }

    /// The engine's command-line program.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The engine found.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Starts the container described by `spec`, detached, and returns its ID.
    pub fn run_detached(&self, spec: &RunSpec) -> Result<ContainerId, DockerError> {
        let arguments = self.run_arguments(spec)?;
        let output = self.call(&arguments, CALL_TIMEOUT)?;
        let id = String::from_utf8_lossy(&output);
        let id = id.trim();
        ContainerId::parse(id).ok_or_else(|| DockerError::UnexpectedOutput {
            command: self.command_line(["run"]),
            what: format!("not a container ID: {:?}", bounded(id)),
        })
    }

    /// The `docker run` arguments for `spec`.
    fn run_arguments(&self, spec: &RunSpec) -> Result<Vec<String>, DockerError> {
        check_name(&spec.name)?;
        check_not_an_option(&spec.image, "image")?;
        let mut arguments: Vec<String> = [
            "run",
            "--detach",
            "--pull",
            "never",
            "--network",
            "none",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--name",
        ]
        .map(String::from)
        .into();
        arguments.push(spec.name.clone());
        if self.has_init {
            arguments.push("--init".into());
        }
        for (key, value) in &spec.labels {
            check_key(key, "label")?;
            arguments.extend(["--label".into(), format!("{key}={value}")]);
        }
        if let Some(bytes) = spec.memory_bytes {
            arguments.extend(["--memory".into(), bytes.to_string()]);
        }
        if let Some(cpus) = spec.cpus {
            if !(cpus.is_finite() && cpus > 0.0) {
                return Err(DockerError::InvalidRequest(format!(
                    "the CPU limit must be positive, not {cpus}"
                )));
            }
            arguments.extend(["--cpus".into(), cpus.to_string()]);
        }
        if let Some(pids) = spec.pids_limit {
            arguments.extend(["--pids-limit".into(), pids.to_string()]);
        }
        if let Some(workspace) = &spec.workspace {
            let source = workspace
                .to_str()
                .filter(|path| workspace.is_absolute() && !path.contains([',', '"', '\n', '\r']));
            let Some(source) = source else {
                return Err(DockerError::InvalidRequest(format!(
                    "the workspace must be an absolute path without `,` or `\"`: {}",
                    workspace.display()
                )));
            };
            arguments.extend([
                "--mount".into(),
                format!("type=bind,source={source},target={WORKSPACE_MOUNT}"),
            ]);
        }
        arguments.extend([spec.image.clone(), "sleep".into(), "infinity".into()]);
        Ok(arguments)
    }

    /// The host PID of the container's PID 1 (its init), whose
    /// `/proc/PID/ns/net` is the container's network namespace. An error if
    /// the container is not running.
    pub fn init_pid(&self, id: &ContainerId) -> Result<u32, DockerError> {
        let arguments = [
            "inspect",
            "--type",
            "container",
            "--format",
            "{{.State.Pid}}",
        ];
        let output = self.call(arguments.iter().copied().chain([id.as_str()]), CALL_TIMEOUT)?;
        let text = String::from_utf8_lossy(&output);
        match text.trim().parse::<u32>() {
            Ok(pid) if pid > 0 => Ok(pid),
            _ => Err(DockerError::UnexpectedOutput {
                command: self.command_line(arguments),
                what: format!("no running init process ({:?})", bounded(text.trim())),
            }),
        }
    }

    /// Copies `host_path` (a file or a directory, absolute) to
    /// `container_path` (absolute) in the container, as `docker cp` does.
    pub fn copy_into(
        &self,
        id: &ContainerId,
        host_path: &Path,
        container_path: &str,
    ) -> Result<(), DockerError> {
        if !host_path.is_absolute() {
            return Err(DockerError::InvalidRequest(format!(
                "the host path must be absolute: {}",
                host_path.display()
            )));
        }
        if !container_path.starts_with('/') {
            return Err(DockerError::InvalidRequest(format!(
                "the container path must be absolute: {container_path}"
            )));
        }
        let target = format!("{id}:{container_path}");
        self.call(
            [OsStr::new("cp"), host_path.as_os_str(), OsStr::new(&target)],
            COPY_TIMEOUT,
        )?;
        Ok(())
    }

    /// A `docker exec -i` (no terminal) of `argv` in the container, in `cwd`,
    /// with `env` added to the container's environment, not yet spawned: the
    /// caller sets its standard streams, spawns it and streams its output.
    ///
    /// The variables are passed on the CLI's command line (`-e NAME=VALUE`),
    /// which other host users can read in `/proc`: pass surrogates, never
    /// real secrets. Killing the CLI does not stop the command in the
    /// container; removing the container does.
    pub fn exec_command(
        &self,
        id: &ContainerId,
        cwd: &str,
        env: &[(String, String)],
        argv: &[String],
    ) -> Result<Command, DockerError> {
        if argv.is_empty() {
            return Err(DockerError::InvalidRequest("the command is empty".into()));
        }
        let mut command = Command::new(&self.program);
        command.args(["exec", "--interactive", "--workdir", cwd]);
        for (name, value) in env {
            check_key(name, "environment variable")?;
            command.arg("--env").arg(format!("{name}={value}"));
        }
        command.arg(id.as_str()).args(argv);
        Ok(command)
    }

    /// Whether the container exists and is running.
    pub fn is_running(&self, id: &ContainerId) -> Result<bool, DockerError> {
        self.listed(id, false)
    }

    /// Removes the container, killing it if it runs. A container that does
    /// not exist (any more) is not an error.
    pub fn remove(&self, id: &ContainerId) -> Result<(), DockerError> {
        if !self.listed(id, true)? {
            return Ok(());
        }
        match self.call(["rm", "--force", id.as_str()], CALL_TIMEOUT) {
            Ok(_) => Ok(()),
            // Another remover may have been faster.
            Err(error) => match self.listed(id, true) {
                Ok(false) => Ok(()),
                _ => Err(error),
            },
        }
    }

    /// Every container, running or not, that has the label `label_key`
    /// (whatever its value): to find the sandboxes left by an earlier run.
    pub fn list_labelled(&self, label_key: &str) -> Result<Vec<ContainerSummary>, DockerError> {
        check_key(label_key, "label")?;
        let filter = format!("label={label_key}");
        let output = self.call(
            ["ps", "--all", "--quiet", "--no-trunc", "--filter", &filter],
            CALL_TIMEOUT,
        )?;
        let listed = String::from_utf8_lossy(&output);
        let mut summaries = Vec::new();
        for line in listed
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
        {
            let id = ContainerId::parse(line).ok_or_else(|| DockerError::UnexpectedOutput {
                command: self.command_line(["ps"]),
                what: format!("not a container ID: {:?}", bounded(line)),
            })?;
            match self.summary(&id) {
                Ok(summary) => summaries.push(summary),
                // Removed since it was listed.
                Err(_) if !self.listed(&id, true)? => {}
                Err(error) => return Err(error),
            }
        }
        Ok(summaries)
    }

    /// One container's ID, name, labels and state, from `docker inspect`.
    fn summary(&self, id: &ContainerId) -> Result<ContainerSummary, DockerError> {
        let output = self.call(
            ["inspect", "--type", "container", id.as_str()],
            CALL_TIMEOUT,
        )?;
        let mut inspected: Vec<Inspected> = self.parse_json(&output, "inspect")?;
        let Some(inspected) = inspected.pop().filter(|found| found.id == id.as_str()) else {
            return Err(DockerError::UnexpectedOutput {
                command: self.command_line(["inspect"]),
                what: format!("no record for container {id}"),
            });
        };
        Ok(ContainerSummary {
            id: id.clone(),
            name: inspected.name.trim_start_matches('/').to_owned(),
            labels: inspected.config.labels.unwrap_or_default(),
            running: inspected.state.running,
        })
    }

    /// Whether `docker ps` (with `--all`: also stopped containers) lists the
    /// container with exactly this ID.
    fn listed(&self, id: &ContainerId, all: bool) -> Result<bool, DockerError> {
        let filter = format!("id={id}");
        let mut arguments = vec!["ps", "--quiet", "--no-trunc", "--filter", filter.as_str()];
        if all {
            arguments.push("--all");
        }
        let output = self.call(arguments, CALL_TIMEOUT)?;
        Ok(String::from_utf8_lossy(&output)
            .lines()
            .any(|line| line.trim() == id.as_str()))
    }

    /// Parses a call's JSON output.
    fn parse_json<T: for<'de> Deserialize<'de>>(
        &self,
        output: &[u8],
        subcommand: &str,
    ) -> Result<T, DockerError> {
        serde_json::from_slice(output).map_err(|error| DockerError::UnexpectedOutput {
            command: self.command_line([subcommand]),
            what: error.to_string(),
        })
    }

    /// Runs the CLI with `arguments`, bounded by `timeout`; its standard
    /// output on success.
    fn call<I, S>(&self, arguments: I, timeout: Duration) -> Result<Vec<u8>, DockerError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let arguments: Vec<S> = arguments.into_iter().collect();
        let command_line = self.command_line(&arguments);
        let mut child = Command::new(&self.program)
            .args(&arguments)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| DockerError::Spawn {
                command: command_line.clone(),
                source,
            })?;
        let stdout = child
            .stdout
            .take()
            .map(|pipe| read_bounded(pipe, MAX_STDOUT));
        let stderr = child
            .stderr
            .take()
            .map(|pipe| read_bounded(pipe, 4 * MAX_STDERR_CHARS));
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL_INTERVAL),
                Ok(None) => break Err(None),
                Err(error) => break Err(Some(error)),
            }
        };
        let status = match status {
            Ok(status) => status,
            Err(error) => {
                // Kill and reap; the readers then see the pipes close.
                let _ = child.kill();
                let _ = child.wait();
                return Err(match error {
                    None => DockerError::TimedOut {
                        command: command_line,
                        timeout,
                    },
                    Some(source) => DockerError::Spawn {
                        command: command_line,
                        source,
                    },
                });
            }
        };
        let stdout = stdout
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        let stderr = stderr
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        if !status.success() {
            return Err(DockerError::Failed {
                command: command_line,
                status,
                stderr: bounded(String::from_utf8_lossy(&stderr).trim()),
            });
        }
        Ok(stdout)
    }

    /// The command line for messages: the program and its arguments.
    fn command_line<I, S>(&self, arguments: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut line = self.program.display().to_string();
        for argument in arguments {
            line.push(' ');
            line.push_str(&argument.as_ref().to_string_lossy());
        }
        line
    }
}

/// Reads a pipe to its end on a thread, keeping at most `limit` bytes.
fn read_bounded<R: Read + Send + 'static>(
    mut pipe: R,
    limit: usize,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buffer = [0u8; 8192];
        loop {
            match pipe.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => {
                    let room = limit.saturating_sub(kept.len());
                    kept.extend_from_slice(&buffer[..read.min(room)]);
                }
            }
        }
        kept
    })
}

/// `text` cut to [`MAX_STDERR_CHARS`] characters.
fn bounded(text: &str) -> String {
    match text.char_indices().nth(MAX_STDERR_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// The first executable file called `name` in a directory of `PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|directory| directory.is_absolute())
        .map(|directory| directory.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|metadata| {
                metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
            })
        })
}

/// Refuses a container name Docker would refuse or the CLI could misread.
fn check_name(name: &str) -> Result<(), DockerError> {
    let mut bytes = name.bytes();
    let valid = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(DockerError::InvalidRequest(format!(
            "container name {name:?} must match [A-Za-z0-9][A-Za-z0-9_.-]*"
        )))
    }
}

/// Refuses a positional argument that the CLI would take for an option.
fn check_not_an_option(value: &str, what: &str) -> Result<(), DockerError> {
    if value.is_empty() || value.starts_with('-') {
        return Err(DockerError::InvalidRequest(format!(
            "the {what} {value:?} is empty or starts with `-`"
        )));
    }
    Ok(())
}

/// Refuses a label or variable name that is empty or holds `=`.
fn check_key(key: &str, what: &str) -> Result<(), DockerError> {
    if key.is_empty() || key.contains('=') || key.contains('\0') {
        return Err(DockerError::InvalidRequest(format!(
            "the {what} name {key:?} is empty or holds `=`"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_without_init() -> Docker {
        Docker {
            program: PathBuf::from("/usr/bin/docker"),
            engine: Engine::Docker,
            has_init: false,
        }
    }

    #[test]
    fn container_ids_are_hexadecimal() {
        assert!(ContainerId::parse("845620717fcb").is_some());
        assert!(ContainerId::parse(&"a".repeat(64)).is_some());
        assert!(ContainerId::parse("--rm").is_none());
        assert!(ContainerId::parse("845620717FCB").is_none());
        assert!(ContainerId::parse("84562071").is_none());
        assert!(ContainerId::parse(&"a".repeat(65)).is_none());
    }

    #[test]
    fn run_arguments_isolate_the_container() {
        let spec = RunSpec {
            name: "task-1".into(),
            image: "airlock-test-sandbox:1".into(),
            labels: vec![("airlock.sandbox".into(), "task-1".into())],
            memory_bytes: Some(1 << 30),
            cpus: Some(1.5),
            pids_limit: Some(256),
            workspace: Some(PathBuf::from("/var/lib/airlock/task-1")),
        };
        let arguments = engine_without_init().run_arguments(&spec).expect("valid");
        let joined = arguments.join(" ");
        for expected in [
            "--network none",
            "--cap-drop ALL",
            "--security-opt no-new-privileges",
            "--pull never",
            "--label airlock.sandbox=task-1",
            "--memory 1073741824",
            "--cpus 1.5",
            "--pids-limit 256",
            "--mount type=bind,source=/var/lib/airlock/task-1,target=/workspace",
        ] {
            assert!(joined.contains(expected), "{expected} missing in {joined}");
        }
        assert!(joined.ends_with("airlock-test-sandbox:1 sleep infinity"));
        assert!(!joined.contains("--init"));
    }

    #[test]
    fn unsafe_arguments_are_refused() {
        let valid = RunSpec {
            name: "task".into(),
            image: "image".into(),
            ..RunSpec::default()
        };
        let docker = engine_without_init();
        let refused = [
            RunSpec {
                name: "-task".into(),
                ..valid.clone()
            },
            RunSpec {
                name: "a/b".into(),
                ..valid.clone()
            },
            RunSpec {
                image: "--privileged".into(),
                ..valid.clone()
            },
            RunSpec {
                labels: vec![("a=b".into(), "c".into())],
                ..valid.clone()
            },
            RunSpec {
                cpus: Some(0.0),
                ..valid.clone()
            },
            RunSpec {
                workspace: Some(PathBuf::from("relative")),
                ..valid.clone()
            },
            RunSpec {
                workspace: Some(PathBuf::from("/a,readonly=false")),
                ..valid.clone()
            },
        ];
        for spec in refused {
            assert!(
                matches!(
                    docker.run_arguments(&spec),
                    Err(DockerError::InvalidRequest(_))
                ),
                "{spec:?} accepted"
            );
        }
        assert!(docker.run_arguments(&valid).is_ok());
        let id = ContainerId::parse("845620717fcb").expect("id");
        let env = [("A=B".to_owned(), "c".to_owned())];
        assert!(
            docker
                .exec_command(&id, "/", &env, &["true".into()])
                .is_err()
        );
        assert!(docker.exec_command(&id, "/", &[], &[]).is_err());
    }

    #[test]
    fn exec_commands_have_no_terminal_and_keep_argv_apart() {
        let docker = engine_without_init();
        let id = ContainerId::parse("845620717fcb").expect("id");
        let env = [("GH_TOKEN".to_owned(), "ghp_surrogate".to_owned())];
        let argv = ["--help".to_owned(), "x".to_owned()];
        let command = docker
            .exec_command(&id, "/workspace", &env, &argv)
            .expect("valid");
        let arguments: Vec<_> = command
            .get_args()
            .map(|argument| argument.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            arguments,
            [
                "exec",
                "--interactive",
                "--workdir",
                "/workspace",
                "--env",
                "GH_TOKEN=ghp_surrogate",
                "845620717fcb",
                "--help",
                "x"
            ]
        );
    }

    #[test]
    fn long_stderr_is_cut() {
        let long = "é".repeat(MAX_STDERR_CHARS + 10);
        assert_eq!(bounded(&long).chars().count(), MAX_STDERR_CHARS + 1);
        assert_eq!(bounded("short"), "short");
    }
}
