//! Malformed and smuggling shapes written as raw bytes: 400 (or 431) and a close, never a
//! second request read from the tail.

use super::*;

/// Writes `request` raw, reads until the proxy closes the connection; returns what came
/// back. Every case here must end with the proxy closing the connection.
async fn raw_exchange(proxy: SocketAddr, request: &[u8]) -> TestResult<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(proxy).await?;
    stream.write_all(request).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[tokio::test]
async fn malformed_and_smuggling_shapes_get_400_and_a_close() -> TestResult {
    bounded(async {
        let Allowed {
            proxy, target: t, ..
        } = Allowed::plain().await?;
        let cases = [
            // Duplicate Host: our check.
            format!("GET http://{t}/ HTTP/1.1\r\nHost: {t}\r\nHost: {t}\r\n\r\n"),
            // Transfer-Encoding other than chunked: hyper.
            format!("POST http://{t}/ HTTP/1.1\r\nHost: {t}\r\nTransfer-Encoding: gzip\r\n\r\n"),
            // Conflicting Content-Length values: hyper.
            format!("POST http://{t}/ HTTP/1.1\r\nHost: {t}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"),
            // Whitespace before the colon: hyper (httparse).
            format!("GET http://{t}/ HTTP/1.1\r\nHost : {t}\r\n\r\n"),
            // Obsolete line folding: hyper (httparse).
            format!("GET http://{t}/ HTTP/1.1\r\nHost: {t}\r\nX-A: a\r\n b\r\n\r\n"),
            // Transfer-Encoding in HTTP/1.0: hyper.
            format!("POST http://{t}/ HTTP/1.0\r\nHost: {t}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ];
        for case in &cases {
            let answer = raw_exchange(proxy.addr, case.as_bytes()).await?;
            assert!(answer.starts_with("HTTP/1.1 400"), "{case:?} → {answer:?}");
        }
        // An origin-form request to the proxy itself is for its routes (none here).
        let case = format!("GET / HTTP/1.1\r\nHost: {t}\r\nConnection: close\r\n\r\n");
        let answer = raw_exchange(proxy.addr, case.as_bytes()).await?;
        assert!(
            answer.starts_with("HTTP/1.1 403") && answer.contains("path_not_allowed"),
            "{answer:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn content_length_with_chunked_cannot_smuggle_a_second_request() -> TestResult {
    bounded(async {
        let Allowed {
            proxy, target: t, ..
        } = Allowed::plain().await?;
        // Both framings in one request: 400 and a close (docs/contract.md §4), whichever
        // order they come in; nothing reaches the upstream and the tail is never read as a
        // request.
        let case = format!(
            "POST http://{t}/first HTTP/1.1\r\nHost: {t}\r\nContent-Length: 4\r\n\
             Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET http://{t}/smuggled HTTP/1.1\r\nHost: {t}\r\n\r\n"
        );
        let answer = raw_exchange(proxy.addr, case.as_bytes()).await?;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
        assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "{answer:?}");
        assert!(!answer.contains("upstream "), "{answer:?}");
        assert!(answer.contains("connection: close"), "{answer:?}");
        assert!(!answer.contains("/smuggled"), "{answer:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn oversized_headers_are_refused() -> TestResult {
    bounded(async {
        let Allowed {
            proxy, target: t, ..
        } = Allowed::plain().await?;
        let big = "a".repeat(128 * 1024);
        let case = format!("GET http://{t}/ HTTP/1.1\r\nHost: {t}\r\nX-Big: {big}\r\n\r\n");
        let answer = raw_exchange(proxy.addr, case.as_bytes()).await;
        // 431, or a plain close (the client may still be writing when the proxy closes).
        if let Ok(answer) = answer {
            assert!(
                answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
                "{answer:?}"
            );
        }
        Ok(())
    })
    .await
}
