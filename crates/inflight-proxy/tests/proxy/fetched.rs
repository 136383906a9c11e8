//! What the ported suites share: a hyper client's whole answer (`fetch`: status, headers,
//! body or how it failed, trailers), and a bound on every wait, so that no test hangs.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::HeaderMap;

use crate::support::{request, TestClient};

/// The bound on each step a test waits for: no test hangs.
pub(crate) const BOUND: Duration = Duration::from_secs(5);

pub(crate) async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(BOUND, future).await {
        Ok(out) => out,
        Err(_) => panic!("{what}: nothing within {BOUND:?}"),
    }
}

/// What a client got: the answer's status and headers, its body (or how it failed), and its
/// trailers. Status 0: no answer's head came (the body then says why).
pub(crate) struct Got {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Result<Bytes, String>,
    pub(crate) trailers: Option<HeaderMap>,
}

impl Got {
    pub(crate) fn text(&self) -> String {
        match &self.body {
            Ok(b) => String::from_utf8_lossy(b).into_owned(),
            Err(e) => panic!("status {}: the body failed: {e}", self.status),
        }
    }

    pub(crate) fn values(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect()
    }

    pub(crate) fn trailer(&self, name: &str) -> Option<String> {
        self.trailers
            .as_ref()?
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }
}

pub(crate) async fn fetch(
    client: &TestClient,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Got {
    let request = request(addr, method, path, headers, Bytes::copy_from_slice(body));
    let response = match bounded(path, client.request(request)).await {
        Ok(response) => response,
        Err(e) => {
            return Got {
                status: 0,
                headers: HeaderMap::new(),
                body: Err(format!("no answer: {e:?}")),
                trailers: None,
            }
        }
    };
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let (body, trailers) = match bounded(path, response.into_body().collect()).await {
        Ok(collected) => {
            let trailers = collected.trailers().cloned();
            (Ok(collected.to_bytes()), trailers)
        }
        Err(e) => (Err(format!("{e:?}")), None),
    };
    Got {
        status,
        headers,
        body,
        trailers,
    }
}

pub(crate) async fn get(client: &TestClient, addr: SocketAddr, path: &str) -> Got {
    fetch(client, addr, "GET", path, &[], b"").await
}
