//! Reloading the policy of a running `airlock proxy` without the admin API: on SIGHUP, and
//! when a policy file changes (modification time, length, or the file itself: a path whose
//! symlink was swapped to another file, as the kubelet updates a ConfigMap volume, is a
//! change even when the new file has the old one's time and length) or a `git:` source's
//! branch moves to a new commit (polled every [`POLL_INTERVAL`]). Every source is read
//! again and goes through the same all-or-nothing [`PolicyStore::replace`] as an API
//! change: a bad file keeps the policy in force, says why on stderr and writes a refused
//! `policy` line.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use airlock_control::{PolicyStore, Source};

use crate::git_source;
use crate::sources::{PolicySources, split_format};

/// How often the sources are looked at.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What a source looked like when last read: a file's modification time, length and
/// identity (device, inode) after following symlinks, or a branch's commit.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Stamp {
    File(Option<(Option<SystemTime>, u64, (u64, u64))>),
    Git(Option<String>),
}

fn stamp(spec: &str) -> Stamp {
    if let Some(git) = git_source::parse(spec) {
        return Stamp::Git(git.ok().and_then(|git| git.head().ok()));
    }
    use std::os::unix::fs::MetadataExt as _;
    let path = split_format(spec).map_or(spec, |(_, path)| path);
    Stamp::File(
        std::fs::metadata(path)
            .ok()
            .map(|meta| (meta.modified().ok(), meta.len(), (meta.dev(), meta.ino()))),
    )
}

fn stamps(args: &PolicySources) -> Vec<Stamp> {
    args.policies.iter().map(|spec| stamp(spec)).collect()
}

/// Starts the SIGHUP handler and the source poller; they end with the runtime.
pub fn watch(args: PolicySources, store: Arc<PolicyStore>) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup())?;
    let args = Arc::new(args);
    tokio::spawn(async move {
        let mut last = stamps(&args);
        let mut ticks = tokio::time::interval(POLL_INTERVAL);
        loop {
            let source = tokio::select! {
                _ = hangup.recv() => Some(Source::Sighup),
                _ = ticks.tick() => None,
            };
            let (args, store) = (args.clone(), store.clone());
            let now = match tokio::task::spawn_blocking({
                let args = args.clone();
                move || stamps(&args)
            })
            .await
            {
                Ok(now) => now,
                Err(_) => continue,
            };
            let changed = last
                .iter()
                .zip(&now)
                .find(|(before, after)| before != after)
                .map(|(_, after)| match after {
                    Stamp::Git(_) => Source::Git,
                    Stamp::File(_) => Source::File,
                });
            last = now;
            if source == Some(Source::Sighup) {
                // SIGHUP also has an unavailable audit log tried again now
                // (docs/reliability.md); the reload goes on as ever.
                store.audit().retry_now();
            }
            let Some(source) = source.or(changed) else {
                continue;
            };
            let _ = tokio::task::spawn_blocking(move || reload(&args, &store, source)).await;
        }
    });
    Ok(())
}

/// Reads every source again and swaps the result in, or keeps the policy in force.
pub fn reload(args: &PolicySources, store: &PolicyStore, source: Source) {
    let kept = |why: &str| {
        eprintln!(
            "airlock: policy reload ({}) refused, keeping version {}: {why}",
            source.as_str(),
            store.current().0.version
        );
    };
    match args.load() {
        Ok(policy) => match store.replace(policy, source, None) {
            Ok(stamp) => eprintln!(
                "airlock: policy version {} in force ({})",
                stamp.version,
                source.as_str()
            ),
            Err(error) => kept(&error.to_string()),
        },
        Err(errors) => {
            let why = errors.join("; ");
            store.refused(source, &why);
            kept(&why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Stamp, stamp};
    use std::os::unix::fs::symlink;

    /// The kubelet's ConfigMap update: `..data` swapped by rename to a directory holding a
    /// new file. With the same length and modification time, the file's identity tells.
    #[test]
    fn a_swapped_symlink_is_a_change_even_with_the_same_time_and_length() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (old, new) = (dir.path().join("..v1"), dir.path().join("..v2"));
        for (generation, host) in [(&old, "one.test"), (&new, "two.test")] {
            std::fs::create_dir(generation).expect("generation dir");
            std::fs::write(generation.join("policy.yaml"), host).expect("write");
        }
        let mtime = std::fs::metadata(old.join("policy.yaml"))
            .and_then(|meta| meta.modified())
            .expect("mtime");
        std::fs::File::options()
            .write(true)
            .open(new.join("policy.yaml"))
            .and_then(|file| file.set_modified(mtime))
            .expect("set mtime");
        symlink("..v1", dir.path().join("..data")).expect("..data");
        let path = dir.path().join("policy.yaml");
        symlink("..data/policy.yaml", &path).expect("policy.yaml link");
        let spec = path.to_str().expect("utf-8 path");
        let before = stamp(spec);
        symlink("..v2", dir.path().join("..data_tmp")).expect("..data_tmp");
        std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).expect("swap");
        let after = stamp(spec);
        let (Stamp::File(Some(b)), Stamp::File(Some(a))) = (&before, &after) else {
            panic!("both stamps are files: {before:?} {after:?}");
        };
        assert_eq!((b.0, b.1), (a.0, a.1), "same time and length");
        assert_ne!(before, after, "the swap is seen");
    }
}
