//! WebSocket clients through the proxy: an upgrade over CONNECT and TLS with the RFC 6455
//! example key, masked client frames written by hand (whole or fragmented), and the server
//! frames read back, every read bounded in time.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{
    CLOSE_WAIT, ChainedHead, EXCHANGE_TIMEOUT, RawResponse, Sni, TunnelOutcome, connect, read_head,
    read_response, runtime, tls_over,
};
use crate::support::pki::TestPki;

/// The RFC 6455 §1.3 example key, whose accept value is [`WS_ACCEPT`] (so the client can
/// check the handshake without computing SHA-1).
pub const WS_KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
/// `Sec-WebSocket-Accept` for [`WS_KEY`].
pub const WS_ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";
/// The mask every client frame uses.
const WS_MASK: [u8; 4] = [0x5a, 0x17, 0xc3, 0x8e];

/// A WebSocket session that was upgraded (101).
#[derive(Debug)]
pub struct WebSocketSession {
    /// The 101 answer.
    pub handshake: RawResponse,
    /// Payloads of the frames echoed back, in order.
    pub echoes: Vec<Vec<u8>>,
    /// Whether the close frame was answered with a close frame.
    pub close_answered: bool,
}

/// One masked client frame (FIN set).
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    client_frame_with(true, opcode, payload)
}

/// One masked client frame; `fin` unset makes it a fragment of a longer message.
fn client_frame_with(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![if fin { 0x80 | opcode } else { opcode }];
    let len = payload.len();
    if len < 126 {
        frame.push(0x80 | len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        frame.push(0x80 | 126);
        frame.extend_from_slice(&short.to_be_bytes());
    } else {
        frame.push(0x80 | 127);
        frame.extend_from_slice(&(len as u64).to_be_bytes());
    }
    frame.extend_from_slice(&WS_MASK);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ WS_MASK[i % 4]));
    frame
}

/// Reads one unmasked server frame: (opcode, payload).
async fn read_server_frame<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    stream.read_exact(&mut head).await?;
    let mut len = u64::from(head[1] & 0x7f);
    if len == 126 {
        let mut ext = [0u8; 2];
        stream.read_exact(&mut ext).await?;
        len = u64::from(u16::from_be_bytes(ext));
    } else if len == 127 {
        let mut ext = [0u8; 8];
        stream.read_exact(&mut ext).await?;
        len = u64::from_be_bytes(ext);
    }
    if len > 1024 * 1024 {
        return Err(std::io::Error::other("frame too large for the test"));
    }
    let mut payload = vec![0u8; len as usize];
    stream.read_exact(&mut payload).await?;
    Ok((head[0] & 0x0f, payload))
}

type TlsToProxy = tokio_rustls::client::TlsStream<TcpStream>;

/// A WebSocket upgrade through the proxy: CONNECT `target`, TLS with `sni` (trusting the
/// proxy CA), then `GET path` asking for an upgrade, with `extra_headers`
/// (`Name: value\r\n` lines).
#[derive(Clone, Copy)]
pub struct WsUpgrade<'a> {
    /// The proxy's port.
    pub proxy_port: u16,
    /// The test PKI.
    pub pki: &'a TestPki,
    /// `host:port` to CONNECT to (also the `Host` header).
    pub target: &'a str,
    /// The TLS server name.
    pub sni: &'a str,
    /// The request path.
    pub path: &'a str,
    /// More request header lines.
    pub extra_headers: &'a str,
}

/// Performs `upgrade`; on 101 returns the stream and the answer, otherwise the refusal.
async fn websocket_upgrade(
    upgrade: &WsUpgrade<'_>,
    deadline: Instant,
) -> Result<(TlsToProxy, RawResponse), TunnelOutcome> {
    let WsUpgrade {
        proxy_port,
        pki,
        target,
        sni,
        path,
        extra_headers,
    } = *upgrade;
    let stream = match connect(proxy_port, target, deadline).await {
        Ok(stream) => stream,
        Err(refusal) => return Err(TunnelOutcome::RefusedOnConnect(refusal)),
    };
    let mut tls = match tls_over(pki, stream, Sni::Verified(sni), &[b"http/1.1"]).await {
        Ok(tls) => tls,
        Err(e) => return Err(TunnelOutcome::TlsFailed(e)),
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {target}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {WS_KEY}\r\n{extra_headers}\r\n"
    );
    if let Err(e) = tls.write_all(request.as_bytes()).await {
        return Err(TunnelOutcome::TlsFailed(format!("write upgrade: {e}")));
    }
    let (head, mut handshake) = match read_head(&mut tls, deadline).await {
        Ok(read) => read,
        Err(response) => return Err(TunnelOutcome::InsideTls(response)),
    };
    if handshake.status != 101 {
        let response = read_response(
            &mut ChainedHead::new(head, &mut tls),
            deadline,
            Duration::ZERO,
        )
        .await;
        return Err(TunnelOutcome::InsideTls(response));
    }
    handshake.raw = head;
    Ok((tls, handshake))
}

/// CONNECTs to `target`, does TLS with `sni`, asks for a WebSocket upgrade of `path`,
/// sends each message as a text frame and collects the echoes, then closes. A refusal (on
/// CONNECT or as an HTTP answer other than 101) comes back as `Err`.
pub fn websocket_echo(
    proxy_port: u16,
    pki: &TestPki,
    target: &str,
    sni: &str,
    path: &str,
    messages: &[&[u8]],
) -> Result<WebSocketSession, TunnelOutcome> {
    runtime().block_on(async {
        let deadline = Instant::now() + EXCHANGE_TIMEOUT;
        let upgrade = WsUpgrade {
            proxy_port,
            pki,
            target,
            sni,
            path,
            extra_headers: "",
        };
        let (mut tls, handshake) = websocket_upgrade(&upgrade, deadline).await?;
        let exchange = async {
            let mut echoes = Vec::new();
            for message in messages {
                tls.write_all(&client_frame(0x1, message)).await?;
                let (_, payload) = read_server_frame(&mut tls).await?;
                echoes.push(payload);
            }
            tls.write_all(&client_frame(0x8, &1000u16.to_be_bytes()))
                .await?;
            let (opcode, _) = read_server_frame(&mut tls).await?;
            Ok::<_, std::io::Error>((echoes, opcode == 0x8))
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, exchange).await {
            Ok(Ok((echoes, close_answered))) => Ok(WebSocketSession {
                handshake,
                echoes,
                close_answered,
            }),
            Ok(Err(e)) => Err(TunnelOutcome::TlsFailed(format!("WebSocket exchange: {e}"))),
            Err(_) => Err(TunnelOutcome::TlsFailed(
                "WebSocket exchange timed out".to_string(),
            )),
        }
    })
}

/// One step of a scripted WebSocket session ([`websocket_script`]).
#[derive(Clone, Debug)]
pub enum WsStep {
    /// Send one masked frame.
    Send {
        /// Whether this frame ends its message.
        fin: bool,
        /// The opcode (0 continuation, 1 text, 2 binary, 8 close, 9 ping, 10 pong).
        opcode: u8,
        /// The payload (unmasked).
        payload: Vec<u8>,
    },
    /// Read one frame from the server (the script stops at end of stream).
    Receive,
}

impl WsStep {
    /// A whole text message in one frame.
    pub fn text(text: &str) -> WsStep {
        WsStep::Send {
            fin: true,
            opcode: 0x1,
            payload: text.as_bytes().to_vec(),
        }
    }

    /// A close frame with status `code`.
    pub fn close(code: u16) -> WsStep {
        WsStep::Send {
            fin: true,
            opcode: 0x8,
            payload: code.to_be_bytes().to_vec(),
        }
    }
}

/// A frame the server sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFrame {
    /// The opcode.
    pub opcode: u8,
    /// The payload.
    pub payload: Vec<u8>,
}

impl ServerFrame {
    /// A close frame's status code.
    pub fn close_code(&self) -> Option<u16> {
        (self.opcode == 0x8 && self.payload.len() >= 2)
            .then(|| u16::from_be_bytes([self.payload[0], self.payload[1]]))
    }

    /// A close frame's reason text.
    pub fn close_reason(&self) -> String {
        String::from_utf8_lossy(self.payload.get(2..).unwrap_or_default()).into_owned()
    }
}

/// What a scripted WebSocket session saw.
#[derive(Debug)]
pub struct WsTranscript {
    /// The 101 answer.
    pub handshake: RawResponse,
    /// The frames received, in order (by `Receive` steps, then until the stream ended).
    pub received: Vec<ServerFrame>,
    /// Whether the proxy ended the stream within a few seconds after the script.
    pub ended: bool,
}

/// Performs `upgrade`, runs `steps`, then reads frames until the stream ends or
/// [`CLOSE_WAIT`] passes. Write errors are ignored (the proxy may have closed already).
/// A refusal of the upgrade comes back as `Err`.
pub fn websocket_script(
    upgrade: &WsUpgrade<'_>,
    steps: &[WsStep],
) -> Result<WsTranscript, TunnelOutcome> {
    runtime().block_on(async {
        let deadline = Instant::now() + EXCHANGE_TIMEOUT;
        let (mut tls, handshake) = websocket_upgrade(upgrade, deadline).await?;
        let mut received = Vec::new();
        let mut ended = false;
        for step in steps {
            match step {
                WsStep::Send {
                    fin,
                    opcode,
                    payload,
                } => {
                    let _ = tls
                        .write_all(&client_frame_with(*fin, *opcode, payload))
                        .await;
                }
                WsStep::Receive => {
                    let remaining = deadline.saturating_duration_since(Instant::now());
                    match tokio::time::timeout(remaining, read_server_frame(&mut tls)).await {
                        Ok(Ok((opcode, payload))) => received.push(ServerFrame { opcode, payload }),
                        Ok(Err(_)) => {
                            ended = true;
                            break;
                        }
                        Err(_) => break,
                    }
                }
            }
        }
        let until = Instant::now() + CLOSE_WAIT;
        for _ in 0..64 {
            if ended {
                break;
            }
            let remaining = until.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, read_server_frame(&mut tls)).await {
                Ok(Ok((opcode, payload))) => received.push(ServerFrame { opcode, payload }),
                Ok(Err(_)) => ended = true,
                Err(_) => break,
            }
        }
        Ok(WsTranscript {
            handshake,
            received,
            ended,
        })
    })
}
