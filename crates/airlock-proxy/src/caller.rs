//! Who opened a connection from inside a jail (docs/contract.md §5, `process`): the
//! [`Identify`] hook the session installs for a jail's handed listeners
//! ([`crate::Proxy::identify_callers`]), called once per accepted connection, and the
//! [`ConnCaller`] every request of the connection carries: the process its audit lines
//! show, and the answer `process:` rules ask for.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use airlock_policy::programs::ProgramCheck;
use airlock_process::{Caller, Process};

/// How long one connection's lookup may take before the connection is served as from an
/// unknown program (`"process":null`; `process:` rules fail closed).
pub const LOOKUP_TIMEOUT: Duration = Duration::from_millis(250);

/// Most lookups running at once (each reads `/proc` on a blocking thread): a jail that
/// opens hundreds of connections at once has the rest wait, within their
/// [`LOOKUP_TIMEOUT`], and be served as from an unknown program when it runs out.
const MAX_LOOKUPS: usize = 8;

/// The permits of [`MAX_LOOKUPS`], shared by every jail of the process.
static LOOKUPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_LOOKUPS);

/// Finds the process behind a captured connection, and what a rule's `process` entry
/// stands for, inside one jail.
pub trait Identify: Send + Sync {
    /// The process holding the client end of the connection from `peer` to `local` (the
    /// accepted socket's addresses); `None` when it cannot be told. Reads `/proc`: called
    /// on a blocking thread, and should itself stop at `deadline`.
    fn identify(
        &self,
        peer: SocketAddr,
        local: SocketAddr,
        deadline: std::time::Instant,
    ) -> Option<Process>;

    /// The executables (canonical paths) a rule's `process` entry stands for in the jail:
    /// the file an absolute path names, or every executable a bare name finds on the
    /// command's `PATH`.
    fn programs(&self, entry: &str) -> Arc<[PathBuf]>;
}

/// The program behind one connection from a jail.
pub struct ConnCaller {
    /// What its audit lines show (`None`: `"process":null`).
    pub process: Caller,
    identify: Arc<dyn Identify>,
}

impl ConnCaller {
    /// Looks up the process behind the connection from `peer` to `local`, for at most
    /// [`LOOKUP_TIMEOUT`] (waiting for a turn among [`MAX_LOOKUPS`] included).
    pub async fn look_up(
        identify: Arc<dyn Identify>,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> ConnCaller {
        let deadline = std::time::Instant::now() + LOOKUP_TIMEOUT;
        let asking = identify.clone();
        let lookup = async move {
            // The permit goes with the blocking read: held until it ends, even past the
            // timeout.
            let turn = LOOKUPS.acquire().await.ok()?;
            let found = tokio::task::spawn_blocking(move || {
                let _turn = turn;
                asking.identify(peer, local, deadline)
            });
            found.await.ok().flatten()
        };
        let started = std::time::Instant::now();
        let process = tokio::time::timeout(LOOKUP_TIMEOUT, lookup)
            .await
            .ok()
            .flatten()
            .map(Arc::new);
        let took = started.elapsed();
        tracing::debug!(?took, found = process.is_some(), "process lookup");
        ConnCaller { process, identify }
    }

    /// A connection whose process cannot be looked up.
    pub fn unknown(identify: Arc<dyn Identify>) -> ConnCaller {
        ConnCaller {
            process: None,
            identify,
        }
    }

    /// The check `process:` rules ask (`None` when the program is unknown: not found, or
    /// its executable not taken as the program, `unverified`).
    pub fn program(&self) -> Option<&dyn ProgramCheck> {
        self.process
            .as_ref()
            .filter(|process| process.exe_path.is_some() && process.unverified.is_none())
            .map(|_| self as &dyn ProgramCheck)
    }
}

impl ProgramCheck for ConnCaller {
    fn is(&self, entry: &str) -> bool {
        let verified = self.process.as_ref().filter(|p| p.unverified.is_none());
        let Some(exe) = verified.and_then(|p| p.exe_path.as_ref()) else {
            return false;
        };
        self.identify.programs(entry).iter().any(|path| path == exe)
    }
}
