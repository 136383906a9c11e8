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
    let peers: std::collections::HashSet<_> = seen.iter().map(|s| s.peer).collect();
    assert_eq!(peers.len(), 1, "more than one connection: {peers:?}");
    // An HTTP/2 client's host, from its request target, is preserved too.
    get(&h2_client(), addr, "/").await;
    let last = upstream.seen().pop().unwrap();
    assert_eq!(last.headers["host"], addr.to_string());
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
             server {{\n    listen 127.0.0.1:{port} http2;\n\
             location / {{ return 200 \"nginx $server_protocol $request_uri\"; }}\n  }}\n}}\n"
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
    let (proxy, _) = proxy(&budget(
        "records",
        &format!("http://{}", nginx.addr),
        "max_concurrent = 2\nupstream_http2 = true",
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    for client in [client(), h2_client()] {
        let (status, _, body) = get(&client, addr, "/records/7?x=1").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, "nginx HTTP/2.0 /records/7?x=1");
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
