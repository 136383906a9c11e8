//! TLS to an `https://` upstream: the connector (rustls with the ring provider), its root
//! certificates (the system's, or a budget's `ca_file`), the HTTP/2 check by ALPN, and telling a
//! failed handshake from other connect failures.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::config::CaFile;
use hyper::Uri;
use hyper_rustls::MaybeHttpsStream;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tower_service::Service;

type BoxError = Box<dyn StdError + Send + Sync>;

/// How long the TLS handshake may take once the TCP connection is up, when the budget has no
/// call timeout to bound it: an upstream that accepts and never answers gets a 502, not a wait
/// without end.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to an `https://` upstream: TCP by `http` (its options and connect timeout), then a
/// TLS handshake whose server name (SNI) and certificate check are the URI's host; with `http2`,
/// only a connection on which the upstream agreed to `h2` by ALPN is used.
#[derive(Clone)]
pub(crate) struct Connector {
    http: HttpConnector,
    tls: TlsConnector,
    http2: bool,
}

impl Connector {
    /// A connector over `http` that trusts the certificates of `ca`, or the system's root
    /// certificates without one.
    pub(crate) fn new(mut http: HttpConnector, ca: Option<&CaFile>, http2: bool) -> Connector {
        // The URI says https; the TCP part must not refuse it for that.
        http.enforce_http(false);
        let mut config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("the ring provider supports rustls's default protocol versions")
                .with_root_certificates(roots(ca))
                .with_no_client_auth();
        // ALPN offers only the protocol the client will speak.
        config.alpn_protocols = vec![if http2 {
            b"h2".to_vec()
        } else {
            b"http/1.1".to_vec()
        }];
        Connector {
            http,
            tls: TlsConnector::from(Arc::new(config)),
            http2,
        }
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

impl Service<Uri> for Connector {
    type Response = MaybeHttpsStream<TokioIo<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // The host as the certificate must name it: an IPv6 address without its brackets.
        let host = uri.host().unwrap_or_default();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let name = ServerName::try_from(host.to_string());
        let connecting = self.http.call(uri);
        let tls = self.tls.clone();
        let http2 = self.http2;
        Box::pin(async move {
            let name = name.map_err(|e| Handshake(Box::new(e)))?;
            let tcp = connecting.await?;
            let stream =
                tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.connect(name, TokioIo::new(tcp)))
                    .await
                    .map_err(|_| {
                        Handshake(format!("no answer within {HANDSHAKE_TIMEOUT:?}").into())
                    })?
                    .map_err(|e| Handshake(Box::new(e)))?;
            if http2 && stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(Handshake(
                    "the upstream did not agree to HTTP/2 by ALPN (h2), and upstream_http2 = true asks for it"
                        .into(),
                )
                .into());
            }
            Ok(MaybeHttpsStream::Https(TokioIo::new(stream)))
        })
    }
}

/// The TLS handshake with the upstream failed, after the TCP connection was made: its
/// certificate, the protocol versions, HTTP/2 by ALPN, or no answer in time.
#[derive(Debug)]
struct Handshake(BoxError);

impl std::fmt::Display for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The cause in the same line: a log line shows one error's text with its sources.
        write!(f, "TLS handshake: {}", self.0)
    }
}

impl StdError for Handshake {}

/// Whether a request failed in the TLS handshake with the upstream rather than on the way there
/// (TCP) or after.
pub(crate) fn is_handshake_failure(e: &(dyn StdError + 'static)) -> bool {
    // An I/O error hides what it wraps from `source()`: look inside it too.
    if e.is::<Handshake>() {
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
    fn a_handshake_failure_is_found_inside_io_errors_and_sources() {
        let rustls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let failed = Handshake(Box::new(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls,
        )));
        assert_eq!(
            failed.to_string(),
            "TLS handshake: invalid peer certificate: UnknownIssuer"
        );
        let wrapped = std::io::Error::other(failed);
        assert!(is_handshake_failure(&wrapped));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_handshake_failure(&refused));
        assert!(!is_handshake_failure(&std::io::Error::other("other")));
    }
}
