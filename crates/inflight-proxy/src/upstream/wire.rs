//! HTTP/1.1 on the wire to an upstream (RFC 9112): a request's head written out, and an
//! answer's head read in, with how its body is framed.

use bytes::{Bytes, BytesMut};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode, Version};

/// The most headers an answer may have (hyper's default, too).
const MAX_HEADERS: usize = 100;

/// The longest answer head read before the answer is refused as malformed.
pub(crate) const MAX_HEAD: usize = 64 * 1024;

/// How a request's body goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sending {
    /// No body.
    Empty,
    /// As it comes: the request says its length (`Content-Length`).
    Length,
    /// In chunks: its length is not known.
    Chunked,
}

/// Writes the head of a request for `method` and `target` with `headers` to `out`, and how its
/// body goes out. A body whose length is not known goes in chunks; a request without a body
/// whose method has one in the usual case (`POST`, `PUT`, `PATCH`, and any method not known to
/// have none) says `Content-Length: 0`, as some servers refuse one without it.
pub(crate) fn write_head(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    body_empty: bool,
) -> Sending {
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    write_fields(out, headers);
    let sending = if headers.contains_key(header::CONTENT_LENGTH) {
        Sending::Length
    } else if body_empty {
        if !bodiless(method) {
            out.extend_from_slice(b"content-length: 0\r\n");
        }
        Sending::Empty
    } else {
        out.extend_from_slice(CHUNKED);
        Sending::Chunked
    };
    out.extend_from_slice(b"\r\n");
    sending
}

/// The header that says a request's body goes in chunks.
const CHUNKED: &[u8] = b"transfer-encoding: chunked\r\n";

/// A head [`write_head`] wrote for a body in chunks, rewritten for no body: for a request that
/// turned out to have none (an HTTP/2 `GET` whose stream ends with an empty DATA frame).
pub(crate) fn without_body(head: &mut Vec<u8>) {
    if let Some(start) = head.len().checked_sub(CHUNKED.len() + 2) {
        if head[start..].starts_with(CHUNKED) {
            head.truncate(start);
            head.extend_from_slice(b"\r\n");
        }
    }
}

/// Whether a request of `method` usually has no body (RFC 9110, section 9.3).
pub(crate) fn bodiless(method: &Method) -> bool {
    [
        Method::GET,
        Method::HEAD,
        Method::DELETE,
        Method::OPTIONS,
        Method::TRACE,
        Method::CONNECT,
    ]
    .contains(method)
}

/// Whether a request of `method` may be sent again after a connection failed under it
/// (RFC 9110, section 9.2.2: idempotent methods).
pub(crate) fn idempotent(method: &Method) -> bool {
    (bodiless(method) && *method != Method::CONNECT) || *method == Method::PUT
}

/// How an answer's body is framed (RFC 9112, section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// None: an answer to `HEAD`, a 204 or a 304.
    Empty,
    /// This many bytes.
    Length(u64),
    /// In chunks.
    Chunked,
    /// Until the upstream closes the connection.
    Close,
}

/// An answer's head.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) framing: Framing,
    /// Whether the connection may carry another request once the body is read.
    pub(crate) keep_alive: bool,
    /// The reason phrase, when it is not the status code's usual one (the client is sent it).
    pub(crate) reason: Option<hyper::ext::ReasonPhrase>,
}

/// Why an answer could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// Its head is not HTTP/1.x.
    Head,
    /// Its head is longer than [`MAX_HEAD`] or has more than [`MAX_HEADERS`] headers.
    TooLarge,
    /// It switches protocols, which the proxy does not ask for.
    Upgrade,
    /// Its `Content-Length` is not one number.
    Length,
    /// A chunk of its body is not framed as chunks are.
    Chunk,
    /// It is HTTP/1.0 with a `Transfer-Encoding`, which HTTP/1.0 does not have, or its
    /// `Transfer-Encoding` is not `chunked` alone: the proxy passes on no other coding, since
    /// the client could not be told of it (HTTP/2 has none).
    Coding,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Malformed::Head => "the answer's head is not HTTP/1.1",
            Malformed::TooLarge => "the answer's head is too large",
            Malformed::Upgrade => "the answer switched protocols unasked",
            Malformed::Length => "the answer's Content-Length is not one number",
            Malformed::Chunk => "the answer's body is not framed as chunks are",
            Malformed::Coding => {
                "the answer's Transfer-Encoding is not chunked alone, or it is HTTP/1.0 with one"
            }
        })
    }
}

impl std::error::Error for Malformed {}

/// Reads the head of an answer to a request of `method` from the start of `buf`, taking it out
/// of `buf` (what follows is the body's). `None` while the head is not all there; informational
/// answers (1xx) before it are skipped.
pub(crate) fn read_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, Malformed> {
    loop {
        // Left uninitialised: filling 100 empty headers first would cost more than the parse.
        let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut []);
        let config = httparse::ParserConfig::default();
        let parse = config.parse_response_with_uninit_headers(&mut parsed, buf, &mut slots);
        let Some(len) = head_len(parse, buf.len())? else {
            return Ok(None);
        };
        let code = parsed.code.ok_or(Malformed::Head)?;
        let status = StatusCode::from_u16(code).map_err(|_| Malformed::Head)?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(Malformed::Upgrade);
        }
        if status.is_informational() {
            let _ = buf.split_to(len);
            continue;
        }
        let reason = parsed
            .reason
            .filter(|r| !r.is_empty() && Some(*r) != status.canonical_reason())
            .and_then(|r| hyper::ext::ReasonPhrase::try_from(r.as_bytes()).ok());
        let version = match parsed.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        // Where each name and value is in the head, noted before `buf` gives the head away: on
        // the stack, not allocated per answer. (A head is at most `MAX_HEAD` bytes long.)
        let base = buf.as_ptr() as usize;
        let at = |p: &[u8]| [(p.as_ptr() as usize - base) as u32, p.len() as u32];
        let mut spans = [[[0u32; 2]; 2]; MAX_HEADERS];
        let count = parsed.headers.len();
        for (span, h) in spans.iter_mut().zip(parsed.headers.iter()) {
            *span = [at(h.name.as_bytes()), at(h.value)];
        }
        let head: Bytes = buf.split_to(len).freeze();
        let range = |[start, len]: [u32; 2]| start as usize..(start + len) as usize;
        let mut headers = HeaderMap::with_capacity(count);
        for [name, value] in &spans[..count] {
            let name = HeaderName::from_bytes(&head[range(*name)]).map_err(|_| Malformed::Head)?;
            let value = HeaderValue::from_maybe_shared(head.slice(range(*value)))
                .map_err(|_| Malformed::Head)?;
            headers.append(name, value);
        }
        let (framing, listed) = framing(method, status, version, &headers)?;
        let mut keep_alive = keep_alive(version, &headers) && framing != Framing::Close;
        // A `Transfer-Encoding` framed the body (a length alone frames it `Length`).
        if matches!(framing, Framing::Chunked | Framing::Close)
            && headers.contains_key(header::CONTENT_LENGTH)
        {
            // RFC 9112, 6.3: the length goes before the answer is passed on (the client's
            // framing is then the proxy's), and a connection that carried such an answer is
            // not trusted with another.
            headers.remove(header::CONTENT_LENGTH);
            keep_alive = false;
        }
        if let (Framing::Length(n), true) = (framing, listed) {
            // RFC 9110, 8.6: a length said twice, or as a list of one number, goes on as one
            // number.
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        return Ok(Some(Head {
            status,
            headers,
            framing,
            keep_alive,
            reason,
        }));
    }
}

/// What a parse of an answer's head in `have` bytes came to: its length once it is all there,
/// `None` while it is not (and may still fit), or why it is refused.
fn head_len(
    parse: Result<httparse::Status<usize>, httparse::Error>,
    have: usize,
) -> Result<Option<usize>, Malformed> {
    match parse {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEAD => Err(Malformed::TooLarge),
        Ok(httparse::Status::Complete(len)) => Ok(Some(len)),
        Ok(httparse::Status::Partial) if have > MAX_HEAD => Err(Malformed::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(Malformed::TooLarge),
        Err(_) => Err(Malformed::Head),
    }
}

/// While a request waits for the upstream's `100 Continue`: `Some(true)` when `buf` starts
/// with one (taken out of `buf`), `Some(false)` when it starts with the final answer's head
/// (left in `buf`, for [`read_head`]), `None` while neither is all there. Other informational
/// answers before them are passed over.
pub(crate) fn continued(buf: &mut BytesMut) -> Result<Option<bool>, Malformed> {
    loop {
        let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut slots);
        let parse = parsed.parse(buf);
        let Some(len) = head_len(parse, buf.len())? else {
            return Ok(None);
        };
        match parsed.code.ok_or(Malformed::Head)? {
            100 => {
                let _ = buf.split_to(len);
                return Ok(Some(true));
            }
            // A 101 is refused by `read_head`.
            102..=199 => {
                let _ = buf.split_to(len);
            }
            _ => return Ok(Some(false)),
        }
    }
}

/// How the body of an answer with `status` and `headers` to a request of `method` is framed,
/// and whether its length was given more than once (in several fields, or as a list).
fn framing(
    method: &Method,
    status: StatusCode,
    version: Version,
    headers: &HeaderMap,
) -> Result<(Framing, bool), Malformed> {
    if *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, false));
    }
    if headers.contains_key(header::TRANSFER_ENCODING) {
        // Chunked alone, and not in HTTP/1.0 (RFC 9112, 6.3). Any other coding would reach
        // the client unsaid once the proxy's own framing replaces the upstream's.
        if version != Version::HTTP_11 || !chunked_alone(headers) {
            return Err(Malformed::Coding);
        }
        return Ok((Framing::Chunked, false));
    }
    let (mut length, mut given) = (None, 0);
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.to_str().map_err(|_| Malformed::Length)?.split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Malformed::Length);
            }
            let n: u64 = part.parse().map_err(|_| Malformed::Length)?;
            if length.is_some_and(|l| l != n) {
                return Err(Malformed::Length);
            }
            length = Some(n);
            given += 1;
        }
    }
    Ok((length.map_or(Framing::Close, Framing::Length), given > 1))
}

/// Whether the `Transfer-Encoding` of `headers` is `chunked` and nothing else: one coding,
/// however many fields or blanks it is written with.
pub(crate) fn chunked_alone(headers: &HeaderMap) -> bool {
    let mut codings = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|c| !c.is_empty());
    codings
        .next()
        .is_some_and(|c| c.eq_ignore_ascii_case(b"chunked"))
        && codings.next().is_none()
}

/// Whether the connection stays open after an answer with `headers` (RFC 9112, section 9.3).
fn keep_alive(version: Version, headers: &HeaderMap) -> bool {
    let said = |token: &str| {
        headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if version == Version::HTTP_11 {
        !said("close")
    } else {
        said("keep-alive")
    }
}

/// Where a chunked body is (RFC 9112, section 7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunks {
    /// At a chunk's size line.
    Size,
    /// In a chunk's data, this many bytes left.
    Data(u64),
    /// At the line end after a chunk's data.
    DataEnd,
    /// After the last chunk: at the trailers, if any, and the empty line.
    Trailers,
}

/// What a step through a chunked body found.
#[derive(Debug)]
pub(crate) enum Step {
    /// More bytes are needed.
    More,
    /// Bytes of the body.
    Data(Bytes),
    /// The body ended, with its trailers if it had any.
    End(Option<HeaderMap>),
}

/// The longest chunk size line, and the largest trailer section, read (hyper's limit on
/// trailers too): whether it came in one read or in several.
const MAX_LINE: usize = 16 * 1024;

/// One step through a chunked body at `state`, with what `buf` holds.
pub(crate) fn step(state: &mut Chunks, buf: &mut BytesMut) -> Result<Step, Malformed> {
    loop {
        match *state {
            Chunks::Size => {
                let Some(end) = line_end(buf)? else {
                    return more(buf);
                };
                if end > MAX_LINE {
                    return Err(Malformed::Chunk);
                }
                let line = &buf[..end];
                let digits = line
                    .iter()
                    .position(|b| !b.is_ascii_hexdigit())
                    .unwrap_or(line.len());
                // Any number of leading zeros (RFC 9112, 7.1: `1*HEXDIG`); the size itself
                // must fit in 64 bits.
                let zeros = line[..digits].iter().take_while(|b| **b == b'0').count();
                if digits == 0 || digits - zeros > 16 || !extensions(&line[digits..]) {
                    return Err(Malformed::Chunk);
                }
                let text =
                    std::str::from_utf8(&line[zeros..digits]).map_err(|_| Malformed::Chunk)?;
                let size = if text.is_empty() {
                    0
                } else {
                    u64::from_str_radix(text, 16).map_err(|_| Malformed::Chunk)?
                };
                let _ = buf.split_to(end + 2);
                *state = if size == 0 {
                    Chunks::Trailers
                } else {
                    Chunks::Data(size)
                };
            }
            Chunks::Data(left) => {
                if buf.is_empty() {
                    return Ok(Step::More);
                }
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                let data = buf.split_to(n).freeze();
                let left = left - n as u64;
                *state = if left == 0 {
                    Chunks::DataEnd
                } else {
                    Chunks::Data(left)
                };
                return Ok(Step::Data(data));
            }
            Chunks::DataEnd => {
                if buf.len() < 2 {
                    return Ok(Step::More);
                }
                if &buf[..2] != b"\r\n" {
                    return Err(Malformed::Chunk);
                }
                let _ = buf.split_to(2);
                *state = Chunks::Size;
            }
            Chunks::Trailers => {
                if buf.starts_with(b"\r\n") {
                    let _ = buf.split_to(2);
                    return Ok(Step::End(None));
                }
                let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
                let (len, fields) = match httparse::parse_headers(buf, &mut slots) {
                    Ok(httparse::Status::Complete((len, _))) if len > MAX_LINE => {
                        return Err(Malformed::Chunk)
                    }
                    Ok(httparse::Status::Complete(done)) => done,
                    Ok(httparse::Status::Partial) => return more(buf),
                    Err(_) => return Err(Malformed::Chunk),
                };
                let mut trailers = HeaderMap::with_capacity(fields.len());
                for f in fields {
                    let name =
                        HeaderName::from_bytes(f.name.as_bytes()).map_err(|_| Malformed::Chunk)?;
                    let value = HeaderValue::from_bytes(f.value).map_err(|_| Malformed::Chunk)?;
                    trailers.append(name, value);
                }
                let _ = buf.split_to(len);
                return Ok(Step::End(Some(trailers)));
            }
        }
    }
}

/// Where the first line of `buf` ends (its `\r\n`), if it is all there; a line ended by a
/// bare `\n` is refused, as hyper refuses it: parsers that disagree on where a line ends are
/// how one answer is read as two.
fn line_end(buf: &[u8]) -> Result<Option<usize>, Malformed> {
    match buf.iter().position(|b| *b == b'\n') {
        None => Ok(None),
        Some(at) if at > 0 && buf[at - 1] == b'\r' => Ok(Some(at - 1)),
        Some(_) => Err(Malformed::Chunk),
    }
}

/// Whether what follows a chunk's size on its line is blanks and extensions (`;name=value`),
/// with no control byte but a tab (RFC 9112, 7.1.1).
fn extensions(rest: &[u8]) -> bool {
    let rest = match rest.iter().position(|b| *b != b' ' && *b != b'\t') {
        Some(at) => &rest[at..],
        None => return true,
    };
    rest.first() == Some(&b';')
        && rest
            .iter()
            .all(|b| *b == b'\t' || (*b >= 0x20 && *b != 0x7f))
}

/// More bytes are needed, unless `buf` already holds more than a line or trailer section may.
fn more(buf: &BytesMut) -> Result<Step, Malformed> {
    if buf.len() > MAX_LINE {
        Err(Malformed::Chunk)
    } else {
        Ok(Step::More)
    }
}

/// Writes a chunk's size line for `len` bytes to `out`.
pub(crate) fn chunk_size(out: &mut Vec<u8>, len: usize) {
    use std::io::Write;
    let _ = write!(out, "{len:x}\r\n");
}

/// Writes the last chunk and `trailers` (none: the empty line alone) to `out`, without the
/// fields that are never trailers.
pub(crate) fn last_chunk(out: &mut Vec<u8>, trailers: Option<&HeaderMap>) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        if may_be_trailer(name) {
            write_field(out, name, value);
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// Whether `name` may be sent as a trailer: not a field that frames, routes, authenticates or
/// describes the content (RFC 9110, 6.5.1), as hyper's client leaves them out too. An upstream
/// that merges trailers into the header section must not get them.
fn may_be_trailer(name: &HeaderName) -> bool {
    ![
        header::AUTHORIZATION,
        header::CACHE_CONTROL,
        header::CONTENT_ENCODING,
        header::CONTENT_LENGTH,
        header::CONTENT_RANGE,
        header::CONTENT_TYPE,
        header::HOST,
        header::MAX_FORWARDS,
        header::SET_COOKIE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::TE,
    ]
    .contains(name)
}

/// Writes `fields` to `out`, one `name: value` line each: a head's headers, or trailers.
fn write_fields(out: &mut Vec<u8>, fields: &HeaderMap) {
    for (name, value) in fields {
        write_field(out, name, value);
    }
}

/// Writes one `name: value` line to `out`.
fn write_field(out: &mut Vec<u8>, name: &HeaderName, value: &HeaderValue) {
    out.extend_from_slice(name.as_str().as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str, method: Method) -> Result<Option<Head>, Malformed> {
        let mut buf = BytesMut::from(text.as_bytes());
        read_head(&mut buf, &method)
    }

    #[test]
    fn a_request_head_says_how_its_body_goes() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("up:80"));
        let mut out = Vec::new();
        let sending = write_head(&mut out, &Method::GET, "/a?b", &headers, true);
        assert_eq!(sending, Sending::Empty);
        assert_eq!(out, b"GET /a?b HTTP/1.1\r\nhost: up:80\r\n\r\n");

        out.clear();
        let sending = write_head(&mut out, &Method::POST, "/", &headers, true);
        assert_eq!(sending, Sending::Empty);
        assert!(out.ends_with(b"content-length: 0\r\n\r\n"));

        out.clear();
        let sending = write_head(&mut out, &Method::POST, "/", &headers, false);
        assert_eq!(sending, Sending::Chunked);
        assert!(out.ends_with(b"transfer-encoding: chunked\r\n\r\n"));
        without_body(&mut out);
        assert_eq!(out, b"POST / HTTP/1.1\r\nhost: up:80\r\n\r\n");

        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5"));
        out.clear();
        assert_eq!(
            write_head(&mut out, &Method::POST, "/", &headers, false),
            Sending::Length
        );
    }

    #[test]
    fn an_answers_head_is_read_with_its_framing() {
        let mut buf = BytesMut::from(
            &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 3\r\nx-a: 1\r\n\r\nabc"[..],
        );
        let read = read_head(&mut buf, &Method::GET).unwrap().unwrap();
        assert_eq!(read.status, StatusCode::OK);
        assert_eq!(read.framing, Framing::Length(3));
        assert!(read.keep_alive);
        assert_eq!(read.headers["x-a"], "1");
        assert_eq!(&buf[..], b"abc");

        let partial = head("HTTP/1.1 200 OK\r\ncontent-le", Method::GET);
        assert!(partial.unwrap().is_none());

        let chunked = head(
            "HTTP/1.1 200 OK\r\ntransfer-encoding:  Chunked \r\n\r\n",
            Method::GET,
        );
        assert_eq!(chunked.unwrap().unwrap().framing, Framing::Chunked);

        let listed = head(
            "HTTP/1.1 200 OK\r\ncontent-length: 3, 3\r\ncontent-length: 3\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert_eq!(listed.framing, Framing::Length(3));
        let lengths: Vec<_> = listed.headers.get_all("content-length").iter().collect();
        assert_eq!(lengths, ["3"]);

        let close = head("HTTP/1.0 200 OK\r\n\r\n", Method::GET)
            .unwrap()
            .unwrap();
        assert_eq!(close.framing, Framing::Close);
        assert!(!close.keep_alive);

        let both = head(
            "HTTP/1.1 200 OK\r\ncontent-length: 9\r\ntransfer-encoding: chunked\r\n\r\n",
            Method::GET,
        )
        .unwrap()
        .unwrap();
        assert_eq!(both.framing, Framing::Chunked);
        assert!(both.headers.get("content-length").is_none());
        assert!(!both.keep_alive);

        let reasoned = head(
            "HTTP/1.1 200 Fine\r\ncontent-length: 0\r\n\r\n",
            Method::GET,
        );
        assert_eq!(
            reasoned.unwrap().unwrap().reason.unwrap().as_bytes(),
            b"Fine"
        );
        let usual = head("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", Method::GET);
        assert!(usual.unwrap().unwrap().reason.is_none());

        let to_head = head("HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", Method::HEAD);
        assert_eq!(to_head.unwrap().unwrap().framing, Framing::Empty);

        let closing = head(
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            Method::GET,
        );
        assert!(!closing.unwrap().unwrap().keep_alive);
    }

    #[test]
    fn a_malformed_answer_is_refused() {
        let two_lengths = "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n";
        assert_eq!(
            head(two_lengths, Method::GET).unwrap_err(),
            Malformed::Length
        );
        let old_chunks = "HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(
            head(old_chunks, Method::GET).unwrap_err(),
            Malformed::Coding
        );
        for coded in [
            "gzip, chunked",
            "yolo",
            "chunked, chunked",
            "chunked\r\ntransfer-encoding: gzip",
        ] {
            let answer = format!("HTTP/1.1 200 OK\r\ntransfer-encoding: {coded}\r\n\r\n");
            assert_eq!(
                head(&answer, Method::GET).unwrap_err(),
                Malformed::Coding,
                "{coded}"
            );
        }
        let signed = "HTTP/1.1 200 OK\r\ncontent-length: +3\r\n\r\n";
        assert_eq!(head(signed, Method::GET).unwrap_err(), Malformed::Length);
        assert_eq!(
            head("SSH-2.0-OpenSSH\r\n\r\n", Method::GET).unwrap_err(),
            Malformed::Head
        );
        let switching = "HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n";
        assert_eq!(
            head(switching, Method::GET).unwrap_err(),
            Malformed::Upgrade
        );
        let endless = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD));
        assert_eq!(
            head(&endless, Method::GET).unwrap_err(),
            Malformed::TooLarge
        );
        let whole = format!("HTTP/1.1 200 OK\r\nx: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(head(&whole, Method::GET).unwrap_err(), Malformed::TooLarge);
    }

    #[test]
    fn a_continue_is_told_from_a_final_answer_and_other_informational_ones_are_passed_over() {
        let mut buf =
            BytesMut::from(&b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 100 Con"[..]);
        assert_eq!(continued(&mut buf), Ok(None));
        buf.extend_from_slice(b"tinue\r\n\r\nHTTP/1.1 200 OK\r\n");
        assert_eq!(continued(&mut buf), Ok(Some(true)));
        assert_eq!(&buf[..], b"HTTP/1.1 200 OK\r\n");

        let answer = b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 0\r\n\r\n";
        let mut buf = BytesMut::from(&answer[..]);
        assert_eq!(continued(&mut buf), Ok(Some(false)));
        assert_eq!(&buf[..], answer, "the final answer is left for read_head");

        let mut buf = BytesMut::from(&b"SSH-2.0\r\n\r\n"[..]);
        assert_eq!(continued(&mut buf), Err(Malformed::Head));
    }

    #[test]
    fn trailers_go_up_to_their_limit_whole_or_in_parts_and_no_further() {
        let section = |size: usize| format!("x-big: {}\r\n\r\n", "a".repeat(size));
        let fits = section(MAX_LINE - 20);
        for split in [fits.len(), fits.len() / 2] {
            let mut state = Chunks::Trailers;
            let mut buf = BytesMut::from(&fits.as_bytes()[..split]);
            let mut step_ = step(&mut state, &mut buf).unwrap();
            if matches!(step_, Step::More) {
                buf.extend_from_slice(&fits.as_bytes()[split..]);
                step_ = step(&mut state, &mut buf).unwrap();
            }
            assert!(matches!(step_, Step::End(Some(_))), "split {split}");
        }
        let over = section(MAX_LINE);
        for split in [over.len(), over.len() / 2] {
            let mut state = Chunks::Trailers;
            let mut buf = BytesMut::from(&over.as_bytes()[..split]);
            let mut got = step(&mut state, &mut buf);
            if matches!(got, Ok(Step::More)) {
                buf.extend_from_slice(&over.as_bytes()[split..]);
                got = step(&mut state, &mut buf);
            }
            assert_eq!(got.unwrap_err(), Malformed::Chunk, "split {split}");
        }
    }

    #[test]
    fn only_fields_that_may_be_trailers_are_written_as_trailers() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", HeaderValue::from_static("1"));
        trailers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("9"));
        trailers.insert(header::HOST, HeaderValue::from_static("elsewhere"));
        trailers.insert(header::AUTHORIZATION, HeaderValue::from_static("x"));
        trailers.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        let mut out = Vec::new();
        last_chunk(&mut out, Some(&trailers));
        assert_eq!(out, b"0\r\nx-checksum: 1\r\n\r\n");
    }

    #[test]
    fn a_chunked_body_is_read_in_any_split_with_its_trailers() {
        let body = b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\ngrpc-status: 0\r\n\r\n";
        for split in 1..body.len() {
            let mut state = Chunks::Size;
            let mut buf = BytesMut::new();
            let mut data = Vec::new();
            let mut fed = 0;
            let trailers = loop {
                match step(&mut state, &mut buf).unwrap() {
                    Step::More => {
                        let next = (fed + split).min(body.len());
                        assert!(fed < body.len(), "split {split}: wants more at the end");
                        buf.extend_from_slice(&body[fed..next]);
                        fed = next;
                    }
                    Step::Data(d) => data.extend_from_slice(&d),
                    Step::End(t) => break t,
                }
            };
            assert_eq!(data, b"abcde", "split {split}");
            assert_eq!(trailers.unwrap()["grpc-status"], "0", "split {split}");
            assert!(buf.is_empty());
        }
        let padded = format!("{}5\r\n", "0".repeat(40));
        let mut state = Chunks::Size;
        let mut buf = BytesMut::from(padded.as_bytes());
        assert!(matches!(step(&mut state, &mut buf), Ok(Step::More)));
        assert_eq!(state, Chunks::Data(5));
        let long = format!("1;x={}\r\n", "a".repeat(MAX_LINE));
        for bad in [
            &b"zz\r\n"[..],
            b"5;x\nabcde\r\n",
            b"3 4\r\nabc\r\n",
            b"3;\x01\r\nabc\r\n",
            b"10000000000000000\r\n",
            long.as_bytes(),
        ] {
            let mut state = Chunks::Size;
            let mut buf = BytesMut::from(bad);
            assert_eq!(
                step(&mut state, &mut buf).unwrap_err(),
                Malformed::Chunk,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
