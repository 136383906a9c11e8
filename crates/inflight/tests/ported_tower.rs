//! tower's own limit tests (`tower/tests/limit/concurrency.rs` and `tower/tests/limit/rate.rs`,
//! tower-rs/tower at 8358ee7), ported to `BudgetLayer` around a budget with a fixed limit, and
//! with a rate where tower has one.
//!
//! tower drives its services with `tower_test::mock` and `tokio_test`; neither is a dependency
//! here, so `Mock` below is a small stand-in: every request that reaches the inner service is
//! sent to the test's `Handle`, which answers it (or not) by hand. Response futures are polled
//! by hand too (`Tracked`), with a waker that records whether it was woken, as
//! `tokio_test::task::Spawn::is_woken` does.
//!
//! Where tower's expectation rests on its permit being reserved in `poll_ready`, the port checks
//! the same property on the request instead (a response future that holds the permit), unless the
//! reservation itself is the property; those say so.
//!
//! Not ported as tower has it: `reserve_capacity_without_sending_request`, whose property is
//! the reservation in `poll_ready` itself. `BudgetService::poll_ready` is always ready and the
//! permit is taken by the response future (the tower module's docs: an idle keep-alive
//! connection holds nothing); the same property is checked on the request instead.
//!
//! Needs the `tower` and `rate` features: `cargo test -p inflight --features tower --test
//! ported_tower`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::{waker, ArcWake};
use inflight::tower::{BudgetError, BudgetLayer, BudgetService, DefaultClassifier};
use inflight::{AcquireError, Budget, BudgetConfig, Rate};
use tokio::sync::{mpsc, oneshot};
use tower::{Layer, Service};

type Req = &'static str;
type Resp = &'static str;
type Reply = oneshot::Sender<Result<Resp, String>>;

/// The inner service: each request goes to the [`Handle`], and its response is what the handle
/// sends back.
#[derive(Clone)]
struct Mock {
    requests: mpsc::UnboundedSender<(Req, Reply)>,
}

impl Service<Req> for Mock {
    type Response = Resp;
    type Error = String;
    type Future = Pin<Box<dyn Future<Output = Result<Resp, String>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), String>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let (tx, rx) = oneshot::channel();
        let _ = self.requests.send((req, tx));
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err("handle dropped".into())) })
    }
}

/// The test's side of [`Mock`]: the requests that reached the inner service.
struct Handle {
    requests: mpsc::UnboundedReceiver<(Req, Reply)>,
}

impl Handle {
    /// The next request that reached the inner service, if any did (`assert_request_eq!`).
    fn next_request(&mut self) -> Option<(Req, Reply)> {
        self.requests.try_recv().ok()
    }

    /// Asserts that `expected` is the next request to have reached the inner service.
    #[track_caller]
    fn expect(&mut self, expected: Req) -> Reply {
        let (req, reply) = self
            .next_request()
            .unwrap_or_else(|| panic!("{expected:?} did not reach the inner service"));
        assert_eq!(req, expected);
        reply
    }
}

type Svc = BudgetService<Mock, DefaultClassifier>;

fn spawn_layer(budget: &Budget) -> (Svc, Handle) {
    let (tx, rx) = mpsc::unbounded_channel();
    let svc = BudgetLayer::new(budget.clone()).layer(Mock { requests: tx });
    (svc, Handle { requests: rx })
}

fn fixed(limit: usize) -> Budget {
    Budget::new("tower-port", BudgetConfig::new(limit)).unwrap()
}

/// Records whether its waker was woken since the last poll.
#[derive(Default)]
struct Woken(AtomicBool);

impl ArcWake for Woken {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        arc_self.0.store(true, SeqCst);
    }
}

/// A future polled by hand, as `tokio_test::task::spawn` does.
struct Tracked<F> {
    fut: Pin<Box<F>>,
    woken: Arc<Woken>,
}

impl<F: Future> Tracked<F> {
    fn new(fut: F) -> Tracked<F> {
        Tracked {
            fut: Box::pin(fut),
            woken: Arc::default(),
        }
    }

    fn poll(&mut self) -> Poll<F::Output> {
        self.woken.0.store(false, SeqCst);
        let w = waker(self.woken.clone());
        self.fut.as_mut().poll(&mut Context::from_waker(&w))
    }

    fn is_woken(&self) -> bool {
        self.woken.0.load(SeqCst)
    }

    #[track_caller]
    fn pending(&mut self) {
        assert!(self.poll().is_pending(), "expected pending");
    }

    #[track_caller]
    fn ready(&mut self) -> F::Output {
        match self.poll() {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("expected ready"),
        }
    }
}

type Call = Tracked<<Svc as Service<Req>>::Future>;

#[track_caller]
fn poll_ready_ok(svc: &mut Svc) {
    let w = waker(Arc::new(Woken::default()));
    match svc.poll_ready(&mut Context::from_waker(&w)) {
        Poll::Ready(Ok(())) => {}
        Poll::Ready(Err(e)) => panic!("poll_ready failed: {e}"),
        Poll::Pending => panic!("poll_ready pending"),
    }
}

fn call(svc: &mut Svc, req: Req) -> Call {
    Tracked::new(svc.call(req))
}

/// Lets the runtime's other tasks run, without moving paused time.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

// ---------------------------------------------------------------------------------------------
// tower/tests/limit/concurrency.rs
// ---------------------------------------------------------------------------------------------

/// Ports `basic_service_limit_functionality_with_poll_ready`: a limit of 2 lets two requests
/// reach the inner service, the third waits, is woken when the first response comes back, and
/// goes through then.
#[tokio::test(start_paused = true)]
async fn basic_service_limit_functionality_with_poll_ready() {
    let budget = fixed(2);
    let (mut service, mut handle) = spawn_layer(&budget);

    poll_ready_ok(&mut service);
    let mut r1 = call(&mut service, "hello 1");
    poll_ready_ok(&mut service);
    let mut r2 = call(&mut service, "hello 2");
    r1.pending();
    r2.pending();
    let mut r3 = call(&mut service, "hello 3");
    r3.pending();
    assert!(!r3.is_woken());

    handle.expect("hello 1").send(Ok("world 1")).unwrap();
    handle.expect("hello 2").send(Ok("world 2")).unwrap();
    assert!(handle.next_request().is_none(), "a third request got in");

    assert_eq!(r1.ready().unwrap(), "world 1");
    assert!(r3.is_woken(), "the waiter was not woken by the response");
    r3.pending(); // it reaches the inner service now
    let reply3 = handle.expect("hello 3");
    let mut r4 = call(&mut service, "hello 4");
    r4.pending();
    assert!(handle.next_request().is_none(), "a fourth request got in");

    assert_eq!(r2.ready().unwrap(), "world 2");
    r4.pending();
    handle.expect("hello 4").send(Ok("world 4")).unwrap();
    reply3.send(Ok("world 3")).unwrap();
    assert_eq!(r3.ready().unwrap(), "world 3");
    assert_eq!(r4.ready().unwrap(), "world 4");
    assert_eq!(budget.snapshot().peak_in_flight, 2);
}

/// Ports `basic_service_limit_functionality_without_poll_ready`: the same without relying on
/// readiness, and the waiter is not woken by a request merely reaching the inner service (only
/// by a permit coming back).
#[tokio::test(start_paused = true)]
async fn basic_service_limit_functionality_without_poll_ready() {
    let budget = fixed(2);
    let (mut service, mut handle) = spawn_layer(&budget);

    let mut r1 = call(&mut service, "hello 1");
    let mut r2 = call(&mut service, "hello 2");
    let mut r4 = call(&mut service, "hello 4");
    r1.pending();
    r2.pending();
    r4.pending();

    handle.expect("hello 1").send(Ok("world 1")).unwrap();
    assert!(!r4.is_woken());
    handle.expect("hello 2").send(Ok("world 2")).unwrap();
    assert!(!r4.is_woken());
    assert!(handle.next_request().is_none());

    assert_eq!(r1.ready().unwrap(), "world 1");
    assert!(r4.is_woken());
    r4.pending();
    let reply4 = handle.expect("hello 4");
    assert_eq!(r2.ready().unwrap(), "world 2");
    reply4.send(Ok("world 4")).unwrap();
    assert_eq!(r4.ready().unwrap(), "world 4");
}

/// Ports `request_without_capacity`: tower's limit of 0 is never ready. A budget of 0 cannot be
/// built at all, and says which field is wrong.
#[test]
fn request_without_capacity() {
    let err = Budget::new("tower-port", BudgetConfig::new(0)).unwrap_err();
    assert_eq!(err.field(), "max_concurrent");
}

/// Ports `reserve_capacity_without_sending_request` on the request rather than on `poll_ready`:
/// while one clone's request holds the only permit, another clone's request does not reach the
/// inner service, and does once the first has been answered.
#[tokio::test(start_paused = true)]
async fn reserve_capacity_held_by_a_request_in_another_clone() {
    let budget = fixed(1);
    let (mut s1, mut handle) = spawn_layer(&budget);
    let mut s2 = s1.clone();

    let mut r1 = call(&mut s1, "hello");
    r1.pending();
    let mut r2 = call(&mut s2, "two");
    r2.pending();
    let reply = handle.expect("hello");
    assert!(handle.next_request().is_none());
    reply.send(Ok("world")).unwrap();
    assert!(
        handle.next_request().is_none(),
        "in before the response came back"
    );
    assert_eq!(r1.ready().unwrap(), "world");
    r2.pending();
    handle.expect("two").send(Ok("done")).unwrap();
    assert_eq!(r2.ready().unwrap(), "done");
}

/// Ports `service_drop_frees_capacity`: dropping a clone that was told it is ready frees
/// whatever it reserved, and wakes the clone that waits.
#[tokio::test(start_paused = true)]
async fn service_drop_frees_capacity() {
    let budget = fixed(1);
    let (mut s1, mut handle) = spawn_layer(&budget);
    let mut s2 = s1.clone();

    poll_ready_ok(&mut s1);
    drop(s1);
    poll_ready_ok(&mut s2);
    let mut r2 = call(&mut s2, "hello");
    r2.pending();
    handle.expect("hello").send(Ok("world")).unwrap();
    assert_eq!(r2.ready().unwrap(), "world");
    assert_eq!(budget.in_flight(), 0);
}

/// Ports `response_error_releases_capacity`: an error from the inner service gives the permit
/// back.
#[tokio::test(start_paused = true)]
async fn response_error_releases_capacity() {
    let budget = fixed(1);
    let (mut s1, mut handle) = spawn_layer(&budget);
    let mut s2 = s1.clone();

    let mut r1 = call(&mut s1, "hello");
    r1.pending();
    handle.expect("hello").send(Err("boom".into())).unwrap();
    match r1.ready() {
        Err(BudgetError::Inner(e)) => assert_eq!(e, "boom"),
        other => panic!("{other:?}"),
    }
    assert_eq!(budget.in_flight(), 0);
    let mut r2 = call(&mut s2, "again");
    r2.pending();
    handle.expect("again").send(Ok("ok")).unwrap();
    assert_eq!(r2.ready().unwrap(), "ok");
}

/// Ports `response_future_drop_releases_capacity`: dropping a response future that holds the
/// permit (its request in the inner service) gives the permit back, to the request waiting.
#[tokio::test(start_paused = true)]
async fn response_future_drop_releases_capacity() {
    let budget = fixed(1);
    let (mut s1, mut handle) = spawn_layer(&budget);
    let mut s2 = s1.clone();

    let mut r1 = call(&mut s1, "hello");
    r1.pending();
    let _reply1 = handle.expect("hello");
    let mut r2 = call(&mut s2, "two");
    r2.pending();
    assert!(handle.next_request().is_none());

    drop(r1);
    assert!(
        r2.is_woken(),
        "the waiter was not woken when the holder was dropped"
    );
    r2.pending();
    handle.expect("two").send(Ok("done")).unwrap();
    assert_eq!(r2.ready().unwrap(), "done");
    let s = budget.snapshot();
    assert_eq!((s.in_flight, s.calls_cancelled), (0, 1));
}

/// Ports `response_future_drop_releases_capacity` for a response future dropped before it was
/// ever polled: it held nothing, and the next request goes straight in.
#[tokio::test(start_paused = true)]
async fn response_future_dropped_unpolled_holds_nothing() {
    let budget = fixed(1);
    let (mut s1, mut handle) = spawn_layer(&budget);
    let mut s2 = s1.clone();

    let r1 = call(&mut s1, "hello");
    drop(r1);
    let mut r2 = call(&mut s2, "two");
    r2.pending();
    handle.expect("two").send(Ok("done")).unwrap();
    assert_eq!(r2.ready().unwrap(), "done");
    assert!(
        handle.next_request().is_none(),
        "the dropped request was sent"
    );
}

/// Ports `multi_waiters`: when the permit comes back only the first waiter is woken, and the
/// next one when that one gives it back: no thundering herd, in arrival order.
#[tokio::test(start_paused = true)]
async fn multi_waiters() {
    let budget = fixed(1);
    let (mut s1, mut handle) = spawn_layer(&budget);
    let mut s2 = s1.clone();
    let mut s3 = s1.clone();

    let mut r1 = call(&mut s1, "one");
    r1.pending();
    let _reply1 = handle.expect("one");
    let mut r2 = call(&mut s2, "two");
    let mut r3 = call(&mut s3, "three");
    r2.pending();
    r3.pending();

    drop(r1);
    assert!(r2.is_woken());
    assert!(!r3.is_woken());

    drop(r2);
    assert!(r3.is_woken());
    r3.pending();
    handle.expect("three").send(Ok("3")).unwrap();
    assert_eq!(r3.ready().unwrap(), "3");
    assert!(
        handle.next_request().is_none(),
        "two was sent though dropped"
    );
    assert_eq!(budget.in_flight(), 0);
}

/// Ports `multi_waiters` with the middle waiter dropped while it still waits: the permit's
/// turn passes over it to the next, and nothing is lost.
#[tokio::test(start_paused = true)]
async fn multi_waiters_a_cancelled_waiter_passes_its_turn() {
    let budget = fixed(1);
    let (mut s1, mut handle) = spawn_layer(&budget);
    let mut s2 = s1.clone();
    let mut s3 = s1.clone();

    let mut r1 = call(&mut s1, "one");
    r1.pending();
    let _reply1 = handle.expect("one");
    let mut r2 = call(&mut s2, "two");
    let mut r3 = call(&mut s3, "three");
    r2.pending();
    r3.pending();
    drop(r2);
    assert!(!r3.is_woken());
    drop(r1);
    assert!(r3.is_woken());
    r3.pending();
    handle.expect("three").send(Ok("3")).unwrap();
    assert_eq!(r3.ready().unwrap(), "3");
    let s = budget.snapshot();
    assert_eq!((s.in_flight, s.waiting, s.cancelled), (0, 0, 1));
    assert_eq!(budget.available_permits(), 1);
}

/// Ports `response_future_drop_releases_capacity` for a request waiting for its rate turn:
/// dropped, it gives back its permit and its turn, so the next request takes that turn.
#[tokio::test(start_paused = true)]
async fn response_future_drop_gives_back_its_rate_turn() {
    let budget = Budget::new(
        "tower-port",
        BudgetConfig::new(1).rate(Rate::per_second(10.0)),
    )
    .unwrap();
    let (mut s1, mut handle) = spawn_layer(&budget);
    let mut s2 = s1.clone();
    let mut r1 = call(&mut s1, "one");
    r1.pending();
    handle.expect("one").send(Ok("1")).unwrap();
    r1.ready().unwrap();
    let mut r2 = call(&mut s1, "two");
    r2.pending(); // holds the permit, waits for the turn at 100 ms
    tokio::time::advance(Duration::from_millis(50)).await;
    drop(r2);
    let mut r3 = call(&mut s2, "three");
    r3.pending();
    assert!(handle.next_request().is_none());
    tokio::time::advance(Duration::from_millis(50)).await;
    settle().await;
    r3.pending();
    handle.expect("three").send(Ok("3")).unwrap();
    assert_eq!(r3.ready().unwrap(), "3");
    assert!(handle.next_request().is_none());
}

// ---------------------------------------------------------------------------------------------
// tower/tests/limit/rate.rs
// ---------------------------------------------------------------------------------------------

fn rated(rate: Rate, burst: u32) -> Budget {
    Budget::new("tower-port", BudgetConfig::new(64).rate(rate).burst(burst)).unwrap()
}

/// Ports `reaching_capacity`: one request per 100 ms. The first goes through at once; the next
/// does not reach the inner service before 100 ms have passed, and does after.
#[tokio::test(start_paused = true)]
async fn reaching_capacity() {
    let budget = rated(Rate::per_second(10.0), 1);
    let (mut service, mut handle) = spawn_layer(&budget);

    let mut r1 = call(&mut service, "hello");
    r1.pending();
    handle.expect("hello").send(Ok("world")).unwrap();
    assert_eq!(r1.ready().unwrap(), "world");

    let mut r2 = call(&mut service, "two");
    r2.pending();
    assert!(handle.next_request().is_none(), "sent within the 100 ms");
    tokio::time::advance(Duration::from_millis(99)).await;
    r2.pending();
    assert!(handle.next_request().is_none(), "sent within the 100 ms");
    tokio::time::advance(Duration::from_millis(2)).await;
    settle().await;
    r2.pending();
    handle.expect("two").send(Ok("done")).unwrap();
    assert_eq!(r2.ready().unwrap(), "done");
}

/// Ports `remaining_gets_reset`: 3 requests per 100 ms (here a rate of 30/s with a burst of 3).
/// After one request and a quiet 100 ms, the whole allowance is back: three more go through at
/// once, nothing is carried over from before the quiet spell.
#[tokio::test(start_paused = true)]
async fn remaining_gets_reset() {
    let budget = rated(Rate::per_second(30.0), 3);
    let (mut service, mut handle) = spawn_layer(&budget);

    let mut r = call(&mut service, "hello");
    r.pending();
    handle.expect("hello").send(Ok("world")).unwrap();
    assert_eq!(r.ready().unwrap(), "world");

    tokio::time::advance(Duration::from_millis(100)).await;

    for _ in 0..3 {
        let mut r = call(&mut service, "hello");
        r.pending();
        handle.expect("hello").send(Ok("world")).unwrap();
        assert_eq!(r.ready().unwrap(), "world");
    }
    // And the fourth within the same instant waits for its turn.
    let mut r = call(&mut service, "fourth");
    r.pending();
    assert!(handle.next_request().is_none());
}

/// Ports `reaching_capacity` with a permit deadline: a request whose rate turn would come after
/// its deadline is refused at once (tower would leave it pending), and says when to come back.
#[tokio::test(start_paused = true)]
async fn reaching_capacity_with_a_deadline_refuses_at_once() {
    let budget = Budget::new(
        "tower-port",
        BudgetConfig::new(64)
            .rate(Rate::per_second(10.0))
            .permit_timeout(Duration::from_millis(50)),
    )
    .unwrap();
    let (mut service, mut handle) = spawn_layer(&budget);
    let mut r1 = call(&mut service, "hello");
    r1.pending();
    handle.expect("hello").send(Ok("world")).unwrap();
    r1.ready().unwrap();
    let mut r2 = call(&mut service, "two");
    match r2.ready() {
        Err(BudgetError::Rejected(AcquireError::RateLimited { retry_after })) => {
            assert_eq!(retry_after, Duration::from_millis(100));
        }
        other => panic!("{other:?}"),
    }
    assert!(handle.next_request().is_none());
}
