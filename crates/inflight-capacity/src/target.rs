//! [`Target`]: the one endpoint a sweep calls: URL, method, headers and a body template.

use std::net::IpAddr;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::{Method, Url};

/// Why a target was refused before any call was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The URL does not parse.
    #[error("`{url}` is not a URL: {reason}")]
    Url { url: String, reason: String },
    /// The URL's scheme is not `http`.
    #[error("`{url}`: only http:// URLs are measured (this build has no TLS), got {scheme}://")]
    Scheme { url: String, scheme: String },
    /// The method is not a valid HTTP method token.
    #[error("`{0}` is not an HTTP method")]
    Method(String),
    /// The body template is not JSON once `{n}` is replaced by a number.
    #[error("the body is not JSON once {{n}} is replaced by a number: {reason} (in `{template}`)")]
    Body { template: String, reason: String },
    /// A header is not `Name: value`, or its name or value is invalid.
    #[error("header `{line}`: {reason}")]
    Header { line: String, reason: String },
}

/// A request body with `{n}` replaced by a counter, so each call can carry its own id.
///
/// ```
/// use inflight_capacity::BodyTemplate;
///
/// let body = BodyTemplate::json(r#"{"id": {n}, "complete": true}"#).unwrap();
/// assert_eq!(body.render(7), r#"{"id": 7, "complete": true}"#);
/// assert!(BodyTemplate::json("id={n}").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyTemplate {
    parts: Vec<String>,
}

impl BodyTemplate {
    /// A template that must be JSON once `{n}` is replaced by a number.
    ///
    /// # Errors
    ///
    /// [`TargetError::Body`] with the JSON parser's reason.
    pub fn json(template: &str) -> Result<BodyTemplate, TargetError> {
        let body = BodyTemplate {
            parts: template.split("{n}").map(str::to_string).collect(),
        };
        serde_json::from_str::<serde_json::Value>(&body.render(1)).map_err(|e| {
            TargetError::Body {
                template: template.to_string(),
                reason: e.to_string(),
            }
        })?;
        Ok(body)
    }

    /// The body of call `n`.
    pub fn render(&self, n: u64) -> String {
        self.parts.join(&n.to_string())
    }
}

/// The endpoint a sweep calls, and how.
///
/// ```
/// use inflight_capacity::Target;
///
/// let target = Target::new("http://127.0.0.1:8080/records")?
///     .method("POST")?
///     .body(r#"{"id": {n}, "complete": true}"#)?
///     .header("X-Test: 1")?;
/// assert!(target.is_loopback());
/// assert_eq!(target.default_name(), "records");
/// # Ok::<(), inflight_capacity::TargetError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Target {
    url: Url,
    method: Method,
    headers: HeaderMap,
    body: Option<BodyTemplate>,
}

impl Target {
    /// A `GET` of `url`, which must be `http://`.
    ///
    /// # Errors
    ///
    /// [`TargetError::Url`] if it does not parse, [`TargetError::Scheme`] if it is not http.
    pub fn new(url: &str) -> Result<Target, TargetError> {
        let parsed = Url::parse(url).map_err(|e| TargetError::Url {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        if parsed.scheme() != "http" {
            return Err(TargetError::Scheme {
                url: url.to_string(),
                scheme: parsed.scheme().to_string(),
            });
        }
        if parsed.host().is_none() {
            return Err(TargetError::Url {
                url: url.to_string(),
                reason: "no host".to_string(),
            });
        }
        Ok(Target {
            url: parsed,
            method: Method::GET,
            headers: HeaderMap::new(),
            body: None,
        })
    }

    /// The HTTP method (`GET`, `POST`, ...; case as given).
    ///
    /// # Errors
    ///
    /// [`TargetError::Method`] if it is not a method token.
    pub fn method(mut self, method: &str) -> Result<Target, TargetError> {
        self.method = Method::from_bytes(method.as_bytes())
            .map_err(|_| TargetError::Method(method.to_string()))?;
        Ok(self)
    }

    /// A JSON body, `{n}` replaced by a counter on each call; sent as `application/json` unless
    /// a `Content-Type` header says otherwise.
    ///
    /// # Errors
    ///
    /// [`TargetError::Body`] if it is not JSON once `{n}` is replaced by a number.
    pub fn body(mut self, template: &str) -> Result<Target, TargetError> {
        self.body = Some(BodyTemplate::json(template)?);
        Ok(self)
    }

    /// A header, as `Name: value`; repeated names are all sent.
    ///
    /// # Errors
    ///
    /// [`TargetError::Header`] if there is no `:` or the name or value is invalid.
    pub fn header(mut self, line: &str) -> Result<Target, TargetError> {
        let bad = |reason: &str| TargetError::Header {
            line: line.to_string(),
            reason: reason.to_string(),
        };
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad("expected `Name: value`"))?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| bad("invalid header name"))?;
        let value = HeaderValue::from_str(value.trim()).map_err(|_| bad("invalid header value"))?;
        self.headers.append(name, value);
        Ok(self)
    }

    /// The URL called.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The method used.
    pub fn method_name(&self) -> &str {
        self.method.as_str()
    }

    /// Whether the host is this machine: `localhost` or a loopback address. Anything else is
    /// someone's service, and a load test on it needs their consent.
    pub fn is_loopback(&self) -> bool {
        is_loopback(&self.url)
    }

    /// A budget name from the URL: its first path segment that is a word (`/records` and
    /// `/enrich/42` give `records` and `enrich`), else `dependency`.
    pub fn default_name(&self) -> String {
        self.url
            .path_segments()
            .into_iter()
            .flatten()
            .map(|s| {
                s.chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                            c.to_ascii_lowercase()
                        } else {
                            '_'
                        }
                    })
                    .collect::<String>()
            })
            .find(|s| s.chars().any(|c| c.is_ascii_alphabetic()))
            .unwrap_or_else(|| "dependency".to_string())
    }

    /// The request of call `n`.
    pub(crate) fn request(&self, client: &reqwest::Client, n: u64) -> reqwest::RequestBuilder {
        let mut request = client
            .request(self.method.clone(), self.url.clone())
            .headers(self.headers.clone());
        if let Some(body) = &self.body {
            if !self.headers.contains_key(CONTENT_TYPE) {
                request = request.header(CONTENT_TYPE, "application/json");
            }
            request = request.body(body.render(n));
        }
        request
    }
}

/// Whether `url`'s host is this machine: `localhost` or a loopback address.
pub(crate) fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_host() {
        assert!(matches!(
            Target::new("https://example.com/"),
            Err(TargetError::Scheme { .. })
        ));
        assert!(matches!(
            Target::new("not a url"),
            Err(TargetError::Url { .. })
        ));
        let e = Target::new("ftp://x/").unwrap_err().to_string();
        assert!(e.contains("only http://"), "{e}");
    }

    #[test]
    fn loopback_is_told_apart_from_remote() {
        for url in [
            "http://127.0.0.1:1/",
            "http://127.8.9.1/",
            "http://[::1]:8080/x",
            "http://LOCALHOST/",
        ] {
            assert!(Target::new(url).unwrap().is_loopback(), "{url}");
        }
        for url in [
            "http://10.0.0.1/",
            "http://example.com/",
            "http://localhost.example.com/",
            "http://0.0.0.0/",
        ] {
            assert!(!Target::new(url).unwrap().is_loopback(), "{url}");
        }
    }

    #[test]
    fn body_headers_and_method_are_checked() {
        let e = Target::new("http://127.0.0.1/")
            .unwrap()
            .body("{n")
            .unwrap_err();
        assert!(e.to_string().starts_with("the body is not JSON"), "{e}");
        assert!(Target::new("http://127.0.0.1/")
            .unwrap()
            .body(r#"{"name": "x-{n}", "id": {n}}"#)
            .is_ok());
        assert!(Target::new("http://127.0.0.1/")
            .unwrap()
            .header("no colon")
            .is_err());
        assert!(Target::new("http://127.0.0.1/")
            .unwrap()
            .header("Bad Name: x")
            .is_err());
        assert!(Target::new("http://127.0.0.1/")
            .unwrap()
            .method("GE T")
            .is_err());
    }

    #[test]
    fn default_names_come_from_the_path() {
        let name = |u: &str| Target::new(u).unwrap().default_name();
        assert_eq!(name("http://127.0.0.1/records"), "records");
        assert_eq!(name("http://127.0.0.1/enrich/42"), "enrich");
        assert_eq!(name("http://127.0.0.1/v1/Users.json"), "v1");
        assert_eq!(name("http://127.0.0.1/"), "dependency");
        assert_eq!(name("http://127.0.0.1/42"), "dependency");
    }
}
