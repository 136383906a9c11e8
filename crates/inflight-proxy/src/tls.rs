//! TLS to an `https://` upstream: the connector (rustls with the ring provider), its root
//! certificates (the system's, or a budget's `ca_file`), the HTTP/2 check by ALPN, and telling a
//! failed handshake from other connect failures.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder, MaybeHttpsStream};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use inflight::config::CaFile;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;

type BoxError = Box<dyn StdError + Send + Sync>;

/// Connects to an `https://` upstream: TCP by `http`, then a TLS handshake whose server name
/// (SNI) and certificate check are the URI's host; with `http2`, only a connection on which the
/// upstream agreed to `h2` by ALPN is used.
#[derive(Clone)]
pub(crate) struct Connector {
    inner: HttpsConnector<HttpConnector>,
    http2: bool,
}

impl Connector {
    /// A connector over `http` (its timeouts and options kept) that trusts the certificates of
    /// `ca`, or the system's root certificates without one.
    pub(crate) fn new(mut http: HttpConnector, ca: Option<&CaFile>, http2: bool) -> Connector {
        // The URI says https; the TCP part must not refuse it for that.
        http.enforce_http(false);
        let config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("the ring provider supports rustls's default protocol versions")
                .with_root_certificates(roots(ca))
                .with_no_client_auth();
        let builder = HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only();
        // ALPN offers only the protocol the client will speak.
        let inner = if http2 {
            builder.enable_http2().wrap_connector(http)
        } else {
            builder.enable_http1().wrap_connector(http)
        };
        Connector { inner, http2 }
    }
}

/// The certificates an upstream's certificate may chain to. A system certificate that rustls
/// cannot parse is left out; with none left, every handshake fails as an unknown issuer (a 502
/// that says so) rather than the proxy not starting.
fn roots(ca: Option<&CaFile>) -> RootCertStore {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(ca) => {
            roots.add_parsable_certificates(
                ca.certificates()
                    .map(|der| CertificateDer::from(der.to_vec())),
            );
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    roots
}

impl tower_service::Service<Uri> for Connector {
    type Response = MaybeHttpsStream<TokioIo<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let http2 = self.http2;
        Box::pin(async move {
            let stream = connecting.await?;
            if let MaybeHttpsStream::Https(tls) = &stream {
                let (_, session) = tls.inner().get_ref();
                if http2 && session.alpn_protocol() != Some(b"h2") {
                    return Err(Box::new(NoHttp2) as BoxError);
                }
            }
            Ok(stream)
        })
    }
}

/// The upstream did not agree to HTTP/2 by ALPN, and `upstream_http2 = true` asks for it.
#[derive(Debug)]
struct NoHttp2;

impl std::fmt::Display for NoHttp2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the upstream did not agree to HTTP/2 by ALPN (h2), and upstream_http2 = true asks for it",
        )
    }
}

impl StdError for NoHttp2 {}

/// Whether a request failed in the TLS handshake with the upstream (its certificate, its
/// protocol versions, or HTTP/2 by ALPN) rather than on the way there or after.
pub(crate) fn is_handshake_failure(e: &(dyn StdError + 'static)) -> bool {
    // An I/O error hides what it wraps from `source()`: look inside it too.
    if e.is::<rustls::Error>() || e.is::<NoHttp2>() {
        return true;
    }
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        if is_handshake_failure(inner) {
            return true;
        }
    }
    e.source().is_some_and(is_handshake_failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rustls_error_is_found_inside_io_errors_and_sources() {
        let rustls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let wrapped =
            std::io::Error::other(std::io::Error::new(std::io::ErrorKind::InvalidData, rustls));
        assert!(is_handshake_failure(&wrapped));
        assert!(is_handshake_failure(&NoHttp2));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_handshake_failure(&refused));
        assert!(!is_handshake_failure(&std::io::Error::other("other")));
    }
}
