//! The admin API as `airlock watch` uses it: the event stream (`GET /v1/events`), the
//! pending asks (`GET /v1/pending`) and answers (`POST /v1/pending/{id}`), over the run's
//! unix socket or a TCP address, with the bearer token when one is given. One HTTP/1.1
//! connection per call; every call but the stream has a deadline.

use std::time::Duration;

use airlock_control::Listen;
use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc;

use crate::model::{Ask, Scope};

/// How long a call other than the event stream may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read from a call (the pending list is bounded by the proxy).
const MAX_ANSWER: usize = 4 << 20;
/// The longest event line kept (audit lines are far shorter).
const MAX_EVENT: usize = 1 << 20;

/// Why a call to the admin API failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket or address could not be reached.
    #[error("cannot reach the admin API at {at}: {source}")]
    Connect {
        /// Where.
        at: String,
        /// Why.
        source: std::io::Error,
    },
    /// HTTP failed on the connection.
    #[error("admin API: {0}")]
    Http(String),
    /// The call took longer than its deadline.
    #[error("admin API: no answer within {0:?}")]
    Timeout(Duration),
    /// The API answered with an error status.
    #[error("admin API: {status}: {body}")]
    Status {
        /// The status.
        status: StatusCode,
        /// Its body, as text.
        body: String,
    },
    /// The answer was not what the API documents.
    #[error("admin API: unexpected answer: {0}")]
    Unexpected(String),
}

/// A way to the admin API.
#[derive(Clone, Debug)]
pub struct Client {
    at: Listen,
    token: Option<String>,
}

impl Client {
    /// A client for the API at `at`, sending `token` as a bearer token when given.
    pub fn new(at: Listen, token: Option<String>) -> Client {
        Client { at, token }
    }

    /// Where it connects, as a user would write it.
    pub fn describe(&self) -> String {
        match &self.at {
            Listen::Unix(path) => format!("unix:{}", path.display()),
            Listen::Tcp(address) => address.to_string(),
        }
    }

    /// The asks waiting for an answer.
    pub async fn pending(&self) -> Result<Vec<Ask>, ClientError> {
        let body = self.call(Method::GET, "/v1/pending", None).await?;
        let unexpected = |e: serde_json::Error| ClientError::Unexpected(e.to_string());
        let mut value: serde_json::Value = serde_json::from_slice(&body).map_err(unexpected)?;
        // The list itself (docs/contract.md), or an object holding it as "pending".
        if let Some(list) = value.get_mut("pending") {
            value = list.take();
        }
        serde_json::from_value(value).map_err(unexpected)
    }

    /// Answers the ask `id`.
    pub async fn answer(&self, id: &str, allow: bool, scope: Scope) -> Result<(), ClientError> {
        let decision = if allow { "allow" } else { "deny" };
        let body = serde_json::json!({"decision": decision, "scope": scope.as_str()});
        let path = format!("/v1/pending/{id}");
        self.call(Method::POST, &path, Some(body.to_string()))
            .await?;
        Ok(())
    }

    /// Streams the audit lines of `GET /v1/events?backlog=BACKLOG` (the last `backlog`
    /// lines the run kept, then the live ones) into `lines` until the stream ends
    /// (cleanly or cut off), or the receiver is dropped; an error only when the stream
    /// cannot be opened or an event is over-long.
    pub async fn events(
        &self,
        backlog: usize,
        lines: mpsc::Sender<String>,
    ) -> Result<(), ClientError> {
        let path = format!("/v1/events?backlog={backlog}");
        let response = self.send(Method::GET, &path, None).await?;
        let status = response.status();
        if !status.is_success() {
            let body = read_limited(response.into_body()).await.unwrap_or_default();
            return Err(status_error(status, &body));
        }
        let mut body = response.into_body();
        let mut pending = BytesMut::new();
        // A stream cut off (the proxy stopped) ends like one that closed cleanly.
        while let Some(Ok(frame)) = body.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            for line in take_events(&mut pending)? {
                if lines.send(line).await.is_err() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<Bytes, ClientError> {
        let call = async {
            let response = self.send(method, path, body).await?;
            let status = response.status();
            let body = read_limited(response.into_body()).await?;
            if status.is_success() {
                Ok(body)
            } else {
                Err(status_error(status, &body))
            }
        };
        tokio::time::timeout(CALL_TIMEOUT, call)
            .await
            .map_err(|_| ClientError::Timeout(CALL_TIMEOUT))?
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<http::Response<Incoming>, ClientError> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "airlock");
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| ClientError::Http(e.to_string()))?;
        let mut sender = self.connect().await?;
        sender
            .send_request(request)
            .await
            .map_err(|e| ClientError::Http(e.to_string()))
    }

    async fn connect(
        &self,
    ) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, ClientError> {
        let failed = |source| ClientError::Connect {
            at: self.describe(),
            source,
        };
        let (sender, connection) = match &self.at {
            Listen::Unix(path) => {
                let stream = UnixStream::connect(path).await.map_err(failed)?;
                handshake(stream).await?
            }
            Listen::Tcp(address) => {
                let stream = TcpStream::connect(address).await.map_err(failed)?;
                handshake(stream).await?
            }
        };
        tokio::spawn(connection);
        Ok(sender)
    }
}

type Connection = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

async fn handshake<S>(
    stream: S,
) -> Result<
    (
        hyper::client::conn::http1::SendRequest<Full<Bytes>>,
        Connection,
    ),
    ClientError,
>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| ClientError::Http(e.to_string()))?;
    Ok((
        sender,
        Box::pin(async move {
            let _ = connection.await;
        }),
    ))
}

async fn read_limited(body: Incoming) -> Result<Bytes, ClientError> {
    Limited::new(body, MAX_ANSWER)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|e| ClientError::Http(e.to_string()))
}

fn status_error(status: StatusCode, body: &[u8]) -> ClientError {
    ClientError::Status {
        status,
        body: String::from_utf8_lossy(body).trim().to_owned(),
    }
}

/// Takes every complete server-sent event out of `pending` and returns the `data` of
/// each (comments and other fields dropped); an event longer than [`MAX_EVENT`] is an
/// error rather than a buffer that grows.
pub fn take_events(pending: &mut BytesMut) -> Result<Vec<String>, ClientError> {
    let mut lines = Vec::new();
    while let Some(end) = find(pending, b"\n\n") {
        let event = pending.split_to(end);
        pending.advance(2);
        let data: Vec<&str> = std::str::from_utf8(&event)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| data.strip_prefix(' ').unwrap_or(data))
            .collect();
        if !data.is_empty() {
            lines.push(data.join("\n"));
        }
    }
    if pending.len() > MAX_EVENT {
        return Err(ClientError::Unexpected(
            "an event longer than 1 MiB".to_owned(),
        ));
    }
    Ok(lines)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests;
