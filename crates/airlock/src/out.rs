//! Standard output of the printing commands (`policy`, `ca`, `logs`, `doctor`,
//! `completions`, `man`): a reader that went away (`airlock policy explain … | head -1`)
//! ends the output quietly and the command keeps its own exit status, where `println!`
//! would panic on the `EPIPE`.
//!
//! `SIGPIPE` stays ignored process-wide (Rust's default): `proxy` and `run` write to
//! sockets, where a peer that left is an error of one connection, never a signal that ends
//! airlock (docs/contract.md §2, "Exit statuses").

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once standard output refused a write: nothing more is written to it.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes `args` to standard output. A closed pipe (`EPIPE`) stops the output silently;
/// any other error is reported once on stderr and stops it too.
pub(crate) fn write(args: std::fmt::Arguments<'_>) {
    emit(|stdout| stdout.write_fmt(args));
}

/// Writes raw bytes to standard output, as [`write`] does text.
pub(crate) fn write_bytes(bytes: &[u8]) {
    emit(|stdout| stdout.write_all(bytes));
}

fn emit(write: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = write(&mut stdout) {
        CLOSED.store(true, Ordering::Relaxed);
        if error.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("airlock: cannot write to standard output: {error}");
        }
    }
}

/// Whether standard output refused a write (the reader went away).
pub(crate) fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// `println!` for the printing commands: a closed standard output ends the output quietly.
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for the printing commands: a closed standard output ends the output quietly.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};
