//! Where the credential store files that are symbolic links lead, inside their directory
//! (docs/secrets.md, "Private parent directories"): `~/.claude/.credentials.json ->
//! creds-real.json` with the target absent would let the command create `creds-real.json`
//! in the run's private directory and have the copy-back carry its token into the user's
//! store. Read on the host at the start, when the command has not run yet; the copy-back
//! ([`crate::private_copy_back`]) never writes these paths.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// How many links of one chain are followed.
const MAX_HOPS: usize = 8;

/// The paths under `dir` (canonical) that its store files `names` lead to, link after
/// link (at most [`MAX_HOPS`]), whether they exist or not.
pub(crate) fn targets(dir: &Path, names: &[OsString]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for name in names {
        let mut at = dir.join(name);
        for _ in 0..MAX_HOPS {
            let Ok(link) = std::fs::read_link(&at) else {
                break;
            };
            let Some(next) = at.parent().map(|base| resolve(base, &link)) else {
                break;
            };
            if next.starts_with(dir) && !out.contains(&next) {
                out.push(next.clone());
            }
            at = next;
        }
    }
    out
}

/// `link` read in `base`: lexically resolved, then through the real directory holding it
/// where that exists (a link on the way).
fn resolve(base: &Path, link: &Path) -> PathBuf {
    let mut path = PathBuf::new();
    for component in base.join(link).components() {
        match component {
            Component::ParentDir => {
                path.pop();
            }
            Component::CurDir => {}
            other => path.push(other),
        }
    }
    let real_dir = path
        .parent()
        .and_then(|dir| std::fs::canonicalize(dir).ok());
    match (real_dir, path.file_name()) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_followed_to_paths_under_the_directory_only() {
        let home = tempfile::tempdir().expect("home");
        let dir = std::fs::canonicalize(home.path()).expect("canonical");
        std::fs::create_dir(dir.join("sub")).expect("sub");
        std::os::unix::fs::symlink("creds-real.json", dir.join("a")).expect("a");
        std::os::unix::fs::symlink("./sub/../sub/next", dir.join("b")).expect("b");
        std::os::unix::fs::symlink(dir.join("deep/x.json"), dir.join("sub/next")).expect("next");
        std::os::unix::fs::symlink("/etc/passwd", dir.join("c")).expect("c");
        std::fs::write(dir.join("d"), "").expect("d");
        let names = ["a", "b", "c", "d", "absent"].map(OsString::from);
        let found = targets(&dir, &names);
        let expected = ["creds-real.json", "sub/next", "deep/x.json"].map(|p| dir.join(p));
        assert_eq!(found, expected);
    }
}
