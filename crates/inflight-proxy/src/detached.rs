//! [`Detached`]: the calls of a budget that go on without their client
//! (`on_client_gone = "finish"`), each in a task of its own, which a drain waits for and cuts
//! when its time runs out.

use std::future::Future;

use metrics::Counter;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The tasks of one route's calls that may outlive their client. Cloned, it is the same set.
#[derive(Clone)]
pub(crate) struct Detached {
    tasks: TaskTracker,
    cut: CancellationToken,
    /// The calls whose client left, counted as it leaves.
    without_client: Counter,
}

impl Detached {
    /// An empty set, counting in `without_client` the calls whose client leaves.
    pub(crate) fn new(without_client: Counter) -> Detached {
        Detached {
            tasks: TaskTracker::new(),
            cut: CancellationToken::new(),
            without_client,
        }
    }

    /// A call of the set goes on without its client from now.
    pub(crate) fn client_left(&self) {
        self.without_client.increment(1);
    }

    /// Runs `call` in a task of its own until it ends or the set is cut (then `None`, the call
    /// dropped: it counts as cancelled).
    pub(crate) fn spawn<F>(&self, call: F) -> JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks
            .spawn(self.cut.clone().run_until_cancelled_owned(call))
    }

    /// Returns once every task of the set has ended (tasks started meanwhile included).
    pub(crate) async fn ended(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Ends every task of the set now, and any started later at once.
    pub(crate) fn cut(&self) {
        self.cut.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_drain_waits_for_the_calls_and_cuts_what_is_left() {
        let detached = Detached::new(Counter::noop());
        let quick = detached.spawn(tokio::time::sleep(Duration::from_secs(1)));
        let slow = detached.spawn(tokio::time::sleep(Duration::from_secs(60)));
        let waited = tokio::time::timeout(Duration::from_secs(5), detached.ended()).await;
        assert!(waited.is_err(), "a call of 60 s ended within 5 s");
        assert_eq!(quick.await.unwrap(), Some(()));
        detached.cut();
        assert_eq!(slow.await.unwrap(), None);
        tokio::time::timeout(Duration::from_millis(1), detached.ended())
            .await
            .expect("every call ended once cut");
        let late = detached.spawn(tokio::time::sleep(Duration::from_secs(60)));
        assert_eq!(
            late.await.unwrap(),
            None,
            "a call started after the cut ran"
        );
    }
}
