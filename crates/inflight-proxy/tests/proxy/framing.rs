//! HTTP/2 framing passes through the proxy intact, read frame by frame on the client side: an
//! upstream's trailers-only answer (a HEADERS frame that ends the stream, how a gRPC server
//! refuses) stays trailers-only, and trailers after data stay trailers, whatever the budget.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{Empty, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{budget, get, h2_client, proxy};

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const END_STREAM: u8 = 1;

/// An HTTP/2 (prior knowledge) upstream: `/trailers-only` answers with a HEADERS frame that
/// ends the stream (`grpc-status: 8`); anything else answers one data frame, then trailers
/// (`grpc-status: 0`).
async fn grpc_like_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |request: Request<hyper::body::Incoming>| async move {
                        type Frames = futures::stream::Iter<
                            std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>,
                        >;
                        let response: Response<
                            http_body_util::Either<Empty<Bytes>, StreamBody<Frames>>,
                        > = if request.uri().path() == "/trailers-only" {
                            Response::builder()
                                .header("content-type", "application/grpc")
                                .header("grpc-status", "8")
                                .header("grpc-message", "busy")
                                .body(http_body_util::Either::Left(Empty::new()))
                                .unwrap()
                        } else {
                            let mut trailers = hyper::HeaderMap::new();
                            trailers.insert("grpc-status", "0".parse().unwrap());
                            let frames = vec![
                                Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\x02hi"))),
                                Ok(Frame::trailers(trailers)),
                            ];
                            Response::builder()
                                .header("content-type", "application/grpc")
                                .body(http_body_util::Either::Right(StreamBody::new(
                                    futures::stream::iter(frames),
                                )))
                                .unwrap()
                        };
                        Ok::<_, Infallible>(response)
                    },
                );
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
            });
        }
    });
    addr
}

/// One GET of `path` on a raw HTTP/2 connection (prior knowledge) to `addr`: the frames of
/// stream 1, as `(type, flags, payload)`, up to the one that ends it.
async fn frames_of(addr: SocketAddr, path: &str) -> Vec<(u8, u8, Vec<u8>)> {
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut out = Vec::new();
    out.extend_from_slice(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    out.extend_from_slice(&frame(4, 0, 0, &[])); // SETTINGS, empty
                                                 // HEADERS: :method GET (static 2), :scheme http (6), :path literal (name 4), :authority
                                                 // literal (name 1); no Huffman coding.
    let mut block = vec![0x82, 0x86];
    block.push(0x04);
    block.push(u8::try_from(path.len()).unwrap());
    block.extend_from_slice(path.as_bytes());
    block.push(0x01);
    block.push(9);
    block.extend_from_slice(b"localhost");
    out.extend_from_slice(&frame(HEADERS, END_STREAM | 0x4, 1, &block));
    conn.write_all(&out).await.unwrap();
    let mut frames = Vec::new();
    let read = async {
        loop {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head).await.unwrap();
            let len =
                (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
            let (kind, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.unwrap();
            if kind == 4 && flags & 1 == 0 {
                conn.write_all(&frame(4, 1, 0, &[])).await.unwrap(); // SETTINGS ACK
            }
            if stream == 1 {
                let ends = flags & END_STREAM != 0 && (kind == DATA || kind == HEADERS);
                frames.push((kind, flags, payload));
                if ends {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .expect("stream 1 ends");
    frames
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test]
async fn a_trailers_only_answer_stays_trailers_only_and_trailers_stay_trailers() {
    let upstream = grpc_like_upstream().await;
    for release in ["body", "headers"] {
        let (proxy, _) = proxy(&budget(
            "grpc",
            &format!("http://{upstream}"),
            &format!("max_concurrent = 2\nupstream_http2 = true\nrelease = \"{release}\""),
        ))
        .await;
        let addr = proxy.local_addr("grpc").unwrap();
        // Called directly, then through the proxy: the same frames.
        for target in [upstream, addr] {
            let frames = frames_of(target, "/trailers-only").await;
            assert_eq!(
                frames.len(),
                1,
                "release {release}, {target}: one HEADERS frame that ends the stream, got {:?}",
                frames.iter().map(|(k, f, _)| (k, f)).collect::<Vec<_>>()
            );
            let (kind, flags, block) = &frames[0];
            assert_eq!((*kind, flags & END_STREAM), (HEADERS, END_STREAM));
            assert!(!block.is_empty());
            let (status, headers, body) = get(&h2_client(), target, "/trailers-only").await;
            assert_eq!(
                (
                    status,
                    &headers["grpc-status"],
                    &headers["grpc-message"],
                    body.as_str()
                ),
                (
                    200,
                    &"8".parse::<hyper::header::HeaderValue>().unwrap(),
                    &"busy".parse::<hyper::header::HeaderValue>().unwrap(),
                    ""
                )
            );
            let frames = frames_of(target, "/call").await;
            let kinds: Vec<(u8, u8)> = frames
                .iter()
                .map(|(k, f, _)| (*k, f & END_STREAM))
                .collect();
            assert_eq!(
                kinds.first(),
                Some(&(HEADERS, 0)),
                "release {release}, {target}: {kinds:?}"
            );
            assert_eq!(
                kinds.last(),
                Some(&(HEADERS, END_STREAM)),
                "release {release}, {target}: the trailers end the stream: {kinds:?}"
            );
            assert!(kinds.iter().any(|k| k.0 == DATA));
        }
        // The permits went back.
        assert_eq!(proxy_in_flight(&proxy), 0.0);
    }
}

fn proxy_in_flight(proxy: &inflight_proxy::Proxy) -> f64 {
    crate::support::metrics(proxy)
        .get("inflight_budget_in_flight{budget=grpc}")
        .copied()
        .unwrap_or(0.0)
}
