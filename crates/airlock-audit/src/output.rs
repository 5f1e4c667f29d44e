//! Where the writer's lines go: a sink written one batch at a time, which for a file opened
//! with a maximum size is rotated before a line would make it larger: `audit.jsonl` becomes
//! `audit.jsonl.1`, `.1` becomes `.2`, ... and the oldest, `.`[`ROTATED_KEEP`], is removed;
//! a new `audit.jsonl` (mode 0600) takes the next line. A line is never split across files.
//! A rotation that fails is a failed write. The writer rotates through
//! `Output::rotation_due` and `Output::rotate` so that it can start the new file with a
//! signed checkpoint ([`crate::checkpoint`]), which does not count towards the next rotation
//! (`Output::mark_floor`).
//!
//! A batch is written whole or not at all: when a write fails part-way (a full disk), the
//! file is cut back to its length before the batch, so that no partial line stays behind
//! (docs/reliability.md, "The audit log's disk"). Before each batch the path is checked
//! against the open file: a log file removed or replaced while open is reopened (created
//! again, mode 0600) at its path, and the writer says so in a line of its own.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::chain::Head;
use crate::checkpoint::Signing;
use crate::ocsf::Format;

/// How many rotated files are kept (`audit.jsonl.1` ... `audit.jsonl.5`).
pub const ROTATED_KEEP: usize = 5;

/// The rotation of a file log: the size beyond which it rotates.
pub(crate) struct Rotation {
    max_size: u64,
}

impl Rotation {
    /// Rotation beyond `max_size` bytes.
    pub(crate) fn new(max_size: u64) -> Self {
        Rotation { max_size }
    }
}

/// `PATH.n`.
fn numbered(path: &Path, n: usize) -> PathBuf {
    let mut name = path.to_path_buf().into_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Shifts the files at `path` by one; the caller then opens a new, empty one at the path.
fn shift(path: &Path) -> io::Result<()> {
    remove_if_present(&numbered(path, ROTATED_KEEP))?;
    for n in (1..ROTATED_KEEP).rev() {
        rename_if_present(&numbered(path, n), &numbered(path, n + 1))?;
    }
    std::fs::rename(path, numbered(path, 1))
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn rename_if_present(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::rename(from, to) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Opens `path` for appending, creating it with mode 0600.
pub(crate) fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

/// An open log file: its path, descriptor and identity.
struct LogFile {
    path: PathBuf,
    file: File,
    /// (device, inode) of `file`, to tell whether `path` still names it.
    id: (u64, u64),
    /// Bytes in the file after the last batch written whole.
    committed: u64,
}

impl LogFile {
    fn open(path: PathBuf) -> io::Result<Self> {
        let file = open_append(&path)?;
        let metadata = file.metadata()?;
        Ok(LogFile {
            path,
            file,
            id: (metadata.dev(), metadata.ino()),
            committed: metadata.len(),
        })
    }

    /// Whether `path` still names the open file (`false`: removed or replaced).
    fn in_place(&self) -> bool {
        std::fs::metadata(&self.path)
            .is_ok_and(|metadata| (metadata.dev(), metadata.ino()) == self.id)
    }
}

/// Where the bytes go.
enum Sink {
    /// A file at a path (reopened, rotated and cut back as the module says).
    File(LogFile),
    /// Anything else (stdout, a test sink): written, never cut back.
    Other(Box<dyn Write + Send>),
}

/// The writer's destination, with the batch being assembled.
pub(crate) struct Output {
    sink: Sink,
    rotation: Option<Rotation>,
    /// The lines of the batch, each with its newline.
    batch: Vec<u8>,
    /// How many lines `batch` holds.
    lines: u64,
    /// The file was reopened at its path since this was last taken.
    reopened: bool,
    /// Bytes at the top of the current file that do not count as content for rotation
    /// (the checkpoint a rotation starts the file with).
    floor: u64,
    /// Where the chain goes on from ([`crate::chain::resume`]), until the writer takes it.
    resume: Option<Head>,
    /// The key checkpoints are signed with, until the writer takes it.
    signing: Option<Signing>,
    /// How lines are written.
    format: Format,
    /// Where each batch written is also exported (`--audit-otlp`, [`crate::otlp`]).
    export: Option<crate::otlp::Exporter>,
}

impl Output {
    /// Writes to `sink` (never rotated, never cut back).
    pub(crate) fn new(sink: Box<dyn Write + Send>) -> Self {
        Output {
            sink: Sink::Other(sink),
            rotation: None,
            batch: Vec::with_capacity(8192),
            lines: 0,
            reopened: false,
            floor: 0,
            resume: None,
            signing: None,
            format: Format::Airlock,
            export: None,
        }
    }

    /// Opens the file at `path` for appending, rotated as `rotation` says (`None`: never).
    /// The chain goes on from the file's last line (or that of `PATH.1`).
    pub(crate) fn file(path: PathBuf, rotation: Option<Rotation>) -> io::Result<Self> {
        let mut output = Output::new(Box::new(io::sink()));
        let rotated = rotation.as_ref().map(|_| numbered(&path, 1));
        output.resume = Some(crate::chain::resume(&path, rotated.as_deref())?);
        output.sink = Sink::File(LogFile::open(path)?);
        output.rotation = rotation;
        Ok(output)
    }

    /// Adds one line (`line` without its newline) to the batch, rotating first (after
    /// writing the batch so far) if it would not fit.
    pub(crate) fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        if self.rotation_due(line.len()) {
            self.flush()?;
            self.rotate()?;
        }
        self.batch.extend_from_slice(line);
        self.batch.push(b'\n');
        self.lines += 1;
        Ok(())
    }

    /// Whether a line of `len` bytes (without its newline) rotates the file first: it
    /// would make the file larger than its maximum and the file holds more than its floor.
    pub(crate) fn rotation_due(&self, len: usize) -> bool {
        let (Some(rotation), Sink::File(file)) = (&self.rotation, &self.sink) else {
            return false;
        };
        let size = file.committed + self.batch.len() as u64;
        size > self.floor && size + len as u64 + 1 > rotation.max_size
    }

    /// Rotates now (the batch must have been written): a new, empty file at the path.
    pub(crate) fn rotate(&mut self) -> io::Result<()> {
        let Sink::File(file) = &mut self.sink else {
            return Ok(());
        };
        shift(&file.path)?;
        *file = LogFile::open(file.path.clone())?;
        self.floor = 0;
        Ok(())
    }

    /// What the file holds so far (with the batch) does not count towards rotation.
    pub(crate) fn mark_floor(&mut self) {
        if let Sink::File(file) = &self.sink {
            self.floor = file.committed + self.batch.len() as u64;
        }
    }

    /// The head the chain goes on from (a new chain for anything but a file).
    pub(crate) fn take_resume(&mut self) -> Head {
        self.resume.take().unwrap_or_default()
    }

    /// Sets the key checkpoints are signed with.
    pub(crate) fn sign_with(&mut self, signing: Signing) {
        self.signing = Some(signing);
    }

    /// The key checkpoints are signed with, if any.
    pub(crate) fn take_signing(&mut self) -> Option<Signing> {
        self.signing.take()
    }

    /// Sets how lines are written.
    pub(crate) fn format_with(&mut self, format: Format) {
        self.format = format;
    }

    /// Exports every batch written through `export`.
    pub(crate) fn export_with(&mut self, export: crate::otlp::Exporter) {
        self.export = Some(export);
    }

    /// The exporter, if lines are exported.
    pub(crate) fn export(&self) -> Option<&crate::otlp::Exporter> {
        self.export.as_ref()
    }

    /// How lines are written.
    pub(crate) fn format(&self) -> Format {
        self.format
    }

    /// Writes the batch. On failure nothing of it stays in the file (when the file can be
    /// cut back) and the batch is dropped: [`Output::dropped`] says how many lines it had.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let result = self.write_batch();
        if result.is_ok() {
            if let Some(export) = &self.export {
                export.offer(&self.batch);
            }
            self.batch.clear();
            self.lines = 0;
        }
        result
    }

    fn write_batch(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Other(sink) => {
                sink.write_all(&self.batch)?;
                sink.flush()
            }
            Sink::File(file) => {
                if !file.in_place() {
                    *file = LogFile::open(file.path.clone())?;
                    self.reopened = true;
                    self.floor = 0;
                }
                match file.file.write_all(&self.batch) {
                    Ok(()) => {
                        file.committed += self.batch.len() as u64;
                        Ok(())
                    }
                    Err(error) => {
                        // Cut back what part of the batch went in; if even that fails (a
                        // read-only file system), the next line starts on a line of its own.
                        if file.file.set_len(file.committed).is_err() {
                            let _ = file.file.write_all(b"\n");
                        }
                        Err(error)
                    }
                }
            }
        }
    }

    /// Drops the batch that could not be written; returns how many lines it had.
    pub(crate) fn dropped(&mut self) -> u64 {
        self.batch.clear();
        std::mem::take(&mut self.lines)
    }

    /// Whether the file was reopened at its path (removed or replaced while open) since
    /// the last call.
    pub(crate) fn take_reopened(&mut self) -> bool {
        std::mem::take(&mut self.reopened)
    }

    /// The path of a file sink.
    pub(crate) fn path(&self) -> Option<&Path> {
        match &self.sink {
            Sink::File(file) => Some(&file.path),
            Sink::Other(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_rotate_on_line_boundaries_and_keep_five() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut output = Output::file(path.clone(), Some(Rotation::new(100))).unwrap();
        for i in 0..40 {
            output.write_line(format!("{i:039}").as_bytes()).unwrap();
        }
        output.flush().unwrap();
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        // 40-byte lines, two per file: the last file holds 38 and 39.
        assert_eq!(read("audit.jsonl"), format!("{:039}\n{:039}\n", 38, 39));
        assert_eq!(read("audit.jsonl.1"), format!("{:039}\n{:039}\n", 36, 37));
        assert_eq!(read("audit.jsonl.5"), format!("{:039}\n{:039}\n", 28, 29));
        assert!(!dir.path().join("audit.jsonl.6").exists());
        // A line longer than the maximum still goes whole into a file of its own.
        output.write_line(&[b'x'; 300]).unwrap();
        output.flush().unwrap();
        assert_eq!(read("audit.jsonl").len(), 301);
    }

    #[test]
    fn a_rotation_that_fails_is_a_write_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        // The oldest rotated name is a directory with a file in it: it cannot be removed.
        std::fs::create_dir(dir.path().join("audit.jsonl.5")).unwrap();
        std::fs::write(dir.path().join("audit.jsonl.5/x"), b"x").unwrap();
        let mut output = Output::file(path, Some(Rotation::new(10))).unwrap();
        output.write_line(b"0123456789").unwrap();
        assert!(output.write_line(b"0123456789").is_err());
    }

    #[test]
    fn a_removed_file_is_reopened_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut output = Output::file(path.clone(), None).unwrap();
        output.write_line(b"one").unwrap();
        output.flush().unwrap();
        assert!(!output.take_reopened());
        std::fs::remove_file(&path).unwrap();
        output.write_line(b"two").unwrap();
        output.flush().unwrap();
        assert!(output.take_reopened());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "two\n");
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    /// A sink that takes `room` bytes, then fails as a full disk does.
    struct Full(Vec<u8>, usize);

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.1 - self.0.len());
            if n == 0 {
                return Err(io::Error::from_raw_os_error(28));
            }
            self.0.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_batch_is_dropped_whole() {
        let mut output = Output::new(Box::new(Full(Vec::new(), 10)));
        output.write_line(b"0123456789").unwrap();
        output.write_line(b"x").unwrap();
        assert!(output.flush().is_err());
        assert_eq!(output.dropped(), 2);
        output.flush().unwrap();
    }
}
