//! Where the writer's lines go: a buffered sink, which for a file opened with a maximum size
//! is rotated before a line would make it larger: `audit.jsonl` becomes `audit.jsonl.1`,
//! `.1` becomes `.2`, ... and the oldest, `.`[`ROTATED_KEEP`], is removed; a new
//! `audit.jsonl` (mode 0600) takes the next line. A line is never split across files. A
//! rotation that fails is a failed write: the log becomes unhealthy (fail closed).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// How many rotated files are kept (`audit.jsonl.1` ... `audit.jsonl.5`).
pub const ROTATED_KEEP: usize = 5;

/// The rotation state of a file log.
pub(crate) struct Rotation {
    path: PathBuf,
    max_size: u64,
    /// Bytes in the current file.
    size: u64,
}

impl Rotation {
    /// Rotation of the file at `path`, now `size` bytes long, beyond `max_size` bytes.
    pub(crate) fn new(path: PathBuf, max_size: u64, size: u64) -> Self {
        Rotation {
            path,
            max_size,
            size,
        }
    }

    /// `PATH.n`.
    fn numbered(&self, n: usize) -> PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    }

    /// Shifts the files by one and opens a new, empty one at the path.
    fn rotate(&mut self) -> io::Result<File> {
        remove_if_present(&self.numbered(ROTATED_KEEP))?;
        for n in (1..ROTATED_KEEP).rev() {
            rename_if_present(&self.numbered(n), &self.numbered(n + 1))?;
        }
        std::fs::rename(&self.path, self.numbered(1))?;
        self.size = 0;
        open_append(&self.path)
    }
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

/// The writer's destination.
pub(crate) struct Output {
    writer: BufWriter<Box<dyn Write + Send>>,
    rotation: Option<Rotation>,
}

impl Output {
    /// Writes to `sink`, rotated as `rotation` says (`None`: never).
    pub(crate) fn new(sink: Box<dyn Write + Send>, rotation: Option<Rotation>) -> Self {
        Output {
            writer: BufWriter::new(sink),
            rotation,
        }
    }

    /// Writes one line (`line` without its newline), rotating first if it would not fit.
    pub(crate) fn write_line(&mut self, line: &[u8]) -> io::Result<()> {
        let len = line.len() as u64 + 1;
        if let Some(rotation) = &mut self.rotation {
            if rotation.size > 0 && rotation.size + len > rotation.max_size {
                self.writer.flush()?;
                let file = rotation.rotate()?;
                self.writer = BufWriter::new(Box::new(file));
            }
            rotation.size += len;
        }
        self.writer.write_all(line)?;
        self.writer.write_all(b"\n")
    }

    /// Flushes what is buffered.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }
}

/// Splits `30s` or `64MiB` (trimmed) into its leading whole number and the rest; `None`
/// when it does not start with digits or the number does not fit.
pub fn number_and_unit(text: &str) -> Option<(u64, &str)> {
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    Some((number.parse().ok()?, unit))
}

/// Parses a size: a number of bytes, optionally followed by `K`, `M` or `G` (powers of 1024;
/// `KiB`, `KB` and the like read the same, any case). Zero is refused.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (number, unit) = number_and_unit(text)
        .ok_or_else(|| format!("{text:?} is not a size (e.g. 100M, 1G, 65536)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(format!("{text:?}: the unit must be K, M or G")),
    };
    match number.checked_mul(1 << shift) {
        Some(0) => Err(format!("{text:?}: the size must be above zero")),
        Some(size) => Ok(size),
        None => Err(format!("{text:?} is too large")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("65536"), Ok(65_536));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("100M"), Ok(100 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("10mb"), Ok(10 << 20));
        for bad in [
            "",
            "0",
            "0M",
            "M",
            "1T",
            "-1",
            "1.5M",
            "99999999999999999999G",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn files_rotate_on_line_boundaries_and_keep_five() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let file = open_append(&path).unwrap();
        let rotation = Rotation::new(path.clone(), 100, 0);
        let mut output = Output::new(Box::new(file), Some(rotation));
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
        let file = open_append(&path).unwrap();
        let mut output = Output::new(Box::new(file), Some(Rotation::new(path, 10, 0)));
        output.write_line(b"0123456789").unwrap();
        assert!(output.write_line(b"0123456789").is_err());
    }
}
