//! Requests through CONNECT and TLS (HTTP/1.1 and h2) and in absolute form: allowed ones
//! reach the upstream; a refused host, tunnel, `Host` header or path gets the JSON 403.

use super::*;

#[tokio::test]
async fn allowed_get_through_connect_and_tls_over_http1() -> TestResult {
    bounded(async {
        let Allowed {
            proxy,
            port,
            target,
        } = Allowed::tls().await?;
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"http/1.1"]).await?;
        let (status, _, body) = h1_get(TokioIo::new(tls), "/hello", &target).await?;
        assert_eq!(status, StatusCode::OK, "{body:?}");
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with("upstream "), "{text}");
        assert!(text.contains(" /hello "), "{text}");
        assert!(text.ends_with(&format!("host=localhost:{port}")), "{text}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn allowed_get_through_connect_and_tls_over_h2() -> TestResult {
    bounded(async {
        let Allowed { proxy, target, .. } = Allowed::tls().await?;
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"h2"]).await?;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(connection);
        for path in ["/one", "/two"] {
            let request =
                Request::get(format!("https://{target}{path}")).body(Empty::<Bytes>::new())?;
            let response = sender.send_request(request).await?;
            assert_eq!(response.status(), StatusCode::OK);
            let body = response.into_body().collect().await?.to_bytes();
            let text = String::from_utf8_lossy(&body);
            assert!(text.contains(&format!(" {path} ")), "{text}");
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn refused_host_gets_the_json_403_inside_tls() -> TestResult {
    bounded(async {
        let Allowed { proxy, .. } = Allowed::tls_refusing_inside_tls().await?;
        let tls = tls_tunnel(&proxy, "evil.example:443", "evil.example", &[b"http/1.1"]).await?;
        let (status, headers, body) =
            h1_get(TokioIo::new(tls), "/x?token=1", "evil.example").await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(headers["x-airlock-decision"], "deny");
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        let value = json(&body);
        assert_eq!(value["error"], "blocked_by_policy");
        assert_eq!(value["reason"], "host_not_allowed");
        assert_eq!(value["host"], "evil.example");
        assert_eq!(value["path"], "/x");
        assert_eq!(value["method"], "GET");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn refused_tunnel_gets_the_json_403_on_connect() -> TestResult {
    bounded(async {
        let Allowed { proxy, .. } = Allowed::tls().await?;
        let (status, tunnel) = connect(proxy.addr, "evil.example:443").await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let body = tunnel.err().unwrap_or_default();
        let value = json(&body);
        assert_eq!(value["reason"], "host_not_allowed");
        assert_eq!(value["method"], "CONNECT");
        assert_eq!(value["host"], "evil.example");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn host_header_naming_another_host_is_refused() -> TestResult {
    bounded(async {
        let Allowed { proxy, target, .. } = Allowed::tls().await?;
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"http/1.1"]).await?;
        let (status, _, body) = h1_get(TokioIo::new(tls), "/x", "evil.example").await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(json(&body)["reason"], "host_mismatch");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn refused_path_gets_the_json_403() -> TestResult {
    bounded(async {
        let (port, ca_pem) = start_tls_upstream().await?;
        let allows = [format!("GET localhost:{port}/ok/**")];
        let setup = Setup {
            allows: &allows,
            ..Setup::default()
        };
        let proxy = start_proxy(setup, &ca_pem).await?;
        let target = format!("localhost:{port}");
        let tls = tls_tunnel(&proxy, &target, "localhost", &[b"http/1.1"]).await?;
        let (sender_io, _) = (TokioIo::new(tls), ());
        let (mut sender, connection) = hyper::client::conn::http1::handshake(sender_io).await?;
        tokio::spawn(connection);
        let get = |path: &str| {
            Request::get(path)
                .header(header::HOST, target.as_str())
                .body(Empty::<Bytes>::new())
        };
        let response = sender.send_request(get("/ok/yes")?).await?;
        assert_eq!(response.status(), StatusCode::OK);
        let _ = response.into_body().collect().await?;
        let response = sender.send_request(get("/no")?).await?;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let body = response.into_body().collect().await?.to_bytes();
        assert_eq!(json(&body)["reason"], "path_not_allowed");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn absolute_form_plain_http_is_forwarded() -> TestResult {
    bounded(async {
        let Allowed { proxy, target, .. } = Allowed::plain().await?;
        let stream = TcpStream::connect(proxy.addr).await?;
        let (status, _, body) = h1_get(
            TokioIo::new(stream),
            &format!("http://{target}/plain"),
            &target,
        )
        .await?;
        assert_eq!(status, StatusCode::OK, "{body:?}");
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains(" /plain "), "{text}");
        assert!(text.ends_with(&format!("host={target}")), "{text}");

        let stream = TcpStream::connect(proxy.addr).await?;
        let (status, _, body) = h1_get(
            TokioIo::new(stream),
            "http://evil.example/x",
            "evil.example",
        )
        .await?;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(json(&body)["reason"], "host_not_allowed");
        Ok(())
    })
    .await
}
