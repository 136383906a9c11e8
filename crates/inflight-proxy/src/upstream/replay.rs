//! A request's body as it goes to an HTTP/2 upstream, kept so that the request can go again
//! if the upstream refuses its stream unprocessed (RFC 9113, 8.7: `REFUSED_STREAM`, or a
//! stream above the last one a GOAWAY names, as an upstream closing its connection after so
//! many requests sends).
//!
//! The frames already sent are kept (as `Bytes`, counted references, not copies) up to
//! [`REPLAY_LIMIT`] and 32 frames, until the upstream answers; when hyper drops the body (the stream ended, or was reset), what is left
//! of it goes back to the request ([`Replay::take`]): the frames sent, to send again first,
//! and the client's body still to read. A body past the limit cannot go again.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

/// How much of a body is kept to send again.
pub(crate) const REPLAY_LIMIT: usize = 64 * 1024;

/// How many frames of it at most: each kept frame holds the whole buffer it was read into.
const REPLAY_FRAMES: usize = 32;

/// How long a request waits for hyper to give its body back after its stream was refused
/// (the body's task ends as it sees the reset).
const GIVE_BACK_WAIT: Duration = Duration::from_secs(1);

/// The body of one sending of a request, whose leftovers go to its [`Replay`] when dropped.
pub(crate) struct Replayable<B> {
    /// Frames of an earlier sending, sent again first.
    again: VecDeque<Frame<Bytes>>,
    /// The client's body still to read; `None` once it ended.
    rest: Option<B>,
    /// Every frame this body gave, while they fit in [`REPLAY_LIMIT`].
    kept: Option<Vec<Frame<Bytes>>>,
    kept_bytes: usize,
    back: Arc<Replay<B>>,
}

/// Where a request's body goes back when hyper drops it.
pub(crate) struct Replay<B> {
    left: Mutex<Option<Left<B>>>,
    given: Notify,
    /// Set once the upstream answered: the body will not go again, so nothing more is kept
    /// (and what was is let go at the next frame).
    answered: AtomicBool,
}

/// What a dropped body leaves: the frames it gave (`None` past the limit), and the rest.
struct Left<B> {
    kept: Option<Vec<Frame<Bytes>>>,
    rest: Option<B>,
}

impl<B> Replay<B> {
    fn new() -> Arc<Replay<B>> {
        Arc::new(Replay {
            left: Mutex::new(None),
            given: Notify::new(),
            answered: AtomicBool::new(false),
        })
    }

    /// The upstream answered: the body will not be sent again.
    pub(crate) fn answered(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    /// The body to send again, once hyper gave the last one back: its frames first, then the
    /// rest of the client's. `None` if it gave more than [`REPLAY_LIMIT`], or was not given
    /// back in time.
    pub(crate) async fn take(self: &Arc<Self>) -> Option<Replayable<B>> {
        let left = tokio::time::timeout(GIVE_BACK_WAIT, async {
            loop {
                let given = self.given.notified();
                if let Some(left) = self
                    .left
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                {
                    return left;
                }
                given.await;
            }
        })
        .await
        .ok()?;
        let again = VecDeque::from(left.kept?);
        Some(Replayable {
            again,
            rest: left.rest,
            kept: Some(Vec::new()),
            kept_bytes: 0,
            back: Replay::new(),
        })
    }
}

impl<B> Replayable<B> {
    /// `body`, as it is first sent.
    pub(crate) fn new(body: B) -> Replayable<B> {
        Replayable {
            again: VecDeque::new(),
            rest: Some(body),
            kept: Some(Vec::new()),
            kept_bytes: 0,
            back: Replay::new(),
        }
    }

    /// A body that has ended (a request without one), as it is sent again.
    pub(crate) fn ended() -> Replayable<B> {
        Replayable {
            again: VecDeque::new(),
            rest: None,
            kept: Some(Vec::new()),
            kept_bytes: 0,
            back: Replay::new(),
        }
    }

    /// Where this body goes back once hyper drops it.
    pub(crate) fn replay(&self) -> Arc<Replay<B>> {
        self.back.clone()
    }

    /// Keeps a copy of `frame` (a counted reference to its bytes), while they fit.
    fn keep(&mut self, frame: &Frame<Bytes>) {
        if self.back.answered.load(Ordering::Relaxed) {
            self.kept = None;
        }
        let Some(kept) = &mut self.kept else {
            return;
        };
        let copy = if let Some(data) = frame.data_ref() {
            self.kept_bytes += data.len();
            Frame::data(data.clone())
        } else if let Some(trailers) = frame.trailers_ref() {
            Frame::trailers(trailers.clone())
        } else {
            return;
        };
        if self.kept_bytes > REPLAY_LIMIT || kept.len() == REPLAY_FRAMES {
            self.kept = None;
        } else {
            kept.push(copy);
        }
    }
}

impl<B> Drop for Replayable<B> {
    fn drop(&mut self) {
        // The frames not sent yet come first when it goes again.
        let mut kept = self.kept.take();
        if let Some(kept) = &mut kept {
            kept.extend(self.again.drain(..));
        }
        *self
            .back
            .left
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Left {
            kept,
            rest: self.rest.take(),
        });
        self.back.given.notify_one();
    }
}

impl<B> Body for Replayable<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.again.pop_front() {
            this.keep(&frame);
            return Poll::Ready(Some(Ok(frame)));
        }
        let Some(rest) = &mut this.rest else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(rest).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => this.keep(frame),
            Poll::Ready(None) => this.rest = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.again.is_empty() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let again: u64 = self
            .again
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + again);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + again);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full, StreamBody};

    #[tokio::test]
    async fn a_body_dropped_part_way_goes_again_whole() {
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"one "))),
            Ok(Frame::data(Bytes::from_static(b"two "))),
            Ok(Frame::data(Bytes::from_static(b"three"))),
        ];
        let mut first = Replayable::new(StreamBody::new(futures::stream::iter(frames)));
        let replay = first.replay();
        // The first sending takes one frame, then its stream is refused.
        let frame = first.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "one ");
        drop(first);
        let second = replay.take().await.expect("given back");
        let replay = second.replay();
        // The second takes it all.
        let whole = second.collect().await.unwrap().to_bytes();
        assert_eq!(whole, "one two three");
        // And could go a third time: the body was consumed, but it is all kept.
        let third = replay.take().await.expect("given back");
        assert_eq!(third.collect().await.unwrap().to_bytes(), "one two three");
    }

    #[tokio::test]
    async fn a_body_of_many_frames_or_one_answered_cannot_go_again() {
        let frames = (0..=REPLAY_FRAMES)
            .map(|_| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(b"x"))));
        let mut many = Replayable::new(StreamBody::new(futures::stream::iter(frames)));
        let replay = many.replay();
        while many.frame().await.is_some() {}
        drop(many);
        assert!(replay.take().await.is_none(), "more frames than kept");
        let mut answered = Replayable::new(Full::new(Bytes::from_static(b"small")));
        let replay = answered.replay();
        replay.answered();
        answered.frame().await.unwrap().unwrap();
        drop(answered);
        assert!(replay.take().await.is_none(), "nothing kept once answered");
    }

    #[tokio::test]
    async fn a_body_past_the_limit_cannot_go_again() {
        let big = Bytes::from(vec![b'x'; REPLAY_LIMIT + 1]);
        let mut first = Replayable::new(Full::new(big));
        let replay = first.replay();
        first.frame().await.unwrap().unwrap();
        drop(first);
        assert!(replay.take().await.is_none());
    }
}
