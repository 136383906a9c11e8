//! Header rewriting between client and upstream: hop-by-hop headers out (RFC 9110 section
//! 7.6.1), `Host` for the upstream, `X-Forwarded-For` appended; and the priority class a
//! request's `class_header` names.

use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that describe one connection, not the message (RFC 9110 section 7.6.1), beyond
/// those the `Connection` header names; with the proxy credentials that RFC 2616 counted as
/// hop-by-hop too (credentials meant for this hop must not reach the upstream). `Expect` is
/// answered by the proxy's own server. `Trailer` is not on the list: it names the message's
/// trailers (RFC 9110 section 6.6.2), and hyper's server sends an HTTP/1.1 client only the
/// trailers it names.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];
/// The priority class the request's header `name` names: its first value, if it is visible
/// ASCII of at most [`MAX_CLASS_NAME`](inflight::config::MAX_CLASS_NAME) bytes. `None` (the
/// budget's default class) for a missing header or any other value: a client's bad header
/// never fails its request.
pub(crate) fn class_of<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let value = headers.get(name)?.to_str().ok()?;
    (!value.is_empty() && value.len() <= inflight::config::MAX_CLASS_NAME).then_some(value)
}

/// Whether `name` is a hop-by-hop header of the fixed list ([`HOP_BY_HOP`]), compared
/// without parsing or hashing: most requests and answers have none, and are then left as they
/// are after one pass over their names.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

/// Removes the hop-by-hop headers of `headers`: the fixed list and every header the
/// `Connection` header names.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    if headers.keys().any(is_hop_by_hop) {
        remove_found_hop_by_hop(headers);
    }
}

/// [`remove_hop_by_hop`], for headers known to hold one at least.
fn remove_found_hop_by_hop(headers: &mut HeaderMap) {
    // A header named by `Connection` goes only with `Connection`, which is on the list.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// `X-Forwarded-For`.
const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client at the other end of a connection, as the upstream is told of it: its address,
/// and the `X-Forwarded-For` value that names it, written once per connection.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    forwarded: HeaderValue,
}

impl Peer {
    pub(crate) fn new(addr: std::net::SocketAddr) -> Peer {
        let text = addr.ip().to_canonical().to_string();
        Peer {
            forwarded: HeaderValue::from_str(&text).expect("an IP address is a header value"),
        }
    }
}

/// Rewrites a request's headers for the upstream: hop-by-hop headers out, `Expect` out,
/// `Host` set to `authority` unless `preserve_host` (and the client sent one), and `peer`
/// appended to `X-Forwarded-For`. Without an `authority` (an HTTP/2 upstream, told the
/// upstream's authority in `:authority`) a `Host` that is not preserved goes: a request with
/// both is refused by some servers (nginx: "duplicate host header"). Answers whether the request expected `100 Continue` (the
/// proxy's own HTTP/1.1 client asks the upstream for it again, and waits for its word).
///
/// One pass over the names tells which of these the request has: most have none but `Host`,
/// and each look-up by name hashes it.
pub(crate) fn for_upstream(
    headers: &mut HeaderMap,
    authority: Option<&HeaderValue>,
    preserve_host: bool,
    peer: &Peer,
) -> bool {
    let (mut hop, mut expect, mut host, mut forwarded) = (false, false, false, false);
    for name in headers.keys() {
        if is_hop_by_hop(name) {
            hop = true;
        } else if name == header::HOST {
            host = true;
        } else if name == header::EXPECT {
            expect = true;
        } else if name == FORWARDED_FOR {
            forwarded = true;
        }
    }
    if hop {
        // `TE: trailers` says the client takes trailers (gRPC needs it said): it holds for the
        // upstream hop too, since the proxy passes trailers through.
        let trailers = headers
            .get_all(header::TE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("trailers"));
        remove_found_hop_by_hop(headers);
        if trailers {
            headers.insert(header::TE, HeaderValue::from_static("trailers"));
        }
    }
    // `Expect` goes; whether it asked for `100 Continue` is told back, for the client that can
    // wait for the upstream's.
    let continues = expect
        && headers
            .remove(header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if !host || !preserve_host {
        match authority {
            // `insert`, not a value replaced in place: it drops any second `Host` too.
            Some(authority) => {
                headers.insert(header::HOST, authority.clone());
            }
            None if host => {
                headers.remove(header::HOST);
            }
            None => {}
        }
    }
    if !forwarded {
        headers.insert(FORWARDED_FOR, peer.forwarded.clone());
        return continues;
    }
    // The earlier values as bytes: a field value may hold bytes past ASCII (RFC 9110, 5.5),
    // and an earlier hop is kept whatever it wrote.
    let mut chain: Vec<u8> = Vec::new();
    for value in headers.get_all(&FORWARDED_FOR) {
        let value = value.as_bytes().trim_ascii();
        if !value.is_empty() {
            chain.extend_from_slice(value);
            chain.extend_from_slice(b", ");
        }
    }
    chain.extend_from_slice(peer.forwarded.as_bytes());
    if let Ok(value) = HeaderValue::from_bytes(&chain) {
        headers.insert(FORWARDED_FOR, value);
    }
    continues
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_class_is_a_short_visible_value_else_none() {
        let name = HeaderName::from_static("x-priority");
        let with = |v: &[u8]| {
            let mut map = HeaderMap::new();
            map.insert(name.clone(), HeaderValue::from_bytes(v).unwrap());
            map
        };
        assert_eq!(class_of(&with(b"interactive"), &name), Some("interactive"));
        assert_eq!(class_of(&HeaderMap::new(), &name), None);
        assert_eq!(class_of(&with(b""), &name), None);
        assert_eq!(class_of(&with(b"\xffbatch"), &name), None);
        let longest = "x".repeat(inflight::config::MAX_CLASS_NAME);
        assert_eq!(class_of(&with(longest.as_bytes()), &name), Some(&*longest));
        let longer = format!("{longest}x");
        assert_eq!(class_of(&with(longer.as_bytes()), &name), None);
        let mut two = with(b"batch");
        two.append(name.clone(), HeaderValue::from_static("interactive"));
        assert_eq!(class_of(&two, &name), Some("batch"), "the first value");
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_removed() {
        let mut h = headers(&[
            ("connection", "keep-alive, X-Trace-Hop"),
            ("connection", "x-second"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-authorization", "Basic c2VjcmV0"),
            ("proxy-authenticate", "Basic"),
            ("x-trace-hop", "1"),
            ("x-second", "2"),
            ("x-end-to-end", "3"),
            ("content-length", "10"),
            ("trailer", "x-checksum"),
        ]);
        remove_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-length", "trailer", "x-end-to-end"]);
    }

    #[test]
    fn host_is_the_upstreams_unless_preserved_and_forwarded_for_is_appended() {
        let authority = HeaderValue::from_static("127.0.0.1:7070");
        let peer = Peer::new("10.0.0.9:4000".parse().unwrap());

        let mut h = headers(&[("host", "proxy:7002"), ("expect", "100-continue")]);
        for_upstream(&mut h, Some(&authority), false, &peer);
        assert_eq!(h["host"], "127.0.0.1:7070");
        // HTTP/2: the upstream's authority goes in `:authority`, the client's Host out, unless
        // preserved.
        let mut h2 = headers(&[("host", "proxy:7002")]);
        for_upstream(&mut h2, None, false, &peer);
        assert!(!h2.contains_key("host"), "{h2:?}");
        let mut h2 = headers(&[("host", "proxy:7002")]);
        for_upstream(&mut h2, None, true, &peer);
        assert_eq!(h2["host"], "proxy:7002");
        assert_eq!(h["x-forwarded-for"], "10.0.0.9");
        assert!(!h.contains_key("expect"));

        let mut h = headers(&[
            ("host", "proxy:7002"),
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "2.2.2.2, 3.3.3.3"),
        ]);
        for_upstream(&mut h, Some(&authority), true, &peer);
        assert_eq!(h["host"], "proxy:7002");
        assert_eq!(
            h.get_all("x-forwarded-for").iter().collect::<Vec<_>>(),
            ["1.1.1.1, 2.2.2.2, 3.3.3.3, 10.0.0.9"]
        );

        // `TE: trailers` is the one TE the upstream hop gets.
        let mut h = headers(&[("te", "gzip, trailers"), ("proxy-authorization", "x")]);
        for_upstream(&mut h, Some(&authority), false, &peer);
        assert_eq!(h["te"], "trailers");
        assert!(!h.contains_key("proxy-authorization"));
        let mut h = headers(&[("te", "gzip")]);
        for_upstream(&mut h, Some(&authority), false, &peer);
        assert!(!h.contains_key("te"));

        // A request without Host (HTTP/1.0) still names the upstream.
        let mut h = HeaderMap::new();
        for_upstream(&mut h, Some(&authority), true, &peer);
        assert_eq!(h["host"], "127.0.0.1:7070");
    }
}
