//! The host's UNIX sockets that `airlock run` hides from the command: a socket file is a
//! way out of any network namespace (a Docker daemon, a tmux server, an ssh-agent, D-Bus),
//! so every socket under the usual socket directories is covered by `/dev/null` inside the
//! jail. Abstract sockets need nothing: they belong to the host's network namespace.
//!
//! The scan is bounded in depth and entries; if a bound is hit, stderr says which
//! directory was not fully scanned, so the operator knows what may remain visible.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

/// Where sockets are looked for.
const SOCKET_DIRS: [&str; 5] = ["/run", "/var/run", "/tmp", "/var/tmp", "/dev/shm"];
/// How deep below each directory.
const MAX_DEPTH: usize = 6;
/// How many directory entries are looked at in all.
const MAX_ENTRIES: usize = 100_000;

/// Every UNIX socket file found under [`SOCKET_DIRS`] (symbolic links are not followed).
pub fn scan() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = SOCKET_DIRS
        .iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .collect();
    roots.sort();
    roots.dedup();
    let mut found = Vec::new();
    let mut seen = 0usize;
    for root in roots {
        let mut pending = vec![(root.clone(), 0usize)];
        while let Some((dir, depth)) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > MAX_ENTRIES {
                    eprintln!(
                        "airlock: more than {MAX_ENTRIES} entries under the socket directories; \
                         sockets below {} may remain visible in the jail",
                        root.display()
                    );
                    return found;
                }
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_socket() {
                    found.push(entry.path());
                } else if kind.is_dir() && depth < MAX_DEPTH {
                    pending.push((entry.path(), depth + 1));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_socket_in_a_nested_temporary_directory() {
        let dir = tempfile::Builder::new()
            .prefix("airlock-sockets")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let nested = dir.path().join("a").join("b");
        std::fs::create_dir_all(&nested).expect("nested");
        let socket = nested.join("daemon.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let found = scan();
        let canonical = std::fs::canonicalize(&socket).expect("canonical");
        assert!(
            found
                .iter()
                .any(|path| *path == canonical || *path == socket),
            "{socket:?} not in {found:?}"
        );
    }
}
