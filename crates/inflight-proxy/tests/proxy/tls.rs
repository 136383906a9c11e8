//! `https://` upstreams: a real TLS server on 127.0.0.1 (rustls, hyper), its certificates made
//! by a test CA, and the proxy checking them against a `ca_file` or the system's roots.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use inflight_proxy::{Proxy, StartError};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{budget, client, get, metrics, within};

/// A test CA and a server certificate it signed.
struct Pki {
    ca_pem: String,
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

/// A CA of its own, and a certificate for `names` (host names or IP addresses) signed by it.
fn pki(names: &[&str]) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "inflight test CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "inflight test upstream");
    let cert = params.signed_by(&key, &issuer).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        cert: cert.der().clone(),
        key: PrivatePkcs8KeyDer::from(key.serialize_der()),
    }
}

/// What the TLS upstream saw.
#[derive(Default)]
struct Seen {
    /// Handshakes that completed: one per connection the proxy kept.
    handshakes: AtomicUsize,
    /// Handshakes that failed (the proxy refused the certificate, or no protocol was agreed).
    failed: AtomicUsize,
    /// The server name each completed handshake asked for (SNI).
    server_names: Mutex<Vec<Option<String>>>,
    /// Each request's `Host` header.
    hosts: Mutex<Vec<String>>,
    /// Requests whose body failed on its way.
    bodies_failed: AtomicUsize,
}

/// An HTTPS server on 127.0.0.1 that answers every request with its version, method and target,
/// offering `alpn` (e.g. `h2`, `http/1.1`; none: no ALPN at all).
struct TlsUpstream {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

impl TlsUpstream {
    async fn start(pki: &Pki, alpn: &[&str]) -> TlsUpstream {
        TlsUpstream::start_at("127.0.0.1:0", pki, alpn).await
    }

    async fn start_at(bind: &str, pki: &Pki, alpn: &[&str]) -> TlsUpstream {
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![pki.cert.clone()],
            PrivateKeyDer::Pkcs8(pki.key.clone_key()),
        )
        .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let state = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let state = state.clone();
                tokio::spawn(async move {
                    let tls = match acceptor.accept(tcp).await {
                        Ok(tls) => tls,
                        Err(_) => {
                            state.failed.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    };
                    let sni = tls.get_ref().1.server_name().map(str::to_string);
                    state.server_names.lock().unwrap().push(sni);
                    state.handshakes.fetch_add(1, Ordering::SeqCst);
                    let service = service_fn(move |request: Request<Incoming>| {
                        let state = state.clone();
                        async move {
                            let host = request
                                .headers()
                                .get("host")
                                .map(|h| h.to_str().unwrap().to_string())
                                .or_else(|| request.uri().authority().map(|a| a.to_string()))
                                .unwrap_or_default();
                            state.hosts.lock().unwrap().push(host);
                            // The request's body is read whole before the answer.
                            let (parts, body) = request.into_parts();
                            if body.collect().await.is_err() {
                                state.bodies_failed.fetch_add(1, Ordering::SeqCst);
                            }
                            let request = Request::from_parts(parts, ());
                            let body = format!(
                                "tls upstream: {:?} {} {}",
                                request.version(),
                                request.method(),
                                request.uri().path_and_query().unwrap()
                            );
                            let mut response = Response::new(Full::new(Bytes::from(body)));
                            // `/old`: an HTTP/1.0 answer; `/gzip`: one coded gzip, then
                            // chunked (hyper's server adds the chunks).
                            let path = request.uri().path();
                            if path.starts_with("/old") {
                                *response.version_mut() = hyper::Version::HTTP_10;
                            } else if path.starts_with("/gzip") {
                                response.headers_mut().insert(
                                    "transfer-encoding",
                                    hyper::header::HeaderValue::from_static("gzip"),
                                );
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        TlsUpstream { addr, seen }
    }

    fn handshakes(&self) -> usize {
        self.seen.handshakes.load(Ordering::SeqCst)
    }

    fn failed(&self) -> usize {
        self.seen.failed.load(Ordering::SeqCst)
    }
}

/// A proxy started from the budgets file at `path`, whose log lines the test can read.
async fn proxy_at(path: &Path) -> (Proxy, Arc<Mutex<Vec<String>>>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let proxy = Proxy::builder()
        .log(move |line| sink.lock().unwrap().push(line.to_string()))
        .start_path(path)
        .await
        .unwrap();
    (proxy, lines)
}

/// A budgets file in `dir` for one budget `records` to `upstream`, with `extra` settings.
fn budgets_file(dir: &Path, upstream: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("budgets.toml");
    std::fs::write(&path, budget("records", upstream, extra)).unwrap();
    path
}

#[tokio::test]
async fn an_https_upstream_checked_against_its_ca_file_answers_over_one_kept_connection() {
    let pki = pki(&["localhost", "127.0.0.1"]);
    let upstream = TlsUpstream::start(&pki, &["http/1.1"]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    std::fs::write(dir.path().join("certs/ca.pem"), &pki.ca_pem).unwrap();
    let url = format!("https://localhost:{}", upstream.addr.port());
    // Relative to the budgets file's folder, not to where the test runs.
    let file = budgets_file(
        dir.path(),
        &url,
        "max_concurrent = 2\nca_file = \"certs/ca.pem\"",
    );
    let (proxy, _) = proxy_at(&file).await;
    assert_eq!(proxy.upstream("records").as_deref(), Some(url.as_str()));
    let addr = proxy.local_addr("records").unwrap();
    let client = client();
    for i in 0..5 {
        let (status, _, body) = get(&client, addr, &format!("/records/{i}?x=1")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, format!("tls upstream: HTTP/1.1 GET /records/{i}?x=1"));
    }
    assert_eq!(upstream.handshakes(), 1, "keep-alive: one TLS connection");
    assert_eq!(upstream.failed(), 0);
    let names = upstream.seen.server_names.lock().unwrap().clone();
    assert_eq!(names, [Some("localhost".to_string())], "SNI is the host");
    let hosts = upstream.seen.hosts.lock().unwrap().clone();
    assert!(
        hosts
            .iter()
            .all(|h| *h == format!("localhost:{}", upstream.addr.port())),
        "{hosts:?}"
    );
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_requests_total{budget=records,status_class=2xx}"],
        5.0
    );
}

#[tokio::test]
async fn upstream_http2_over_tls_is_agreed_by_alpn_and_shares_one_connection() {
    let pki = pki(&["localhost", "127.0.0.1"]);
    let upstream = TlsUpstream::start(&pki, &["h2", "http/1.1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (proxy, _) = crate::support::proxy(&budget(
        "records",
        &format!("https://127.0.0.1:{}", upstream.addr.port()),
        &format!(
            "max_concurrent = 4\nupstream_http2 = true\nca_file = {:?}",
            ca.display().to_string()
        ),
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let calls: Vec<_> = (0..8)
        .map(|i| tokio::spawn(async move { get(&client(), addr, &format!("/s/{i}")).await }))
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        let (status, _, body) = call.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, format!("tls upstream: HTTP/2.0 GET /s/{i}"));
    }
    assert_eq!(upstream.handshakes(), 1, "streams of one h2 connection");
    // An IP address is checked against the certificate's IP names, and sent as no SNI.
    let names = upstream.seen.server_names.lock().unwrap().clone();
    assert_eq!(names, [None]);
}

/// Asserts that `proxy` answered one request to `records` with a 502 for the TLS handshake,
/// counted, logged with `why`, and taken by the adaptive limit as overload.
async fn refused_for_tls(proxy: &Proxy, log: &Mutex<Vec<String>>, why: &[&str]) {
    let addr = proxy.local_addr("records").unwrap();
    let (status, headers, body) = get(&client(), addr, "/").await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(headers["x-inflight-refused"], "upstream_tls");
    assert!(body.contains("TLS handshake"), "{body}");
    assert!(!body.contains("tls upstream:"), "{body}");
    let lines = log.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.contains("records")
            && l.contains("TLS handshake failed")
            && why.iter().all(|w| l.contains(w))),
        "{lines:?}"
    );
    let m = metrics(proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=records,reason=upstream_tls}"],
        1.0
    );
    assert_eq!(
        m["inflight_proxy_replies_total{budget=records,reason=upstream_unreachable}"],
        0.0
    );
    assert!(
        m["inflight_budget_limit{budget=records}"] < 8.0,
        "a failed handshake is an overload signal: {}",
        m["inflight_budget_limit{budget=records}"]
    );
}

const ADAPTIVE: &str =
    "max_concurrent = 8\nlimit = \"adaptive\"\nalgorithm = \"aimd\"\ninitial = 8";

#[tokio::test]
async fn the_system_roots_do_not_trust_a_private_ca() {
    let pki = pki(&["localhost", "127.0.0.1"]);
    let upstream = TlsUpstream::start(&pki, &["http/1.1"]).await;
    let (proxy, log) = crate::support::proxy(&budget(
        "records",
        &format!("https://localhost:{}", upstream.addr.port()),
        ADAPTIVE,
    ))
    .await;
    refused_for_tls(&proxy, &log, &["invalid peer certificate", "UnknownIssuer"]).await;
    assert_eq!(upstream.handshakes(), 0);
    crate::support::until("the upstream saw the handshake fail", || {
        upstream.failed() >= 1
    })
    .await;
}

#[tokio::test]
async fn another_ca_or_another_name_is_refused() {
    let pki = pki(&["localhost"]);
    let upstream = TlsUpstream::start(&pki, &["http/1.1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other-ca.pem");
    std::fs::write(&other, self::pki(&["localhost"]).ca_pem).unwrap();
    let (proxy, log) = crate::support::proxy(&budget(
        "records",
        &format!("https://localhost:{}", upstream.addr.port()),
        &format!("{ADAPTIVE}\nca_file = {:?}", other.display().to_string()),
    ))
    .await;
    // Its issuer's name matches; its signature does not.
    refused_for_tls(&proxy, &log, &["invalid peer certificate"]).await;

    // The right CA, but the certificate names localhost and the upstream is 127.0.0.1.
    let right = dir.path().join("ca.pem");
    std::fs::write(&right, &pki.ca_pem).unwrap();
    let (proxy, log) = crate::support::proxy(&budget(
        "records",
        &format!("https://127.0.0.1:{}", upstream.addr.port()),
        &format!("{ADAPTIVE}\nca_file = {:?}", right.display().to_string()),
    ))
    .await;
    refused_for_tls(&proxy, &log, &["certificate not valid for name"]).await;
    assert_eq!(upstream.handshakes(), 0);
}

#[tokio::test]
async fn an_upstream_that_will_not_agree_to_h2_gets_a_502_that_says_so() {
    let pki = pki(&["localhost", "127.0.0.1"]);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let extra = format!(
        "{ADAPTIVE}\nupstream_http2 = true\nca_file = {:?}",
        ca.display().to_string()
    );
    // Offers ALPN, but only HTTP/1.1: the handshake itself fails.
    let http1 = TlsUpstream::start(&pki, &["http/1.1"]).await;
    let (proxy, log) = crate::support::proxy(&budget(
        "records",
        &format!("https://localhost:{}", http1.addr.port()),
        &extra,
    ))
    .await;
    refused_for_tls(&proxy, &log, &["NoApplicationProtocol"]).await;
    // No ALPN at all: the handshake completes, and the connection is not used.
    let silent = TlsUpstream::start(&pki, &[]).await;
    let (proxy, log) = crate::support::proxy(&budget(
        "records",
        &format!("https://localhost:{}", silent.addr.port()),
        &extra,
    ))
    .await;
    refused_for_tls(&proxy, &log, &["did not agree to HTTP/2 by ALPN"]).await;
    assert_eq!(silent.handshakes(), 1);
    assert!(silent.seen.hosts.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_reload_with_another_ca_file_takes_effect() {
    let pki = pki(&["localhost"]);
    let upstream = TlsUpstream::start(&pki, &["http/1.1"]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), self::pki(&["localhost"]).ca_pem).unwrap();
    let file = budgets_file(
        dir.path(),
        &format!("https://localhost:{}", upstream.addr.port()),
        "max_concurrent = 2\nca_file = \"ca.pem\"",
    );
    let (proxy, _) = proxy_at(&file).await;
    let addr = proxy.local_addr("records").unwrap();
    let (status, _, _) = get(&client(), addr, "/").await;
    assert_eq!(status, 502);
    std::fs::write(dir.path().join("ca.pem"), &pki.ca_pem).unwrap();
    let reloaded = proxy.reload_path(&file).unwrap();
    assert_eq!(reloaded.changed, ["records"]);
    let (status, _, body) = get(&client(), addr, "/after").await;
    assert_eq!(
        (status, body.as_str()),
        (200, "tls upstream: HTTP/1.1 GET /after")
    );
}

#[tokio::test]
async fn a_bad_ca_file_keeps_the_proxy_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("empty.pem"), "no certificate here\n").unwrap();
    let cases = [
        ("missing.pem", "https", "cannot read it"),
        ("empty.pem", "https", "holds no PEM certificate"),
        ("empty.pem", "http", "only an https:// upstream takes one"),
    ];
    for (name, scheme, why) in cases {
        let file = budgets_file(
            dir.path(),
            &format!("{scheme}://127.0.0.1:1"),
            &format!("max_concurrent = 1\nca_file = {name:?}"),
        );
        let err = within(Proxy::builder().start_path(&file))
            .await
            .err()
            .expect("the proxy must not start");
        assert!(matches!(err, StartError::Config(_)), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("budgets.records.ca_file: "), "{text}");
        assert!(text.contains(name) && text.contains(why), "{text}");
    }
}

#[tokio::test]
async fn an_upstream_that_never_answers_the_handshake_gets_a_502_without_a_call_timeout() {
    // Accepts connections and says nothing: a plain port behind an https:// URL, or a stuck peer.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(tcp);
        }
    });
    let (proxy, log) = crate::support::proxy(&budget(
        "records",
        &format!("https://localhost:{port}"),
        ADAPTIVE,
    ))
    .await;
    // The handshake's own bound (10 s) ends the wait: the budget has no call timeout.
    refused_for_tls(&proxy, &log, &["TLS handshake: no answer within 10s"]).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_https_url_to_a_plain_http_upstream_is_a_tls_502_not_a_forwarded_request() {
    let plain = crate::support::Upstream::start().await;
    let (proxy, log) = crate::support::proxy(&budget(
        "records",
        &format!("https://127.0.0.1:{}", plain.addr.port()),
        ADAPTIVE,
    ))
    .await;
    refused_for_tls(&proxy, &log, &["TLS handshake: "]).await;
    assert!(plain.seen().is_empty(), "{:?}", plain.seen());
}

#[tokio::test]
async fn an_https_upstreams_answer_goes_out_as_http11_and_one_coded_gzip_is_a_502() {
    // The answer from hyper's client (TLS upstreams), read as the proxy's own client reads a
    // plain upstream's: the proxy's own version to the client (an HTTP/1.1 client told
    // HTTP/1.0 drops its connection), and no transfer coding it could not tell the client of.
    let pki = pki(&["localhost"]);
    let upstream = TlsUpstream::start(&pki, &["http/1.1"]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), &pki.ca_pem).unwrap();
    let url = format!("https://localhost:{}", upstream.addr.port());
    let file = budgets_file(dir.path(), &url, "max_concurrent = 2\nca_file = \"ca.pem\"");
    let (proxy, _) = proxy_at(&file).await;
    let addr = proxy.local_addr("records").unwrap();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET /old HTTP/1.1\r\nhost: p\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let mut chunk = [0u8; 1024];
        let n = within(socket.read(&mut chunk)).await.unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    let (status, _, body) = get(&client(), addr, "/gzip").await;
    assert_eq!(status, 502, "{body}");
}

#[tokio::test]
async fn an_ipv6_upstream_is_checked_against_its_address_without_brackets() {
    let pki = pki(&["::1"]);
    let upstream = TlsUpstream::start_at("[::1]:0", &pki, &["http/1.1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let url = format!("https://[::1]:{}", upstream.addr.port());
    let (proxy, _) = crate::support::proxy(&budget(
        "records",
        &url,
        &format!(
            "max_concurrent = 1\nca_file = {:?}",
            ca.display().to_string()
        ),
    ))
    .await;
    let addr = proxy.local_addr("records").unwrap();
    let (status, _, body) = get(&client(), addr, "/v6").await;
    assert_eq!(
        (status, body.as_str()),
        (200, "tls upstream: HTTP/1.1 GET /v6")
    );
    let hosts = upstream.seen.hosts.lock().unwrap().clone();
    assert_eq!(hosts, [format!("[::1]:{}", upstream.addr.port())]);
}

/// A request body that stops coming to an `https://` upstream (hyper's client sends it there)
/// gives its permit back at the proxy's `idle_timeout`, as the client's failure: 400
/// (`client_body`), with no call timeout to bound it.
#[tokio::test]
async fn a_request_body_to_an_https_upstream_that_stalls_gives_the_permit_back_at_the_idle_timeout()
{
    let pki = pki(&["localhost", "127.0.0.1"]);
    let upstream = TlsUpstream::start(&pki, &["http/1.1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let (proxy, _) = crate::support::proxy(&format!(
        "[proxy]\nidle_timeout = \"300ms\"\n\n{}",
        budget(
            "uploads",
            &format!("https://127.0.0.1:{}", upstream.addr.port()),
            &format!(
                "max_concurrent = 1\nmax_queued = 0\nca_file = {:?}",
                ca.display().to_string()
            ),
        )
    ))
    .await;
    let addr = proxy.local_addr("uploads").unwrap();
    crate::support::assert_client_body(&crate::support::stalled_post(addr).await);
    let (status, _, body) = get(&client(), addr, "/next").await;
    assert_eq!(status, 200, "the permit came back: {body}");
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_replies_total{budget=uploads,reason=client_body}"],
        1.0
    );
    assert_eq!(m["inflight_budget_in_flight{budget=uploads}"], 0.0);
    crate::support::until("the upstream saw the body fail", || {
        upstream.seen.bodies_failed.load(Ordering::SeqCst) == 1
    })
    .await;
}
