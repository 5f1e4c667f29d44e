//! The `limits` section: how long a client may take over a head or an inspected body,
//! how long an idle client connection is kept, how many bytes the proxy holds for
//! inspection at once and how many connections one client, and all clients, may hold
//! (docs/policy.md,
//! "limits"). Every field is optional; combined sources keep the strictest (smallest)
//! value of each.

use std::time::Duration;

/// Default of `limits.body_timeout`.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of `limits.idle_timeout`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Default of `limits.buffer_memory`: 256 MiB.
pub const DEFAULT_BUFFER_MEMORY: u64 = 256 << 20;
/// Default of `limits.connections_per_client`: a quarter of [`DEFAULT_CONNECTIONS`].
pub const DEFAULT_CONNECTIONS_PER_CLIENT: u32 = 512;
/// Default of `limits.connections`.
pub const DEFAULT_CONNECTIONS: u32 = 2048;

/// The `limits` section as written; `None` = not set (the default applies).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// A head or an inspected body not complete by then is answered 408.
    pub body_timeout: Option<Duration>,
    /// An idle client connection (HTTP/1.1 keep-alive, HTTP/2 without streams) closes.
    pub idle_timeout: Option<Duration>,
    /// Bytes held for inspection at once, across every request.
    pub buffer_memory: Option<u64>,
    /// Concurrent connections from one client address.
    pub connections_per_client: Option<u32>,
    /// Concurrent client connections in all.
    pub connections: Option<u32>,
}

impl Limits {
    /// `body_timeout` in force.
    pub fn body_timeout(&self) -> Duration {
        self.body_timeout.unwrap_or(DEFAULT_BODY_TIMEOUT)
    }

    /// `idle_timeout` in force.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT)
    }

    /// `buffer_memory` in force, in bytes.
    pub fn buffer_memory(&self) -> u64 {
        self.buffer_memory.unwrap_or(DEFAULT_BUFFER_MEMORY)
    }

    /// `connections_per_client` in force: as written (or the default), and never more
    /// than [`client_share`] of `connections`, so that three client addresses at their
    /// cap still leave a quarter of the connections to every other client
    /// (docs/reliability.md, "The client-connection cap is shared").
    pub fn connections_per_client(&self) -> u32 {
        self.connections_per_client
            .unwrap_or(DEFAULT_CONNECTIONS_PER_CLIENT)
            .min(client_share(self.connections()))
    }

    /// `connections` in force.
    pub fn connections(&self) -> u32 {
        self.connections.unwrap_or(DEFAULT_CONNECTIONS)
    }

    /// Adds another source's section: of two values set, the smaller (stricter) holds.
    pub fn merge(&mut self, other: Limits) {
        self.body_timeout = smaller(self.body_timeout, other.body_timeout);
        self.idle_timeout = smaller(self.idle_timeout, other.idle_timeout);
        self.buffer_memory = smaller(self.buffer_memory, other.buffer_memory);
        self.connections_per_client =
            smaller(self.connections_per_client, other.connections_per_client);
        self.connections = smaller(self.connections, other.connections);
    }
}

/// The most connections one client address may hold when `connections` are allowed in
/// all: a quarter of them (at least one).
pub fn client_share(connections: u32) -> u32 {
    (connections / 4).max(1)
}

fn smaller<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parses a duration: a whole number followed by `ms`, `s`, `m` or `h` (`30s`, `2m`).
/// Zero, a missing unit and anything else are refused with a message saying what to write.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = crate::size::number_and_unit(text)
        .ok_or("is not a duration: write a whole number and a unit, as in 30s or 2m")?;
    let millis = match unit {
        "ms" => Some(number),
        "s" => number.checked_mul(1_000),
        "m" => number.checked_mul(60_000),
        "h" => number.checked_mul(3_600_000),
        "" => return Err("has no unit: write ms, s, m or h after the number, as in 30s".into()),
        _ => return Err("has an unknown unit: write ms, s, m or h, as in 30s".into()),
    };
    match millis {
        Some(0) => Err("must be above zero".into()),
        Some(ms) if ms <= 86_400_000 => Ok(Duration::from_millis(ms)),
        _ => Err("is too long: at most 24h".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_unit() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in [
            "",
            "0s",
            "30",
            "s",
            "-1s",
            "1.5s",
            "3d",
            "25h",
            "99999999999999999999s",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn merging_keeps_the_smallest_of_each() {
        let mut a = Limits {
            body_timeout: Some(Duration::from_secs(10)),
            buffer_memory: Some(64 << 20),
            ..Limits::default()
        };
        a.merge(Limits {
            body_timeout: Some(Duration::from_secs(20)),
            idle_timeout: Some(Duration::from_secs(5)),
            buffer_memory: Some(1 << 20),
            connections_per_client: None,
            connections: Some(7),
        });
        assert_eq!(a.body_timeout(), Duration::from_secs(10));
        assert_eq!(a.idle_timeout(), Duration::from_secs(5));
        assert_eq!(a.buffer_memory(), 1 << 20);
        // Seven in all: one client may hold one (a quarter, at least one).
        assert_eq!(a.connections_per_client(), 1);
        assert_eq!(a.connections(), 7);
        assert_eq!(
            Limits::default().connections_per_client(),
            DEFAULT_CONNECTIONS_PER_CLIENT
        );
        assert_eq!(
            client_share(DEFAULT_CONNECTIONS),
            DEFAULT_CONNECTIONS_PER_CLIENT
        );
        assert_eq!(Limits::default().buffer_memory(), DEFAULT_BUFFER_MEMORY);
        assert_eq!(Limits::default().connections(), DEFAULT_CONNECTIONS);
    }
}
