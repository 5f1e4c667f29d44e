//! The command's system-call filter (docs/security.md, "The jail"): a second layer under
//! the jail's own session and dropped capabilities.
//!
//! * `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)` fail with `EPERM`: no keystrokes pushed into
//!   a terminal's input, whichever terminal a descriptor reaches (the command has its own
//!   session, so the user's terminal is never its controlling one; kernels before 6.2
//!   allow `TIOCSTI` on the controlling terminal without any privilege).
//! * No file with a set-user-ID or set-group-ID bit can be made: `chmod`, `fchmod`,
//!   `fchmodat`, `fchmodat2` with either bit, and `open`/`openat`/`creat`/`mknod`/`mknodat`
//!   creating a file (`O_CREAT`, `O_TMPFILE`) with either bit, fail with `EPERM`. Started
//!   as root, the command's files belong to the host's root: a set-user-ID copy of a shell
//!   left in the working directory would be a way to root on the host afterwards.
//! * `openat2` (whose mode the filter cannot see) and `io_uring` (whose operations bypass
//!   every filter) fail with `ENOSYS`, as on kernels without them; programs fall back.
//!
//! The requests are compared on their low 32 bits, as the kernel reads them (an `ioctl`
//! request with high bits set is the same request). On x86-64 the x32 numbers are filtered
//! alike; a system call of another architecture (the 32-bit `int 0x80` ABI) kills the
//! process, as the filter cannot judge it. The programs are compiled before the jail forks
//! ([`programs`]) and installed in the command's process just before `execve` ([`install`]),
//! which allocates nothing.

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// `__X32_SYSCALL_BIT`: x32 system calls are the x86-64 numbers with this bit set.
#[cfg(target_arch = "x86_64")]
const X32_BIT: i64 = 0x4000_0000;
/// The x32 number of `ioctl` (its own entry, without the bit).
#[cfg(target_arch = "x86_64")]
const X32_IOCTL: i64 = 514;
/// `fchmodat2` (Linux 6.6), the same number on every architecture.
const SYS_FCHMODAT2: i64 = 452;
/// `__O_TMPFILE` without `O_DIRECTORY` (the bit that makes `O_TMPFILE` create a file).
const O_TMPFILE_BIT: u64 = 0o20_000_000;
/// The mode bits no file made inside may carry.
const PRIVILEGE_BITS: [u64; 2] = [libc::S_ISUID as u64, libc::S_ISGID as u64];

/// The compiled filters, in installation order: the `EPERM` filter, then the `ENOSYS` one.
#[derive(Debug, Clone)]
pub(crate) struct Programs {
    refused: BpfProgram,
    absent: BpfProgram,
}

/// Compiles both filters for this architecture (before any fork: it allocates).
pub(crate) fn programs() -> io::Result<Programs> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(invalid)?;
    let refused = SeccompFilter::new(
        refused_rules()?,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(invalid)?;
    let absent = SeccompFilter::new(
        absent_rules(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(invalid)?;
    Ok(Programs {
        refused: refused.try_into().map_err(invalid)?,
        absent: absent.try_into().map_err(invalid)?,
    })
}

/// Installs both filters in the calling thread (sets `no_new_privs` first, which the
/// kernel requires of an unprivileged process). Allocates nothing: safe after `fork`.
pub(crate) fn install(programs: &Programs) -> io::Result<()> {
    for program in [&programs.refused, &programs.absent] {
        seccompiler::apply_filter(program).map_err(|error| match error {
            seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => e,
            _ => io::Error::from_raw_os_error(libc::EINVAL),
        })?;
    }
    Ok(())
}

fn invalid(error: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("compiling the system-call filter: {error}"),
    )
}

/// One condition on the low 32 bits of argument `index`: `(arg & mask) == mask`.
fn has_bits(index: u8, mask: u64) -> io::Result<SeccompCondition> {
    SeccompCondition::new(
        index,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(mask),
        mask,
    )
    .map_err(invalid)
}

/// One condition: the low 32 bits of argument `index` equal `value`.
fn equals(index: u8, value: u64) -> io::Result<SeccompCondition> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value).map_err(invalid)
}

fn rule(conditions: Vec<SeccompCondition>) -> io::Result<SeccompRule> {
    SeccompRule::new(conditions).map_err(invalid)
}

/// A mode argument at `mode` carrying either privilege bit, optionally only when the
/// flags argument at `flags` has one of `flag_bits` (each a separate rule).
fn privileged_mode(mode: u8, flags: Option<(u8, &[u64])>) -> io::Result<Vec<SeccompRule>> {
    let mut rules = Vec::new();
    for bit in PRIVILEGE_BITS {
        match flags {
            None => rules.push(rule(vec![has_bits(mode, bit)?])?),
            Some((index, flag_bits)) => {
                for flag in flag_bits {
                    rules.push(rule(vec![has_bits(index, *flag)?, has_bits(mode, bit)?])?);
                }
            }
        }
    }
    Ok(rules)
}

/// The `EPERM` rules, by system-call number.
fn refused_rules() -> io::Result<BTreeMap<i64, Vec<SeccompRule>>> {
    let creating: &[u64] = &[libc::O_CREAT as u64, O_TMPFILE_BIT];
    let mut rules: Vec<(i64, Vec<SeccompRule>)> = vec![
        (
            libc::SYS_ioctl,
            vec![
                rule(vec![equals(1, libc::TIOCSTI)?])?,
                rule(vec![equals(1, libc::TIOCLINUX)?])?,
            ],
        ),
        (libc::SYS_fchmod, privileged_mode(1, None)?),
        (libc::SYS_fchmodat, privileged_mode(2, None)?),
        (SYS_FCHMODAT2, privileged_mode(2, None)?),
        (libc::SYS_openat, privileged_mode(3, Some((2, creating)))?),
        (libc::SYS_mknodat, privileged_mode(2, None)?),
    ];
    #[cfg(target_arch = "x86_64")]
    rules.extend([
        (libc::SYS_chmod, privileged_mode(1, None)?),
        (libc::SYS_creat, privileged_mode(1, None)?),
        (libc::SYS_open, privileged_mode(2, Some((1, creating)))?),
        (libc::SYS_mknod, privileged_mode(1, None)?),
    ]);
    #[cfg(target_arch = "x86_64")]
    {
        let x32: Vec<(i64, Vec<SeccompRule>)> = rules
            .iter()
            .map(|(number, chain)| (number | X32_BIT, chain.clone()))
            .collect();
        let ioctl = rules
            .iter()
            .find(|(number, _)| *number == libc::SYS_ioctl)
            .map(|(_, chain)| chain.clone())
            .unwrap_or_default();
        rules.extend(x32);
        rules.push((X32_IOCTL | X32_BIT, ioctl));
    }
    Ok(rules.into_iter().collect())
}

/// The `ENOSYS` system calls (every use refused), by number.
fn absent_rules() -> BTreeMap<i64, Vec<SeccompRule>> {
    let numbers = [
        libc::SYS_openat2,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ];
    let mut all: Vec<i64> = numbers.to_vec();
    #[cfg(target_arch = "x86_64")]
    all.extend(numbers.iter().map(|number| number | X32_BIT));
    all.into_iter().map(|number| (number, Vec::new())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_filters_compile_for_this_architecture() {
        let programs = programs().expect("compiled");
        assert!(programs.refused.len() > 20, "{}", programs.refused.len());
        assert!(!programs.absent.is_empty());
    }
}
