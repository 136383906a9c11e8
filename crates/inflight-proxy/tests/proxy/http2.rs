//! HTTP/2 with prior knowledge on either side.

use crate::support::{budget, client, get, h2_client, proxy, Upstream};

#[tokio::test]
async fn http2_clients_share_a_connection_and_still_pass_the_budget_one_stream_at_a_time() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 2")).await;
    let addr = proxy.local_addr("records").unwrap();
    let client = h2_client();
    let (status, _, body) = get(&client, addr, "/first?x=1").await;
    assert_eq!((status, body.as_str()), (200, "GET /first?x=1"));
    let streams: Vec<_> = (0..12)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { get(&client, addr, "/sleep/30").await.0 })
        })
        .collect();
    for s in streams {
        assert_eq!(s.await.unwrap(), 200);
    }
    assert_eq!(
        upstream.peak(),
        2,
        "streams of one connection passed the budget together"
    );
    let seen = upstream.seen();
    assert_eq!(seen.len(), 13);
    assert_eq!(seen[0].version, hyper::Version::HTTP_11);
    assert_eq!(seen[0].headers["host"], upstream.addr.to_string());
}

#[tokio::test]
async fn upstream_http2_sends_every_request_as_a_stream_of_one_connection() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget(
        "records",
        &upstream.url(),
        "max_concurrent = 3\nupstream_http2 = true\npreserve_host = true",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let calls: Vec<_> = (0..9)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/sleep/30").await.0 }))
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap(), 200);
    }
    assert!(upstream.peak() <= 3, "peak {}", upstream.peak());
    let seen = upstream.seen();
    assert_eq!(seen.len(), 9);
    assert!(seen.iter().all(|s| s.version == hyper::Version::HTTP_2));
    // The client's host goes as `:authority`, with no `Host` beside it (RFC 9113, 8.3.1).
    for s in &seen {
        assert_eq!(s.uri, format!("http://{addr}/sleep/30"));
        assert!(!s.headers.contains_key("host"), "{:?}", s.headers);
    }
    // An HTTP/2 client's host, from its request target, is preserved too; another host goes
    // on the same connection.
    get(&h2_client(), addr, "/").await;
    let other = hyper::Request::get(format!("http://{addr}/other"))
        .header("host", "records.example:8080")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let answer = crate::support::within(client().request(other))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let seen = upstream.seen();
    assert_eq!(seen[9].uri, format!("http://{addr}/"));
    assert_eq!(seen[10].uri, "http://records.example:8080/other");
    let peers: std::collections::HashSet<_> = seen.iter().map(|s| s.peer).collect();
    assert_eq!(peers.len(), 1, "more than one connection: {peers:?}");
}

/// An HTTP/2 request head of up to 32 KiB is taken and one past it gets 431, as over HTTP/1.1
/// (hyper's own HTTP/2 limit is 16 KiB); one far past it (200 KiB) is refused by the HTTP/2
/// layer without a status (the stream refused, or the connection ended). Neither reaches the
/// upstream, and the proxy goes on serving.
#[tokio::test]
async fn http2_request_heads_past_32_kib_are_refused() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 2")).await;
    let addr = proxy.local_addr("records").unwrap();
    let big = |kib: usize| {
        hyper::Request::get(format!("http://{addr}/"))
            .header("x-big", "a".repeat(kib * 1024))
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap()
    };
    // A head of 20 KiB is taken, as over HTTP/1.1 (hyper's own HTTP/2 limit is 16 KiB).
    let answer = crate::support::within(h2_client().request(big(20)))
        .await
        .expect("an answer to a head of 20 KiB");
    assert_eq!(answer.status(), 200);
    let answer = crate::support::within(h2_client().request(big(40)))
        .await
        .expect("an answer to a head of 40 KiB");
    assert_eq!(answer.status(), 431);
    let refused = crate::support::within(h2_client().request(big(200))).await;
    assert!(
        refused.is_err(),
        "no answer to a head of 200 KiB: {refused:?}"
    );
    assert_eq!(
        upstream.seen().len(),
        1,
        "only the head of 20 KiB reached the upstream"
    );
    assert_eq!(get(&h2_client(), addr, "/").await.0, 200);
}

/// nginx on 127.0.0.1 serving HTTP/2 with prior knowledge from a folder of its own, stopped
/// when dropped; `None` (after saying so) when nginx is not installed.
struct Nginx {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start() -> Option<Nginx> {
        Nginx::start_with("")
    }

    /// With `server` added to its server block.
    fn start_with(server: &str) -> Option<Nginx> {
        if std::process::Command::new("nginx")
            .arg("-v")
            .output()
            .is_err()
        {
            eprintln!("skipped: nginx is not installed (apt-get install nginx-light)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let p = dir.path().display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {p}/nginx.pid;\n\
             error_log {p}/error.log;\nevents {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {p}/body;\n\
             proxy_temp_path {p}/proxy;\n  fastcgi_temp_path {p}/fastcgi;\n\
             uwsgi_temp_path {p}/uwsgi;\n  scgi_temp_path {p}/scgi;\n\
             server {{\n    listen 127.0.0.1:{port} http2;\n    {server}\n\
             location / {{ return 200 \"nginx $server_protocol $request_uri $host\"; }}\n  }}\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        let child = std::process::Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let start = std::time::Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "nginx listened: {}",
                std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Some(Nginx {
            child,
            addr,
            _dir: dir,
        })
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx as an HTTP/2 upstream answers what the proxy forwards, from HTTP/1.1 and HTTP/2
/// clients: the upstream's authority goes as `:authority` alone (with a `Host` beside it,
/// nginx refused every request: 400, "client sent duplicate host header").
#[tokio::test]
async fn nginx_as_an_http2_upstream_answers_what_the_proxy_forwards() {
    let Some(nginx) = Nginx::start() else {
        return;
    };
    let (plain, _) = proxy(&budget(
        "records",
        &format!("http://{}", nginx.addr),
        "max_concurrent = 2\nupstream_http2 = true",
    ))
    .await;
    let addr = plain.local_addr("records").unwrap();
    for client in [client(), h2_client()] {
        let (status, _, body) = get(&client, addr, "/records/7?x=1").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, "nginx HTTP/2.0 /records/7?x=1 127.0.0.1");
    }
    // With `preserve_host`, the client's host goes as `:authority` alone: nginx takes it
    // (it refused a `Host` beside the upstream's `:authority`).
    let (preserving, _) = proxy(&budget(
        "records",
        &format!("http://{}", nginx.addr),
        "max_concurrent = 2\nupstream_http2 = true\npreserve_host = true",
    ))
    .await;
    let addr = preserving.local_addr("records").unwrap();
    for client in [client(), h2_client()] {
        // Sent to the proxy's address, naming another host.
        let request = hyper::Request::get(format!("http://{addr}/r"))
            .header("host", "records.example:8080")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap();
        let answer = crate::support::within(client.request(request))
            .await
            .unwrap();
        let status = answer.status();
        let body = http_body_util::BodyExt::collect(answer.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(status, 200, "{body:?}");
        assert_eq!(&body[..], b"nginx HTTP/2.0 /r records.example");
    }
}

/// An HTTP/2 client's answers from a plain HTTP/1.1 upstream (whose bodies the call's slot
/// holds, to close their connections if the client stops reading) give their connections back
/// to the pool: one upstream connection serves requests one after another.
#[tokio::test]
async fn an_http2_clients_requests_reuse_a_pooled_upstream_connection() {
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), "max_concurrent = 2")).await;
    let addr = proxy.local_addr("records").unwrap();
    let client = h2_client();
    for i in 0..5 {
        let (status, _, body) = get(&client, addr, &format!("/r/{i}")).await;
        assert_eq!((status, body), (200, format!("GET /r/{i}")));
    }
    let peers: std::collections::HashSet<_> = upstream.seen().iter().map(|s| s.peer).collect();
    assert_eq!(peers.len(), 1, "a connection a request: {peers:?}");
}

/// An HTTP/2 upstream on `listener` whose every connection answers one request ("conn N", N
/// counting connections) and then goes away with a GOAWAY, as an upstream restarting or
/// limiting its connections' age does.
fn one_request_a_connection(listener: tokio::net::TcpListener) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let n = connections.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::spawn(async move {
                let (answered, done) = tokio::sync::oneshot::channel::<()>();
                let answered = std::sync::Mutex::new(Some(answered));
                let service = hyper::service::service_fn(move |_request| {
                    if let Some(answered) = answered.lock().unwrap().take() {
                        let _ = answered.send(());
                    }
                    async move {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(format!("conn {n}"))),
                        ))
                    }
                });
                let connection =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                let mut connection = std::pin::pin!(connection);
                tokio::select! {
                    _ = connection.as_mut() => return,
                    _ = done => {}
                }
                connection.as_mut().graceful_shutdown();
                let _ = connection.await;
            });
        }
    });
}

/// The proxy's one connection to an HTTP/2 upstream is made again when the upstream closes
/// it: each request below finds the last one's connection gone and is answered on a new one.
#[tokio::test]
async fn an_http2_upstream_that_closes_its_connection_is_connected_to_again() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    one_request_a_connection(listener);
    let (proxy, _) = proxy(&budget(
        "records",
        &format!("http://{upstream}"),
        "max_concurrent = 2\nupstream_http2 = true",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let client = client();
    let mut bodies = Vec::new();
    for _ in 0..4 {
        let (status, _, body) = get(&client, addr, "/").await;
        assert_eq!(status, 200, "{body}");
        bodies.push(body);
        // The GOAWAY reaches the proxy before the next request, as a rule (one that goes
        // before it is answered on the old connection; one the closed connection did not
        // take goes again on a new one: each is answered).
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let connections: std::collections::BTreeSet<_> = bodies.iter().collect();
    assert!(connections.len() >= 2, "never connected again: {bodies:?}");
}

/// Requests to an HTTP/2 upstream that takes no connection get 502 `upstream_unreachable` at
/// once, all of them (the ones that waited for another's attempt share its failure), and
/// once it listens the next request is answered.
#[tokio::test]
async fn an_http2_upstream_that_refuses_connections_gets_502_until_it_listens() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = listener.local_addr().unwrap();
    drop(listener);
    let (proxy, _) = proxy(&budget(
        "records",
        &format!("http://{upstream}"),
        "max_concurrent = 8\nupstream_http2 = true",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let refused: Vec<_> = (0..8)
        .map(|_| tokio::spawn(async move { get(&client(), addr, "/").await }))
        .collect();
    for r in refused {
        let (status, headers, _) = r.await.unwrap();
        assert_eq!(status, 502);
        assert_eq!(headers["x-inflight-refused"], "upstream_unreachable");
    }
    let Ok(listener) = tokio::net::TcpListener::bind(upstream).await else {
        eprintln!("skipped the rest: {upstream} was taken meanwhile");
        return;
    };
    one_request_a_connection(listener);
    let (status, _, body) = get(&client(), addr, "/").await;
    assert_eq!((status, body.as_str()), (200, "conn 1"));
}

/// An HTTP/2 upstream that closes its connections after a few requests (nginx's
/// `keepalive_requests`, 1,000 by default) refuses the streams opened on one past that (those
/// above its GOAWAY's last stream, RFC 9113 section 8.7: not processed): the proxy sends them
/// again on a new connection, with their bodies. Every GET is answered; a POST may get a 502
/// only where hyper's client ended holding it (its stream may have reached the upstream, and
/// a POST is not repeated then), never a 400. (A third of all failed, 502 or 400, before.)
#[tokio::test]
async fn requests_an_http2_upstream_refused_as_it_closed_its_connection_go_again() {
    let Some(nginx) =
        Nginx::start_with("keepalive_requests 10;\n    http2_max_concurrent_streams 4;")
    else {
        return;
    };
    let (proxy, lines) = proxy(&budget(
        "records",
        &format!("http://{}", nginx.addr),
        "max_concurrent = 16\nmax_queued = 1000\nupstream_http2 = true",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            tokio::spawn(async move {
                let client = if t % 2 == 0 { client() } else { h2_client() };
                let mut failed = Vec::new();
                for i in 0..12 {
                    let post = i % 3 == 0;
                    let request = if post {
                        hyper::Request::post(format!("http://{addr}/r/{t}/{i}"))
                            .body(http_body_util::Full::new(bytes::Bytes::from(
                                "a small body".repeat(100),
                            )))
                            .unwrap()
                    } else {
                        hyper::Request::get(format!("http://{addr}/r/{t}/{i}"))
                            .body(http_body_util::Full::new(bytes::Bytes::new()))
                            .unwrap()
                    };
                    let answer = crate::support::within(client.request(request))
                        .await
                        .unwrap();
                    if answer.status() != 200 {
                        failed.push((post, answer.status(), format!("{:?}", answer.headers())));
                    }
                }
                failed
            })
        })
        .collect();
    let mut failed = Vec::new();
    for t in tasks {
        failed.extend(t.await.unwrap());
    }
    let said = || format!("{:?} {failed:?}", lines.lock().unwrap());
    // Every GET answered; a POST refused only as the upstream could have it, 1 in 8 at most
    // (1 or 2 of 64 in the runs here; a third of all requests failed before).
    assert!(failed.iter().all(|(post, _, _)| *post), "{}", said());
    assert!(
        failed
            .iter()
            .all(|(_, status, headers)| *status == 502 && headers.contains("upstream_unreachable")),
        "{}",
        said()
    );
    assert!(failed.len() <= 8, "{}", said());
}
