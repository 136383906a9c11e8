//! An upstream on loopback that answers each request with bytes a test scripts (written as
//! they are, in pieces, with pauses, or a close), and records what it read: for the proxy's
//! own HTTP/1.1 client, whose framing and reuse of connections only such an upstream can
//! test.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, Semaphore};

/// How long a closed connection is read on, so that its close is a FIN, not a reset; and how
/// long the upstream waits for a go-ahead or for the proxy to close.
const DRAIN: Duration = Duration::from_secs(5);

/// The values of header `name` in a head written as text (case-insensitive), in order.
pub(crate) fn values_in(head: &str, name: &str) -> Vec<String> {
    head.split("\r\n")
        .skip(1)
        .filter_map(|line| line.split_once(':'))
        .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

/// One request as the upstream read it.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    /// The connection it came on (0 for the first one accepted), and its place on it.
    pub(crate) conn: usize,
    pub(crate) nth: usize,
    /// Its head, as sent.
    pub(crate) head: String,
    /// Head and body, as sent.
    pub(crate) raw: Vec<u8>,
    /// Its body, without chunk framing.
    pub(crate) body: Vec<u8>,
}

impl Req {
    pub(crate) fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or("")
    }

    pub(crate) fn method(&self) -> &str {
        self.head.split(' ').next().unwrap_or("")
    }

    /// The values of its header `name`, in order.
    pub(crate) fn values(&self, name: &str) -> Vec<String> {
        values_in(&self.head, name)
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        !self.values(name).is_empty()
    }
}

/// What the upstream does for a request, in order; then it reads the next request on the same
/// connection (it never closes a connection unless told to).
pub(crate) enum Act {
    Write(Vec<u8>),
    Sleep(u64),
    /// Waits for a permit of this semaphore (the test's go-ahead), taken for good.
    Wait(Arc<Semaphore>),
    /// Closes the connection (a FIN, after what was written).
    Close,
    /// Reads until the proxy closes the connection, and counts the close in `Seen::closes`.
    AwaitClose,
}

pub(crate) fn wr(bytes: impl AsRef<[u8]>) -> Act {
    Act::Write(bytes.as_ref().to_vec())
}

/// What the upstream saw.
pub(crate) struct Seen {
    requests: Mutex<Vec<Req>>,
    accepted: AtomicUsize,
    /// Closes every open connection: an idle one at once, a busy one once it has answered.
    close_all: Notify,
    /// A permit per request read.
    arrived: Semaphore,
    /// A permit per request head read (before its body).
    pub(crate) heads: Semaphore,
    /// A permit per connection the proxy closed while the upstream awaited it, or in the middle
    /// of a request.
    pub(crate) closes: Semaphore,
}

impl Default for Seen {
    fn default() -> Seen {
        Seen {
            requests: Mutex::default(),
            accepted: AtomicUsize::new(0),
            close_all: Notify::new(),
            arrived: Semaphore::new(0),
            heads: Semaphore::new(0),
            closes: Semaphore::new(0),
        }
    }
}

impl Seen {
    /// Waits (a few seconds at most) for the next request to arrive.
    pub(crate) async fn arrival(&self) {
        tokio::time::timeout(DRAIN, self.arrived.acquire())
            .await
            .expect("a request at the upstream")
            .unwrap()
            .forget();
    }

    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub(crate) fn requests(&self) -> Vec<Req> {
        self.requests.lock().unwrap().clone()
    }

    /// Closes every connection open now, as an upstream's keep-alive timeout would.
    pub(crate) fn close_all(&self) {
        self.close_all.notify_waiters();
    }
}

type Script = dyn Fn(&Req) -> Vec<Act> + Send + Sync;

/// An upstream on 127.0.0.1 that answers each request with what `script` says.
pub(crate) async fn upstream(
    script: impl Fn(&Req) -> Vec<Act> + Send + Sync + 'static,
) -> (SocketAddr, Arc<Seen>) {
    let script: Arc<Script> = Arc::new(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let conn = shared.accepted.fetch_add(1, Ordering::SeqCst);
            let (seen, script) = (shared.clone(), script.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for nth in 0.. {
                    let request = tokio::select! {
                        request = read_request(&mut socket, &mut buf, &seen.heads) => request,
                        () = seen.close_all.notified() => return,
                    };
                    let Some((raw, head_len, body)) = request else {
                        if !buf.is_empty() {
                            seen.closes.add_permits(1);
                        }
                        return;
                    };
                    let head = String::from_utf8_lossy(&raw[..head_len]).into_owned();
                    let req = Req {
                        conn,
                        nth,
                        head,
                        raw,
                        body,
                    };
                    seen.requests.lock().unwrap().push(req.clone());
                    seen.arrived.add_permits(1);
                    for act in script(&req) {
                        match act {
                            Act::Write(bytes) => {
                                if socket.write_all(&bytes).await.is_err() {
                                    return;
                                }
                            }
                            Act::Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                            Act::Wait(go) => {
                                if let Ok(Ok(permit)) =
                                    tokio::time::timeout(DRAIN * 2, go.acquire()).await
                                {
                                    permit.forget();
                                }
                            }
                            Act::AwaitClose => {
                                let mut sink = [0u8; 1024];
                                let closed = async {
                                    while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
                                };
                                if tokio::time::timeout(DRAIN * 2, closed).await.is_ok() {
                                    seen.closes.add_permits(1);
                                }
                                return;
                            }
                            Act::Close => {
                                let _ = socket.shutdown().await;
                                // Read on, so that the close is a FIN, not a reset.
                                let mut sink = [0u8; 1024];
                                let drain = async {
                                    while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
                                };
                                let _ = tokio::time::timeout(DRAIN, drain).await;
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Reads from `socket` into `buf` until it holds at least `n` bytes; `None` at its end.
pub(crate) async fn need(socket: &mut TcpStream, buf: &mut Vec<u8>, n: usize) -> Option<()> {
    while buf.len() < n {
        let mut chunk = [0u8; 16 * 1024];
        let read = socket.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..read]);
    }
    Some(())
}

/// Where the line that starts at `from` ends (its `\r\n`), reading more as needed.
pub(crate) async fn line(socket: &mut TcpStream, buf: &mut Vec<u8>, from: usize) -> Option<usize> {
    loop {
        if let Some(at) = buf[from..].windows(2).position(|w| w == b"\r\n") {
            return Some(from + at);
        }
        let len = buf.len();
        need(socket, buf, len + 1).await?;
    }
}

/// One request off `socket`: its raw bytes, the length of its head, and its body (by
/// `content-length`, or chunks with their trailers); `None` at the connection's end. A permit
/// of `heads` when its head is in.
async fn read_request(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    heads: &Semaphore,
) -> Option<(Vec<u8>, usize, Vec<u8>)> {
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let len = buf.len();
        need(socket, buf, len + 1).await?;
    };
    heads.add_permits(1);
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|n| n.trim().parse::<usize>().unwrap());
    let mut body = Vec::new();
    let end = if let Some(length) = length {
        need(socket, buf, head_end + length).await?;
        body.extend_from_slice(&buf[head_end..head_end + length]);
        head_end + length
    } else if head.contains("transfer-encoding:") {
        let (chunks, _trailers, end) = read_chunks(socket, buf, head_end).await?;
        body = chunks;
        end
    } else {
        head_end
    };
    Some((buf.drain(..end).collect(), head_end, body))
}

/// Reads a chunked body that starts at `at` in `buf`: its data, its trailer section, and where
/// it ends.
pub(crate) async fn read_chunks(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    mut at: usize,
) -> Option<(Vec<u8>, String, usize)> {
    let mut body = Vec::new();
    loop {
        let eol = line(socket, buf, at).await?;
        let text = String::from_utf8_lossy(&buf[at..eol]).into_owned();
        let size = usize::from_str_radix(text.split(';').next().unwrap().trim(), 16).ok()?;
        at = eol + 2;
        if size == 0 {
            let start = at;
            loop {
                let eol = line(socket, buf, at).await?;
                let empty = eol == at;
                at = eol + 2;
                if empty {
                    break;
                }
            }
            let trailers = String::from_utf8_lossy(&buf[start..at]).into_owned();
            return Some((body, trailers, at));
        }
        need(socket, buf, at + size + 2).await?;
        body.extend_from_slice(&buf[at..at + size]);
        at += size + 2;
    }
}

/// An answer whose body is the request's path (its length alone, for a `HEAD`).
pub(crate) fn echo(req: &Req) -> Vec<u8> {
    let path = req.path();
    let body = if req.method() == "HEAD" { "" } else { path };
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        path.len()
    )
    .into_bytes()
}
