//! The admin server: `GET /` (the live page), `/budgets.json` (what it shows), `/metrics`
//! (Prometheus text), `/healthz` (the process answers) and `/readyz` (it accepts requests: 503
//! once draining).

use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use crate::body::ProxyBody;
use crate::metrics::CONTENT_TYPE;
use crate::page;
use crate::Shared;

pub(crate) fn answer<B>(shared: &Shared, request: &Request<B>) -> Response<ProxyBody> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".into());
    }
    match request.uri().path() {
        "/metrics" => {
            let mut response = text(StatusCode::OK, shared.render_metrics());
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            response
        }
        "/" => typed(
            StatusCode::OK,
            page::HTML.to_string(),
            "text/html; charset=utf-8",
        ),
        "/budgets.json" => typed(StatusCode::OK, shared.budgets_json(), "application/json"),
        "/healthz" => text(StatusCode::OK, "ok\n".into()),
        "/readyz" if shared.is_draining() => {
            text(StatusCode::SERVICE_UNAVAILABLE, "draining\n".into())
        }
        "/readyz" => text(StatusCode::OK, "ready\n".into()),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found (try /, /budgets.json, /metrics, /healthz or /readyz)\n".into(),
        ),
    }
}

fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    typed(status, body, "text/plain; charset=utf-8")
}

fn typed(status: StatusCode, body: String, content_type: &'static str) -> Response<ProxyBody> {
    let mut response = Response::new(ProxyBody::full(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
