//! The jail's control protocol: fixed-size messages on a `SOCK_SEQPACKET`
//! socket pair between airlock and the jail (listeners with their file
//! descriptor, ready, failures, go-ahead).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::Protocol;
use crate::error::SetupStep;

/// Size of every control message in bytes.
pub(crate) const MESSAGE_LEN: usize = 12;

const KIND_LISTENER: u8 = 1;
const KIND_READY: u8 = 2;
const KIND_SETUP_FAILED: u8 = 3;
const KIND_EXEC_FAILED: u8 = 4;
const KIND_GO: u8 = 5;
const KIND_CONFINED: u8 = 6;
/// The `item` of a setup failure that names no path.
const NO_ITEM: u32 = u32::MAX;

/// IP family of a handed listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// IPv4 (`0.0.0.0`).
    V4,
    /// IPv6 (`[::]`, `IPV6_V6ONLY`).
    V6,
}

impl Family {
    /// The wildcard address of this family with `port` (`0.0.0.0:port`, `[::]:port`).
    pub(crate) fn wildcard(self, port: u16) -> SocketAddr {
        match self {
            Family::V4 => SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)),
            Family::V6 => SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
        }
    }
}

/// One control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message {
    /// A listening socket follows as `SCM_RIGHTS` (jail → airlock).
    Listener {
        proto: Protocol,
        family: Family,
        port: u16,
    },
    /// Setup finished; the jail waits for [`Message::Go`] (jail → airlock).
    Ready,
    /// A setup step failed with this errno (jail → airlock).
    SetupFailed {
        step: SetupStep,
        item: Option<u32>,
        errno: i32,
    },
    Confined {
        landlock_abi: u8,
    },
    /// `execve` of the command failed with this errno (jail → airlock).
    ExecFailed {
        errno: i32,
    },
    /// Run the command (airlock → jail).
    Go,
}

impl Message {
    /// Encodes the message into its fixed-size form.
    pub(crate) fn encode(self) -> [u8; MESSAGE_LEN] {
        let mut bytes = [0u8; MESSAGE_LEN];
        match self {
            Message::Listener {
                proto,
                family,
                port,
            } => {
                bytes[0] = KIND_LISTENER;
                bytes[1] = match proto {
                    Protocol::Tcp => 0,
                    Protocol::Udp => 1,
                };
                bytes[2] = match family {
                    Family::V4 => 4,
                    Family::V6 => 6,
                };
                bytes[4..6].copy_from_slice(&port.to_le_bytes());
            }
            Message::Ready => bytes[0] = KIND_READY,
            Message::SetupFailed { step, item, errno } => {
                bytes[0] = KIND_SETUP_FAILED;
                bytes[3] = step.code();
                bytes[4..8].copy_from_slice(&item.unwrap_or(NO_ITEM).to_le_bytes());
                bytes[8..12].copy_from_slice(&errno.to_le_bytes());
            }
            Message::ExecFailed { errno } => {
                bytes[0] = KIND_EXEC_FAILED;
                bytes[8..12].copy_from_slice(&errno.to_le_bytes());
            }
            Message::Go => bytes[0] = KIND_GO,
            Message::Confined { landlock_abi } => {
                bytes[0] = KIND_CONFINED;
                bytes[1] = landlock_abi;
            }
        }
        bytes
    }

    /// Decodes a message; `None` for anything malformed.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Message> {
        let bytes: &[u8; MESSAGE_LEN] = bytes.try_into().ok()?;
        let errno = i32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        match bytes[0] {
            KIND_LISTENER => {
                let proto = match bytes[1] {
                    0 => Protocol::Tcp,
                    1 => Protocol::Udp,
                    _ => return None,
                };
                let family = match bytes[2] {
                    4 => Family::V4,
                    6 => Family::V6,
                    _ => return None,
                };
                let port = u16::from_le_bytes([bytes[4], bytes[5]]);
                Some(Message::Listener {
                    proto,
                    family,
                    port,
                })
            }
            KIND_READY => Some(Message::Ready),
            KIND_SETUP_FAILED => Some(Message::SetupFailed {
                step: SetupStep::from_code(bytes[3])?,
                item: Some(u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]))
                    .filter(|item| *item != NO_ITEM),
                errno,
            }),
            KIND_CONFINED => Some(Message::Confined {
                landlock_abi: bytes[1],
            }),
            KIND_EXEC_FAILED => Some(Message::ExecFailed { errno }),
            KIND_GO => Some(Message::Go),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let messages = [
            Message::Listener {
                proto: Protocol::Udp,
                family: Family::V6,
                port: 53,
            },
            Message::Listener {
                proto: Protocol::Tcp,
                family: Family::V4,
                port: 65535,
            },
            Message::Ready,
            Message::SetupFailed {
                step: SetupStep::MountProc,
                item: None,
                errno: libc::EPERM,
            },
            Message::SetupFailed {
                step: SetupStep::WritablePath,
                item: Some(3),
                errno: libc::ENOENT,
            },
            Message::Confined { landlock_abi: 6 },
            Message::ExecFailed {
                errno: libc::ENOENT,
            },
            Message::Go,
        ];
        for message in messages {
            assert_eq!(Message::decode(&message.encode()), Some(message));
        }
    }

    #[test]
    fn malformed_messages_are_rejected() {
        assert_eq!(Message::decode(&[]), None);
        assert_eq!(Message::decode(&[1u8; MESSAGE_LEN + 1]), None);
        let mut bytes = Message::Ready.encode();
        bytes[0] = 99;
        assert_eq!(Message::decode(&bytes), None);
        let mut bytes = Message::Listener {
            proto: Protocol::Tcp,
            family: Family::V4,
            port: 1,
        }
        .encode();
        bytes[2] = 5;
        assert_eq!(Message::decode(&bytes), None);
    }
}
