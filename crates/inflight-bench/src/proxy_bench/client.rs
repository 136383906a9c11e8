//! [`Connection`]: the load generator's keep-alive HTTP/1.1 client connection, written for
//! cost rather than generality: one GET written as one `write`, its answer read straight from
//! the socket by the task that sent it, with no task of its own per connection and no request
//! or response types built.
//!
//! The generator shares its CPU with the upstream, and in the open loop its own send lag is the
//! discard rule's measure: hyper's client cost it about 45 µs of CPU per request on this
//! project's 2-vCPU machine (a connection task beside the caller's, a request and a response
//! built and taken apart, a timer per request), more than the proxies it measures. This one
//! reads a status line, headers and a body of `content-length` bytes or chunks, which is all the
//! targets answer.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Target;

/// The most an answer's head may take.
const MAX_HEAD: usize = 16 * 1024;

/// The largest chunk read: more than any target sends.
const MAX_CHUNK: usize = 16 * 1024 * 1024;

/// One keep-alive client connection, opened again when it breaks.
pub(crate) struct Connection {
    target: Target,
    timeout: Duration,
    stream: Option<TcpStream>,
    /// `GET <path> HTTP/1.1`, `Host`, end of head: the same bytes each time.
    request: Vec<u8>,
    /// Bytes read and not yet used.
    buf: Vec<u8>,
}

/// How an answer's body ends.
enum Framing {
    Length(usize),
    Chunked,
    /// No body (a 1xx, 204 or 304 answer).
    Empty,
}

impl Connection {
    pub(crate) fn new(target: Target, timeout: Duration) -> Connection {
        let request = format!(
            "GET {} HTTP/1.1\r\nhost: {}\r\n\r\n",
            target.path, target.host
        )
        .into_bytes();
        Connection {
            target,
            timeout,
            stream: None,
            request,
            buf: Vec::with_capacity(4096),
        }
    }

    /// Whether the connection is open now: connected, and the peer has not closed it (a look at
    /// the socket that takes nothing from it).
    pub(crate) fn is_open(&self) -> bool {
        let Some(stream) = &self.stream else {
            return false;
        };
        let mut byte = 0u8;
        // SAFETY: peeks at most one byte into a one-byte buffer, without waiting, on a socket
        // this connection owns.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n > 0 || (n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock)
    }

    /// One GET of the target's path: its status and when its body was in, or `None` when no
    /// answer came (the connection is dropped, to be opened anew by the next call).
    pub(crate) async fn get(&mut self) -> Option<(u16, Instant)> {
        let answer = tokio::time::timeout(self.timeout, async {
            let reused = self.stream.is_some();
            match self.try_get().await {
                // A kept connection the server closed while it idled: nothing of an answer
                // came, so the request is sent again once, on a new connection.
                Err(e) if reused && self.buf.is_empty() && closed_before_answer(&e) => {
                    self.stream = None;
                    self.try_get().await
                }
                answer => answer,
            }
        })
        .await;
        match answer {
            Ok(Ok((status, done, keep))) => {
                if !keep {
                    self.stream = None;
                }
                Some((status, done))
            }
            _ => {
                self.stream = None;
                None
            }
        }
    }

    /// The status, when the body was in, and whether the connection may be used again.
    async fn try_get(&mut self) -> io::Result<(u16, Instant, bool)> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.target.addr).await?;
            stream.set_nodelay(true)?;
            self.stream = Some(stream);
            self.buf.clear();
        }
        let stream = self.stream.as_mut().expect("just opened");
        stream.write_all(&self.request).await?;
        loop {
            let (status, framing, keep, head_len) = loop {
                if let Some(head) = parse_head(&self.buf)? {
                    break head;
                }
                if self.buf.len() >= MAX_HEAD {
                    return Err(invalid("an answer's head over 16 KiB"));
                }
                read_more(stream, &mut self.buf).await?;
            };
            self.buf.drain(..head_len);
            match framing {
                Framing::Empty => {}
                Framing::Length(n) => {
                    while self.buf.len() < n {
                        read_more(stream, &mut self.buf).await?;
                    }
                    self.buf.drain(..n);
                }
                Framing::Chunked => read_chunked(stream, &mut self.buf).await?,
            }
            // An interim answer (100 Continue) is followed by the real one.
            if (100..200).contains(&status) {
                continue;
            }
            return Ok((status, Instant::now(), keep));
        }
    }
}

/// Whether `e` says the peer had closed the connection (an end of stream, a reset, a broken
/// pipe).
fn closed_before_answer(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
    )
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// Appends what the socket has to `buf`; the peer closing is an error here, mid-answer.
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(4096);
    }
    if stream.read_buf(buf).await? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// The answer's head, once `buf` holds all of it: status, framing, whether the connection is
/// kept, and the head's length.
fn parse_head(buf: &[u8]) -> io::Result<Option<(u16, Framing, bool, usize)>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut answer = httparse::Response::new(&mut headers);
    let head_len = match answer.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(invalid(&format!("a bad answer head: {e}"))),
    };
    let status = answer.code.unwrap_or(0);
    let mut keep = answer.version == Some(1);
    let mut framing = None;
    for h in answer.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            if matches!(framing, Some(Framing::Chunked)) {
                continue; // chunks win over a length (RFC 9112, 6.3)
            }
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| invalid("a content-length that is not a number"))?;
            framing = Some(Framing::Length(n));
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if h.value.eq_ignore_ascii_case(b"chunked") {
                framing = Some(Framing::Chunked);
            } else {
                return Err(invalid("a transfer-encoding other than chunked"));
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            keep = !h.value.eq_ignore_ascii_case(b"close");
        }
    }
    let framing = match framing {
        _ if status < 200 || status == 204 || status == 304 => Framing::Empty,
        Some(f) => f,
        // A body that ends when the connection does: not one the targets send.
        None => return Err(invalid("an answer with neither content-length nor chunks")),
    };
    Ok(Some((status, framing, keep, head_len)))
}

/// Where the first line in `buf` ends (its CRLF), reading more until it is there; `too_long`
/// is the error once 16 KiB hold no line end.
async fn find_line_end(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    too_long: &str,
) -> io::Result<usize> {
    loop {
        if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
            return Ok(i);
        }
        if buf.len() >= MAX_HEAD {
            return Err(invalid(too_long));
        }
        read_more(stream, buf).await?;
    }
}

/// Reads and drops a chunked body, trailers included.
async fn read_chunked(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<()> {
    loop {
        let line_end = find_line_end(stream, buf, "a chunk size line over 16 KiB").await?;
        let line = std::str::from_utf8(&buf[..line_end]).map_err(|_| invalid("a bad chunk"))?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(hex, 16)
            .ok()
            .filter(|&n| n <= MAX_CHUNK)
            .ok_or_else(|| invalid("a bad chunk size, or one over 16 MiB"))?;
        buf.drain(..line_end + 2);
        if size == 0 {
            // Trailers, if any, then an empty line.
            loop {
                let end = find_line_end(stream, buf, "trailers over 16 KiB").await?;
                buf.drain(..end + 2);
                if end == 0 {
                    return Ok(());
                }
            }
        }
        while buf.len() < size + 2 {
            read_more(stream, buf).await?;
        }
        if &buf[size..size + 2] != b"\r\n" {
            return Err(invalid("a chunk not ended by CRLF"));
        }
        buf.drain(..size + 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server that answers each request on one connection with the next of `answers`, as
    /// written, and counts the requests.
    async fn serve(answers: Vec<&'static [u8]>) -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            for answer in answers {
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut chunk = [0u8; 1024];
                    let n = s.read(&mut chunk).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&chunk[..n]);
                }
                let end = seen.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                assert!(seen.starts_with(b"GET /p HTTP/1.1\r\nhost: h\r\n"));
                seen.drain(..end);
                // In two writes: a head or body split across reads is read whole.
                let (a, b) = answer.split_at(answer.len() / 2);
                s.write_all(a).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                s.write_all(b).await.unwrap();
            }
            let mut rest = [0u8; 16];
            let _ = s.read(&mut rest).await;
        });
        Target {
            addr,
            host: "h".into(),
            path: "/p".into(),
        }
    }

    #[tokio::test]
    async fn answers_by_length_and_by_chunks_are_read_whole_on_one_connection() {
        let target = serve(vec![
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 No\r\nTransfer-Encoding: chunked\r\ncontent-length: 99\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nt: 1\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        ])
        .await;
        let mut conn = Connection::new(target, Duration::from_secs(5));
        assert_eq!(conn.get().await.map(|a| a.0), Some(200));
        assert!(conn.is_open());
        assert_eq!(conn.get().await.map(|a| a.0), Some(503));
        assert_eq!(conn.get().await.map(|a| a.0), Some(204));
        assert!(conn.is_open());
        assert_eq!(conn.get().await.map(|a| a.0), Some(200));
        assert!(!conn.is_open(), "closed as the answer asked");
    }

    #[tokio::test]
    async fn a_kept_connection_the_server_closed_is_opened_again_for_the_next_request() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            // Each connection: one request answered, then closed without a word.
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut head = [0u8; 1024];
                let _ = s.read(&mut head).await.unwrap();
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await
                    .unwrap();
                drop(s);
            }
        });
        let target = Target {
            addr,
            host: "h".into(),
            path: "/p".into(),
        };
        let mut conn = Connection::new(target, Duration::from_secs(5));
        for _ in 0..3 {
            assert_eq!(conn.get().await.map(|a| a.0), Some(200));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_bad_answer_or_a_close_mid_answer_is_no_answer() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nffffffffffffffff\r\n"[..],
            &b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\n\r\nno framing",
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",
            b"NOT HTTP\r\n\r\n",
        ] {
            let target = serve(vec![answer]).await;
            let mut conn = Connection::new(target, Duration::from_secs(5));
            assert_eq!(
                conn.get().await,
                None,
                "{}",
                String::from_utf8_lossy(answer)
            );
            assert!(!conn.is_open());
        }
    }
}
