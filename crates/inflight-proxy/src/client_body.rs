//! A request's body as it comes from the client ([`ClientBody`]): what the call reads to tell
//! a client's stall from an upstream's, written by whoever reads the body (the proxy's own
//! HTTP/1.1 client, or [`WatchedBody`](crate::upstream::WatchedBody) for hyper's).

use std::sync::atomic::{AtomicU8, Ordering};

/// The client's body is waited for now.
const WAITING: u8 = 1;
/// The client's body failed, or stopped coming for the proxy's `idle_timeout`.
const FAILED: u8 = 2;
/// The upstream's answer has begun: the body, if it still comes, is no longer watched for
/// stalls (a stream the client feeds at its own pace, as gRPC's are).
const ANSWERED: u8 = 4;

/// How a request's body comes from its client, shared by whoever reads it and the call.
#[derive(Debug, Default)]
pub(crate) struct ClientBody(AtomicU8);

impl ClientBody {
    /// Says whether the client's next frame is waited for now.
    pub(crate) fn set_waiting(&self, waiting: bool) {
        if waiting {
            self.0.fetch_or(WAITING, Ordering::AcqRel);
        } else {
            self.0.fetch_and(!WAITING, Ordering::AcqRel);
        }
    }

    /// Whether the call waits for its client's body now, before the upstream answered or after
    /// (a stream the client feeds): a call that times out then is not the upstream's doing
    /// alone, and teaches a limit nothing.
    pub(crate) fn owes_body(&self) -> bool {
        self.0.load(Ordering::Acquire) & WAITING != 0
    }

    /// Whether the client's body failed or stalled: what failed the request next (the
    /// upstream's stream reset for it, say) is the client's doing.
    pub(crate) fn failed(&self) -> bool {
        self.0.load(Ordering::Acquire) & FAILED != 0
    }

    /// The upstream's answer has begun.
    pub(crate) fn answered(&self) {
        self.0.fetch_or(ANSWERED, Ordering::AcqRel);
    }

    pub(crate) fn fail(&self) {
        self.0.fetch_or(FAILED, Ordering::AcqRel);
    }

    pub(crate) fn is_answered(&self) -> bool {
        self.0.load(Ordering::Acquire) & ANSWERED != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_owes_its_body_while_it_is_waited_for() {
        let sending = ClientBody::default();
        assert!(!sending.owes_body());
        sending.set_waiting(true);
        assert!(sending.owes_body());
        sending.set_waiting(false);
        assert!(!sending.owes_body());
        sending.set_waiting(true);
        sending.answered();
        assert!(
            sending.owes_body(),
            "a body still owed after the answer began"
        );
        assert!(!sending.failed());
        sending.fail();
        assert!(sending.failed());
    }
}
