//! Parsing the `/proc` text a process lookup reads (no I/O here): the socket tables
//! (`/proc/PID/net/tcp`, `tcp6`), `/proc/PID/stat`, the `NSpid` line of
//! `/proc/PID/status`, the first element of `/proc/PID/cmdline` and the links under
//! `/proc/PID/fd` and `/proc/PID/ns`. Every parser takes text that a jailed process may
//! have shaped (its `comm` in `stat`, its arguments) and returns `None` rather than
//! guess.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One row of `/proc/net/tcp` or `tcp6`: the socket's two ends and its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketRow {
    /// Its local address and port.
    pub local: SocketAddr,
    /// Its remote address and port.
    pub remote: SocketAddr,
    /// The socket's inode (`socket:[INODE]` in `/proc/PID/fd`); 0 for a socket no
    /// process holds any more.
    pub inode: u64,
}

/// Parses one row of `/proc/net/tcp` or `tcp6` (`None` for the header and anything
/// malformed).
pub fn socket_row(line: &str) -> Option<SocketRow> {
    let mut fields = line.split_ascii_whitespace();
    let slot = fields.next()?;
    if !slot.ends_with(':') {
        return None;
    }
    let local = socket_address(fields.next()?)?;
    let remote = socket_address(fields.next()?)?;
    // st, tx:rx, tr:when, retrnsmt, uid, timeout, then the inode.
    let inode = fields.nth(6)?.parse().ok()?;
    Some(SocketRow {
        local,
        remote,
        inode,
    })
}

/// `ADDR:PORT` as the kernel prints it: the address as 32-bit words in host byte order
/// (one word for IPv4, four for IPv6), the port in hex.
fn socket_address(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = match address.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(address)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (index, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(address.get(index * 8..index * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// One 32-bit word printed with `%08X` from memory in host byte order, as its bytes.
fn word(hex: &str) -> Option<[u8; 4]> {
    if hex.len() != 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
}

/// The inode of the socket in `table` (the text of `tcp` or `tcp6`) whose local end is
/// `local` and remote end `remote`, IPv4-mapped addresses compared as IPv4. `None` when no
/// row (with a live inode) matches.
pub fn find_socket(table: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    table
        .lines()
        .find_map(|line| socket_of(line, local, remote))
}

/// The inode of the socket in one `tcp`/`tcp6` row if that row's local end is `local`
/// and remote end `remote` (IPv4-mapped compared as IPv4) and it has a live inode: what
/// a reader going through the table line by line asks, to stop at the match.
pub fn socket_of(line: &str, local: SocketAddr, remote: SocketAddr) -> Option<u64> {
    let row = socket_row(line)?;
    (row.inode != 0
        && canonical(row.local) == canonical(local)
        && canonical(row.remote) == canonical(remote))
    .then_some(row.inode)
}

/// `address` with an IPv4-mapped IPv6 address read as IPv4.
fn canonical(address: SocketAddr) -> SocketAddr {
    SocketAddr::new(address.ip().to_canonical(), address.port())
}

/// What a lookup needs of `/proc/PID/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The parent's pid (in the reader's PID namespace).
    pub ppid: u32,
    /// Start time after boot, in clock ticks.
    pub start: u64,
}

/// Parses `/proc/PID/stat`. The `comm` field is the process's own choice and may hold
/// spaces and parentheses: the fields are read after its *last* `)`.
pub fn stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().take(20).collect();
    // After comm: state (3), ppid (4), ... starttime (22).
    Some(Stat {
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The `NSpid` line of `/proc/PID/status`: the pid in each PID namespace from the
/// reader's down to the process's own (the last one is the pid inside the jail).
pub fn nspid(status: &str) -> Option<Vec<u32>> {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))?;
    let pids: Option<Vec<u32>> = line
        .split_ascii_whitespace()
        .map(|p| p.parse().ok())
        .collect();
    pids.filter(|pids| !pids.is_empty())
}

/// The first element of `/proc/PID/cmdline` (`argv[0]`), up to its NUL; `None` when the
/// command line is empty (a kernel thread, a zombie, or a process that erased it).
pub fn argv0(cmdline: &[u8]) -> Option<&[u8]> {
    let first = cmdline.split(|&b| b == 0).next()?;
    (!first.is_empty()).then_some(first)
}

/// The inode of a `socket:[INODE]` link (a `/proc/PID/fd` entry).
pub fn socket_inode(link: &[u8]) -> Option<u64> {
    bracketed(link, b"socket:[")
}

/// The inode of a `/proc/PID/ns/pid` link (`pid:[INODE]`).
pub fn pid_namespace(link: &[u8]) -> Option<u64> {
    bracketed(link, b"pid:[")
}

/// The decimal number in `PREFIXNUMBER]`.
fn bracketed(link: &[u8], prefix: &[u8]) -> Option<u64> {
    let digits = link.strip_prefix(prefix)?.strip_suffix(b"]")?;
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:01BB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41122 1 0000000000000000 100 0 0 10 0
   1: 070012C6:9C40 070012C6:01BB 01 00000000:00000000 00:00000000 00000000  1000        0 41190 1 0000000000000000 20 4 30 10 -1
   2: 070012C6:01BB 070012C6:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 41191 1 0000000000000000 20 4 30 10 -1
";

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_client_end_is_found_by_its_two_addresses() {
        let (client, server) = (addr("198.18.0.7:40000"), addr("198.18.0.7:443"));
        assert_eq!(find_socket(TCP, client, server), Some(41190));
        assert_eq!(find_socket(TCP, server, client), Some(41191));
        assert_eq!(find_socket(TCP, client, addr("198.18.0.7:80")), None);
    }

    #[test]
    fn ipv6_rows_and_mapped_addresses() {
        // [::1]:8080 -> [::1]:443, and a v4-mapped 127.0.0.1 on a v6 socket.
        let table = "  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:01BB 01 00000000:00000000 00:00000000 00000000  1000        0 777 1
   1: 0000000000000000FFFF00000100007F:1F91 0000000000000000FFFF00000100007F:01BB 01 00000000:00000000 00:00000000 00000000  1000        0 778 1
";
        assert_eq!(
            find_socket(table, addr("[::1]:8080"), addr("[::1]:443")),
            Some(777)
        );
        assert_eq!(
            find_socket(table, addr("127.0.0.1:8081"), addr("127.0.0.1:443")),
            Some(778)
        );
    }

    #[test]
    fn stat_reads_past_a_hostile_comm() {
        let text = "42 (a) b) (c) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(
            stat(text),
            Some(Stat {
                ppid: 7,
                start: 123456
            })
        );
        assert_eq!(stat("42 (x"), None);
        assert_eq!(stat("42 (x) S"), None);
    }

    #[test]
    fn nspid_lists_every_namespace() {
        let status = "Name:\tcurl\nNSpid:\t81234\t5\nPPid:\t1\n";
        assert_eq!(nspid(status), Some(vec![81234, 5]));
        assert_eq!(nspid("Name:\tx\n"), None);
        assert_eq!(nspid("NSpid:\tx\n"), None);
    }

    #[test]
    fn argv0_is_the_first_element() {
        assert_eq!(argv0(b"git\0fetch\0"), Some(&b"git"[..]));
        assert_eq!(argv0(b"no-nul"), Some(&b"no-nul"[..]));
        assert_eq!(argv0(b""), None);
        assert_eq!(argv0(b"\0x"), None);
    }

    #[test]
    fn links_give_their_inodes() {
        assert_eq!(socket_inode(b"socket:[41190]"), Some(41190));
        assert_eq!(socket_inode(b"pipe:[41190]"), None);
        assert_eq!(socket_inode(b"socket:[]"), None);
        assert_eq!(socket_inode(b"socket:[1x]"), None);
        assert_eq!(pid_namespace(b"pid:[4026531836]"), Some(4026531836));
        assert_eq!(pid_namespace(b"net:[4026531836]"), None);
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(text in ".{0,300}", bytes: Vec<u8>) {
            let _ = socket_row(&text);
            let _ = stat(&text);
            let _ = nspid(&text);
            let _ = argv0(&bytes);
            let _ = socket_inode(&bytes);
            let _ = find_socket(&text, addr("127.0.0.1:1"), addr("127.0.0.1:2"));
        }

        #[test]
        fn printed_rows_parse_back(a: [u8; 4], b: [u8; 4], pa: u16, pb: u16, inode: u64) {
            let hex = |bytes: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(bytes));
            let line = format!(
                "  12: {}:{pa:04X} {}:{pb:04X} 01 00000000:00000000 00:00000000 00000000  1000 0 {inode} 1",
                hex(a), hex(b)
            );
            let row = socket_row(&line).unwrap();
            proptest::prop_assert_eq!(row.local, SocketAddr::from((a, pa)));
            proptest::prop_assert_eq!(row.remote, SocketAddr::from((b, pb)));
            proptest::prop_assert_eq!(row.inode, inode);
        }

        #[test]
        fn stat_finds_ppid_whatever_comm_says(comm in "[ -~]{0,16}", ppid: u32, start: u64) {
            let text = format!("9 ({comm}) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0");
            proptest::prop_assert_eq!(stat(&text), Some(Stat { ppid, start }));
        }
    }
}
