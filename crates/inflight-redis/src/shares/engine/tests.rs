//! The share engine against the in-memory server on paused time: the split, the limit under
//! moving demand, expiry of a process cut off, the cost in reports, and the fail policies.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use futures::future::BoxFuture;
use inflight::{AcquireError, Budget};

use super::*;
use crate::fake::Shared;
use crate::grants::Grants;
use crate::server::{Acquired, Fence, Renewed, Seen, ShareReply, Terms};
use crate::shares::ShareStore;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const LEASE: Duration = Duration::from_millis(600);

fn store(server: Arc<dyn Server>, limit: usize, fail: Fail) -> ShareStore {
    ShareStore::from_engine(ShareEngine::new(
        server,
        Settings {
            limit,
            lease: LEASE,
            fail,
            op_timeout: ms(100),
            retry_after: ms(200),
            min_gap: ms(2),
        },
    ))
}

fn budget(store: &ShareStore, local: usize) -> Budget {
    Budget::builder("search")
        .max_concurrent(local)
        .permit_timeout(ms(60_000))
        .store(Arc::new(store.clone()))
        .build()
        .unwrap()
}

/// What the dependency sees: calls in service now, and the most at once.
#[derive(Default)]
struct Dependency {
    now: AtomicUsize,
    peak: AtomicUsize,
    calls: AtomicUsize,
}

impl Dependency {
    async fn serve(&self, took: Duration) {
        let n = self.now.fetch_add(1, Relaxed) + 1;
        self.peak.fetch_max(n, Relaxed);
        self.calls.fetch_add(1, Relaxed);
        tokio::time::sleep(took).await;
        self.now.fetch_sub(1, Relaxed);
    }
}

/// `tasks` callers that call the dependency through `budget` back to back until `stop`.
fn callers(
    budget: &Budget,
    tasks: usize,
    dependency: &Arc<Dependency>,
    stop: &Arc<tokio::sync::Notify>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..tasks)
        .map(|_| {
            let (budget, dependency, stop) = (budget.clone(), dependency.clone(), stop.clone());
            tokio::spawn(async move {
                let stopped = stop.notified();
                tokio::pin!(stopped);
                loop {
                    tokio::select! {
                        () = &mut stopped => return,
                        permit = budget.acquire() => {
                            let Ok(_permit) = permit else { return };
                            dependency.serve(ms(5)).await;
                        }
                    }
                }
            })
        })
        .collect()
}

/// A server that one process alone can lose: while `cut`, its calls never answer, as for a
/// process killed or stalled, while the others go on. It counts that process's reports, and
/// can answer its next one as the server answers a turn taken while others wait (`turn`: a
/// base of 0, and the term's end).
#[derive(Debug, Clone, Default)]
struct Cut {
    server: Shared,
    cut: Arc<AtomicBool>,
    reports: Arc<AtomicUsize>,
    turn: Arc<Mutex<Option<Duration>>>,
}

impl Server for Cut {
    fn acquire(
        &self,
        b: &str,
        id: &str,
        first: bool,
        t: Terms,
        seen: Seen,
        releasing: Vec<Arc<str>>,
    ) -> BoxFuture<'static, Result<Acquired, ServerError>> {
        self.server.acquire(b, id, first, t, seen, releasing)
    }
    fn renew(
        &self,
        b: &str,
        ids: Vec<Arc<str>>,
        locals: Vec<Arc<str>>,
        t: Terms,
        seen: Seen,
    ) -> BoxFuture<'static, Result<Renewed, ServerError>> {
        self.server.renew(b, ids, locals, t, seen)
    }
    fn release(
        &self,
        b: &str,
        ids: Vec<Arc<str>>,
        t: Terms,
        seen: Seen,
    ) -> BoxFuture<'static, Result<(u64, Fence), ServerError>> {
        self.server.release(b, ids, t, seen)
    }
    fn release_blocking(
        &self,
        b: &str,
        ids: &[Arc<str>],
        t: Terms,
        seen: Seen,
        timeout: Duration,
    ) -> Result<u64, ServerError> {
        self.server.release_blocking(b, ids, t, seen, timeout)
    }
    fn gcra(
        &self,
        n: &str,
        i: Duration,
        b: u32,
    ) -> BoxFuture<'static, Result<Result<(), Duration>, ServerError>> {
        self.server.gcra(n, i, b)
    }
    fn reserve_rate(
        &self,
        n: &str,
        i: Duration,
        b: u32,
        max_wait: Duration,
    ) -> BoxFuture<'static, Result<Result<Duration, Duration>, ServerError>> {
        self.server.reserve_rate(n, i, b, max_wait)
    }
    fn shares(
        &self,
        b: &str,
        report: ShareReport,
    ) -> BoxFuture<'static, Result<ShareReply, ServerError>> {
        if self.cut.load(Relaxed) {
            return Box::pin(std::future::pending());
        }
        self.reports.fetch_add(1, Relaxed);
        let turn = self.turn.lock().unwrap().take();
        let reply = self.server.shares(b, report);
        Box::pin(async move {
            let mut reply = reply.await?;
            if let Some(term) = turn {
                reply.target = 0;
                reply.recheck = Some(term);
            }
            Ok(reply)
        })
    }
    fn lease_id(&self) -> Arc<str> {
        self.server.lease_id()
    }
    fn grants(&self) -> Arc<Grants> {
        self.server.grants()
    }
    fn address(&self) -> &str {
        self.server.address()
    }
}

/// `n` permits of `budget` at once, each held until dropped.
async fn permits(budget: &Budget, n: usize) -> Vec<inflight::OwnedPermit> {
    futures::future::join_all((0..n).map(|_| budget.acquire_owned()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// Whether every one of `permits` was admitted by the local fallback.
fn all_local(permits: &[inflight::OwnedPermit]) -> bool {
    permits
        .iter()
        .all(|p| crate::fallback::Fallback::gave(p.lease().unwrap()))
}

fn reserved(server: &Shared) -> usize {
    server.0.shares_held("search").values().sum()
}

#[tokio::test(start_paused = true)]
async fn wants_of_100_and_900_of_512_get_100_and_412() {
    let server = Shared::default();
    let dependency = Arc::new(Dependency::default());
    let stop = Arc::new(tokio::sync::Notify::new());
    let (small, large) = (
        store(Arc::new(server.clone()), 512, Fail::Closed),
        store(Arc::new(server.clone()), 512, Fail::Closed),
    );
    let mut tasks = callers(&budget(&small, 100), 100, &dependency, &stop);
    tasks.extend(callers(&budget(&large, 900), 900, &dependency, &stop));
    tokio::time::sleep(ms(2000)).await;
    let (s, l) = (small.snapshot(), large.snapshot());
    assert_eq!((s.target, l.target), (100, 412));
    assert_eq!((s.share, l.share), (100, 412));
    assert_eq!(dependency.now.load(Relaxed), 512, "the whole limit in use");
    assert!(dependency.peak.load(Relaxed) <= 512);
    assert!(reserved(&server) <= 512);
    stop.notify_waiters();
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn the_limit_holds_at_the_dependency_while_processes_join_leave_and_are_cut_off() {
    let server = Shared::default();
    let dependency = Arc::new(Dependency::default());
    let cut = Arc::new(AtomicBool::new(false));
    let limit = 96;
    let mut stores = Vec::new();
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    // Watches the dependency and the server's reservations every millisecond.
    let watch = tokio::spawn({
        let (server, dependency) = (server.clone(), dependency.clone());
        async move {
            let mut worst = (0, 0);
            for _ in 0..6000 {
                worst.0 = worst.0.max(dependency.now.load(Relaxed));
                worst.1 = worst.1.max(reserved(&server));
                tokio::time::sleep(ms(1)).await;
            }
            worst
        }
    });
    for n in 0..6 {
        let server: Arc<dyn Server> = if n == 0 {
            Arc::new(Cut {
                server: server.clone(),
                cut: cut.clone(),
                ..Cut::default()
            })
        } else {
            Arc::new(server.clone())
        };
        let s = store(server, limit, Fail::Closed);
        let stop = Arc::new(tokio::sync::Notify::new());
        // Demand moves: 10, 30, 50, ... callers, arriving 150 ms apart.
        tasks.extend(callers(&budget(&s, 64), 10 + 20 * n, &dependency, &stop));
        stores.push(s);
        stops.push(stop);
        tokio::time::sleep(ms(150)).await;
    }
    tokio::time::sleep(ms(1000)).await;
    assert!(
        dependency.now.load(Relaxed) >= limit * 95 / 100,
        "the limit is in use"
    );
    // One leaves with a shutdown, one just stops calling, and the first is cut off from
    // Redis with its calls running.
    stores[3].shutdown().await;
    stops[4].notify_waiters();
    cut.store(true, Relaxed);
    let cut_share = stores[0].snapshot().share;
    assert!(cut_share > 0);
    tokio::time::sleep(LEASE + ms(100)).await;
    assert_eq!(stores[0].snapshot().share, 0, "a share not renewed ends");
    assert!(stores[0].snapshot().lost > 0, "its running calls were told");
    tokio::time::sleep(ms(1000)).await;
    assert!(
        !server.0.shares_held("search").is_empty() && reserved(&server) <= limit,
        "the others took up the freed shares"
    );
    assert!(
        dependency.now.load(Relaxed) >= limit * 9 / 10,
        "the freed shares are in use"
    );
    let (peak, most_reserved) = watch.await.unwrap();
    assert!(peak <= limit, "{peak} calls at once at the dependency");
    assert!(most_reserved <= limit, "{most_reserved} reserved");
    for stop in stops {
        stop.notify_waiters();
    }
    for task in tasks {
        task.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn reports_follow_the_moves_of_the_shares_not_the_calls() {
    let server = Shared::default();
    let dependency = Arc::new(Dependency::default());
    let stop = Arc::new(tokio::sync::Notify::new());
    let stores: Vec<_> = (0..4)
        .map(|_| store(Arc::new(server.clone()), 64, Fail::Closed))
        .collect();
    let mut tasks = Vec::new();
    for s in &stores {
        tasks.extend(callers(&budget(s, 24), 24, &dependency, &stop));
    }
    tokio::time::sleep(ms(1000)).await;
    let (calls, asked) = (dependency.calls.load(Relaxed), server.0.calls.load(Relaxed));
    tokio::time::sleep(ms(6000)).await;
    let calls = dependency.calls.load(Relaxed) - calls;
    let asked = server.0.calls.load(Relaxed) - asked;
    // Steady demand: renewals only, one per process per third of a lease (4 × 30 in 6 s),
    // and none for the calls.
    assert!(calls > 60_000, "{calls} calls");
    assert!(asked <= 4 * 30 + 4, "{asked} reports for {calls} calls");
    assert_eq!(stores.iter().map(|s| s.snapshot().share).sum::<usize>(), 64);
    stop.notify_waiters();
    for task in tasks {
        task.await.unwrap();
    }
}

/// At the end of a turn's term (others waited at the answer), the permit beyond the base goes
/// back as its call ends, without a report first: one report, when the call has ended, gives
/// it back. (Before, a report at the term's end asked whether others still waited, and a second
/// gave the permit back.)
#[tokio::test(start_paused = true)]
async fn a_turn_ends_at_its_term_without_asking_and_one_report_gives_it_back() {
    let cut = Cut::default();
    *cut.turn.lock().unwrap() = Some(ms(50));
    let a = store(Arc::new(cut.clone()), 1, Fail::Closed);
    let records = budget(&a, 1);
    let held = records.acquire().await.unwrap();
    let reports = cut.reports.load(Relaxed);
    assert_eq!(a.snapshot().share, 1, "its turn");
    tokio::time::sleep(ms(60)).await;
    assert_eq!(
        a.snapshot().share,
        0,
        "the term is over: nothing more is admitted"
    );
    assert_eq!(cut.reports.load(Relaxed), reports, "and nothing asked");
    drop(held);
    tokio::time::sleep(ms(10)).await;
    assert_eq!(
        cut.reports.load(Relaxed),
        reports + 1,
        "the call ended: given back"
    );
    assert_eq!(
        a.snapshot().reserved,
        1,
        "no turn this time: taken again at once"
    );
}

/// A process's first call costs one report: the call's own ask for a share is answered by the
/// reporter's first report, not by a second one after it (which of the two wakes the reporter
/// heard first was chance: 16 processes).
#[tokio::test(start_paused = true)]
async fn a_first_call_costs_one_report() {
    let cut = Cut::default();
    let mut held = Vec::new();
    for _ in 0..16 {
        let records = budget(&store(Arc::new(cut.clone()), 64, Fail::Closed), 4);
        held.push(records.acquire_owned().await.unwrap());
    }
    tokio::time::sleep(ms(50)).await;
    assert_eq!(cut.reports.load(Relaxed), 16);
}

/// Two processes on a budget of 1 through one server: a's caller holds the permit, and b's
/// (whose reports `Cut` counts) waits for it; 20 ms on, when both have reported.
async fn one_holds_one_waits() -> (
    Cut,
    ShareStore,
    inflight::OwnedPermit,
    tokio::task::JoinHandle<Result<(), AcquireError>>,
) {
    let cut = Cut::default();
    let a = store(Arc::new(cut.server.clone()), 1, Fail::Closed);
    let b = store(Arc::new(cut.clone()), 1, Fail::Closed);
    let held = budget(&a, 1).acquire_owned().await.unwrap();
    let second = budget(&b, 1);
    let waiter = tokio::spawn(async move { second.acquire_owned().await.map(drop) });
    tokio::time::sleep(ms(20)).await;
    (cut, b, held, waiter)
}

/// A version of the budget's state newer than any answer the tests' processes hear.
const NEWEST: u64 = u64::MAX / 2;

/// Tells process `b`, on `cut`'s grants channel, that another's report handed it a turn at the
/// budget's state `version` (in its epoch now): it holds 1, and its term ends in `term_ms`
/// (0: no end).
fn hand_turn(cut: &Cut, b: &ShareStore, version: u64, term_ms: u64) {
    let (process, epoch) = (b.engine.process.clone(), b.snapshot().epoch);
    cut.grants()
        .grant(&format!("{process}@{epoch}.{version}+1.{term_ms}"));
}

/// A process that holds nothing and only waits for a turn (its base share is 0) renews its place
/// every two leases, not every third of one: the server keeps its entry three leases, and it
/// holds nothing that could outlive it.
#[tokio::test(start_paused = true)]
async fn a_process_that_only_waits_for_a_turn_renews_every_two_leases() {
    let (cut, b, held, waiter) = one_holds_one_waits().await;
    tokio::time::sleep(ms(80)).await;
    let reports = cut.reports.load(Relaxed);
    tokio::time::sleep(LEASE * 6).await;
    let renewals = cut.reports.load(Relaxed) - reports;
    assert_eq!(renewals, 3, "{renewals} renewals in six leases");
    assert_eq!(b.snapshot().reserved, 0);
    drop(held);
    tokio::time::timeout(LEASE, waiter)
        .await
        .expect("a's share expires or goes back, and b takes it")
        .unwrap()
        .unwrap();
}

/// A turn handed over on the grants channel (another process's report gave a permit back and
/// handed it to this one, the head of the turns) is taken without a report: the waiting caller
/// gets in at once. One told at a state before the process's last answer is not taken.
#[tokio::test(start_paused = true)]
async fn a_turn_handed_over_is_taken_without_a_report() {
    let (cut, b, held, mut waiter) = one_holds_one_waits().await;
    let reports = cut.reports.load(Relaxed);
    hand_turn(&cut, &b, 0, 50);
    tokio::time::sleep(ms(10)).await;
    assert!(
        !waiter.is_finished(),
        "a turn from before the last answer is not taken"
    );
    hand_turn(&cut, &b, NEWEST, 50);
    tokio::time::timeout(ms(10), &mut waiter)
        .await
        .expect("the turn is taken at once")
        .unwrap()
        .unwrap();
    assert_eq!(cut.reports.load(Relaxed), reports, "without a report");
    assert_eq!(b.snapshot().reserved, 1);
    drop(held);
}

/// A turn handed over with no end renews two thirds of a lease after it was taken at the latest,
/// though the waiter's entry it was handed to lasts three leases: a holder reports within a
/// lease, as the budget's learning after a loss of state needs.
#[tokio::test(start_paused = true)]
async fn a_turn_handed_over_renews_within_two_thirds_of_a_lease_of_being_taken() {
    let (cut, b, held, mut waiter) = one_holds_one_waits().await;
    tokio::time::sleep(ms(300)).await;
    let reports = cut.reports.load(Relaxed);
    hand_turn(&cut, &b, NEWEST, 0);
    tokio::time::timeout(ms(10), &mut waiter)
        .await
        .expect("the turn is taken at once")
        .unwrap()
        .unwrap();
    tokio::time::sleep(LEASE * 2 / 3 + ms(20)).await;
    assert!(cut.reports.load(Relaxed) > reports, "renewed");
    drop(held);
}

/// A report that gets no answer may still have been applied, and may have made the entry a
/// holder's (one lease) where it was a waiter's (three): from when it leaves, the share is only
/// known to last a lease, and a turn taken after it ends on this clock then, Redis silent.
#[tokio::test(start_paused = true)]
async fn a_report_without_an_answer_leaves_the_share_a_lease_at_most() {
    let (cut, b, held, waiter) = one_holds_one_waits().await;
    drop(waiter);
    // Redis answers late from now on: a caller's report is applied, and its answer times out.
    cut.server.0.delay_ms.store(10_000, Relaxed);
    let second = budget(&b, 2);
    let asked = Instant::now();
    let refused = second.acquire_owned().await;
    assert!(refused.is_err(), "no answer: refused (fail closed)");
    tokio::time::sleep(ms(50)).await;
    // A turn handed over now is taken (newer than every answer heard)...
    hand_turn(&cut, &b, NEWEST, 0);
    tokio::time::sleep(ms(5)).await;
    assert_eq!(b.snapshot().share, 1, "taken");
    let permit = tokio::time::timeout(ms(10), second.acquire_owned())
        .await
        .expect("the turn is taken")
        .unwrap();
    // ...and ends a lease after the unanswered report left, not three after the last answer.
    tokio::time::sleep_until(asked + LEASE + ms(20)).await;
    assert!(
        permit.lease().unwrap().is_lost(),
        "the share ended on this clock"
    );
    assert_eq!(b.snapshot().share, 0);
    drop(held);
}

/// A turn is taken only if it is newer than every answer the process heard, applied or not: an
/// answer from later came from a report of its own that ran after the turn was handed and said
/// what it ran without it (the server gave the turn on unless that report had not seen it).
#[tokio::test(start_paused = true)]
async fn a_turn_older_than_an_answer_heard_is_not_taken() {
    let (cut, b, held, waiter) = one_holds_one_waits().await;
    // An answer not applied (a late duplicate's) was heard from a later state than the last
    // applied one.
    let answered = {
        let mut state = b.engine.lock();
        state.seen.version = state.answered.version + 10;
        state.answered.version
    };
    hand_turn(&cut, &b, answered + 5, 50);
    tokio::time::sleep(ms(10)).await;
    assert!(!waiter.is_finished(), "not taken");
    assert_eq!(b.snapshot().reserved, 0);
    drop(held);
    waiter.abort();
}

/// A turn handed over while a report of the process is out waits for its answer, and is taken
/// after it when it is newer (the report ran before it was handed).
#[tokio::test(start_paused = true)]
async fn a_turn_handed_over_while_a_report_is_out_waits_for_its_answer() {
    let cut = Cut::default();
    cut.server.0.delay_ms.store(50, Relaxed);
    let a = store(Arc::new(cut.server.clone()), 1, Fail::Closed);
    let b = store(Arc::new(cut.clone()), 1, Fail::Closed);
    let first = budget(&a, 1);
    let held = first.acquire().await.unwrap();
    let waiting = budget(&b, 2);
    let one = tokio::spawn({
        let waiting = waiting.clone();
        async move { waiting.acquire_owned().await.map(drop) }
    });
    tokio::time::sleep(ms(300)).await;
    let reports = cut.reports.load(Relaxed);
    // A second caller raises the demand: a report leaves, answered 50 ms later.
    let two = tokio::spawn(async move { waiting.acquire_owned().await.map(drop) });
    tokio::time::sleep(ms(10)).await;
    assert_eq!(cut.reports.load(Relaxed), reports + 1, "a report is out");
    hand_turn(&cut, &b, NEWEST, 50);
    tokio::time::sleep(ms(20)).await;
    assert!(
        !one.is_finished() && !two.is_finished(),
        "not while the report is out"
    );
    tokio::time::sleep(ms(40)).await;
    assert!(
        one.is_finished() || two.is_finished(),
        "taken after its answer"
    );
    assert_eq!(b.snapshot().reserved, 1);
    drop(held);
    one.abort();
    two.abort();
}

/// A word on the grants channel carries the budget's state it was told at: one from before the
/// process's last answer (its own report ran later and took the change in) asks for nothing,
/// one from after asks for a report, and so does any wake after a gap in the channel (words
/// may have been missed).
#[tokio::test(start_paused = true)]
async fn a_word_told_before_the_last_answer_asks_for_nothing() {
    let server = Shared::default();
    let a = store(Arc::new(server.clone()), 8, Fail::Closed);
    let records = budget(&a, 8);
    let held = records.acquire().await.unwrap();
    tokio::time::sleep(ms(20)).await;
    let (process, grants) = (a.engine.process.clone(), server.grants());
    let reports = || server.0.calls.load(Relaxed);
    let before = reports();
    let reports_at_start = before;
    grants.grant(&format!("{process}@0.0"));
    tokio::time::sleep(ms(20)).await;
    assert_eq!(reports(), before, "told before the last answer");
    // The channel went deaf and live again: words may have been missed, so the wake asks for a
    // report whatever the last word heard said.
    grants.set_live(false);
    grants.set_live(true);
    tokio::time::sleep(ms(20)).await;
    let before = reports();
    assert!(before > reports_at_start, "a gap in the channel asks");
    grants.grant(&format!("{process}@{}.0", u64::MAX));
    tokio::time::sleep(ms(20)).await;
    assert_eq!(reports(), before + 1, "told after it");
    grants.grant(&process);
    tokio::time::sleep(ms(20)).await;
    assert_eq!(reports(), before + 2, "a word that says no state asks");
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn a_rise_in_demand_asks_at_once_not_at_the_renewal() {
    let server = Shared::default();
    let a = store(Arc::new(server.clone()), 100, Fail::Closed);
    let records = budget(&a, 100);
    let first = records.acquire().await.unwrap();
    let start = Instant::now();
    let held: Vec<_> = futures::future::join_all((0..40).map(|_| records.acquire()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(start.elapsed() <= ms(10), "{:?}", start.elapsed());
    assert_eq!(a.snapshot().share, 41);
    drop((first, held));
}

#[tokio::test(start_paused = true)]
async fn a_shrunk_share_drains_then_gives_the_rest_back_for_the_others() {
    let server = Shared::default();
    let (a, b) = (
        store(Arc::new(server.clone()), 10, Fail::Closed),
        store(Arc::new(server.clone()), 10, Fail::Closed),
    );
    let (ra, rb) = (budget(&a, 10), budget(&b, 10));
    let held: Vec<_> = futures::future::join_all((0..10).map(|_| ra.acquire()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(a.snapshot().share, 10);
    // b wants 5: a is told its fair share is now 5, admits no more, and runs its 10.
    let waiters = tokio::spawn({
        let rb = rb.clone();
        async move {
            let got = futures::future::join_all((0..5).map(|_| rb.acquire_owned())).await;
            (Instant::now(), got)
        }
    });
    tokio::time::sleep(ms(20)).await;
    let snap = a.snapshot();
    assert_eq!((snap.share, snap.reserved, snap.running), (5, 10, 10));
    assert_eq!(b.snapshot().share, 0, "nothing is free while a runs its 10");
    assert!(reserved(&server) <= 10);
    let drained = Instant::now();
    drop(held);
    let (granted, got) = waiters.await.unwrap();
    assert!(got.iter().all(Result::is_ok));
    assert!(
        granted - drained <= ms(10),
        "given back and taken up at once"
    );
    assert_eq!((a.snapshot().reserved, b.snapshot().share), (5, 5));
}

#[tokio::test(start_paused = true)]
async fn redis_down_applies_the_fail_policy_and_the_share_ends_after_its_lease() {
    let server = Shared::default();
    let closed = store(Arc::new(server.clone()), 8, Fail::Closed);
    // The local limit counts the share's running call: 2 lets one more in.
    let local = store(Arc::new(server.clone()), 8, Fail::Local(2));
    let (rc, rl) = (budget(&closed, 8), budget(&local, 8));
    let c1 = rc.acquire().await.unwrap();
    let l1 = rl.acquire().await.unwrap();
    assert_eq!((closed.snapshot().share, local.snapshot().share), (1, 1));
    server.0.down.store(true, Relaxed);
    // The renewal fails: calls the share cannot take go to the fail policy at once.
    tokio::time::sleep(LEASE / 3 + ms(5)).await;
    assert!(closed.snapshot().redis_down);
    let start = Instant::now();
    let err = rc.acquire().await.unwrap_err();
    assert!(matches!(err, AcquireError::Unavailable(_)), "{err:?}");
    assert!(
        err.to_string().contains("\"search\"") && err.to_string().contains("fake:0"),
        "{err}"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    let fallback = rl.acquire().await.unwrap();
    assert!(crate::fallback::Fallback::gave(fallback.lease().unwrap()));
    // The share itself ends one lease after its last report: its holders are told.
    tokio::time::sleep(LEASE).await;
    assert!(c1.lease().unwrap().is_lost() && l1.lease().unwrap().is_lost());
    assert_eq!(closed.snapshot().share, 0);
    drop((c1, l1, fallback));
    // Redis is back: the next caller asks again and is admitted.
    server.0.down.store(false, Relaxed);
    tokio::time::sleep(ms(200)).await;
    let again = tokio::time::timeout(ms(50), rc.acquire()).await;
    assert!(matches!(again, Ok(Ok(_))), "{again:?}");
    assert!(!closed.snapshot().redis_down);
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_the_share_back_and_refuses_from_then_on() {
    let server = Shared::default();
    let a = store(Arc::new(server.clone()), 8, Fail::Closed);
    let records = budget(&a, 8);
    let running = records.acquire().await.unwrap();
    let done = records.acquire().await.unwrap();
    assert_eq!(reserved(&server), 2);
    drop(done);
    a.shutdown().await;
    // The call still running keeps its permit (it expires with the entry); the other is back.
    assert_eq!(reserved(&server), 1);
    assert!(running.lease().unwrap().is_lost());
    assert!(records.acquire().await.is_err());
    tokio::time::sleep(LEASE).await;
    assert_eq!(
        reserved(&server),
        0,
        "expired one lease after the last report"
    );
}

#[tokio::test(start_paused = true)]
async fn a_late_report_is_not_applied_over_a_newer_one() {
    let server = Shared::default();
    let report = |seq, holding| ShareReport {
        process: Arc::from("p"),
        wants: 10,
        holding,
        seq,
        limit: 10,
        lease: LEASE,
        leaving: false,
        seen: Seen::default(),
    };
    let newer = server.shares("search", report(2, 3)).await.unwrap();
    assert!(newer.applied);
    assert_eq!(newer.has, 10);
    let late = server.shares("search", report(1, 0)).await.unwrap();
    assert!(!late.applied);
    assert_eq!(reserved(&server), 10, "the late report changed nothing");
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_keeps_the_permits_of_calls_still_running_until_they_end() {
    let server = Shared::default();
    let (a, b) = (
        store(Arc::new(server.clone()), 10, Fail::Closed),
        store(Arc::new(server.clone()), 10, Fail::Closed),
    );
    let (ra, rb) = (budget(&a, 10), budget(&b, 10));
    let running = permits(&ra, 10).await;
    let waiter = tokio::spawn(async move { rb.acquire_owned().await.map(|_| Instant::now()) });
    tokio::time::sleep(ms(5)).await;
    // The calls run on past the shutdown's wait for them (one round-trip timeout).
    a.shutdown().await;
    tokio::time::sleep(ms(50)).await;
    assert!(
        !waiter.is_finished(),
        "a's 10 calls still run: nothing is free"
    );
    assert_eq!(reserved(&server), 10);
    let ended = Instant::now();
    drop(running);
    // Once they end, the permits are free one lease after a's last report, and the waiter's
    // next report (a third of a lease later at most) takes them up.
    let granted = waiter.await.unwrap().unwrap();
    assert!(
        granted - ended <= LEASE + LEASE / 3,
        "{:?}",
        granted - ended
    );
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_waits_for_short_calls_and_then_gives_everything_back() {
    let server = Shared::default();
    let a = store(Arc::new(server.clone()), 10, Fail::Closed);
    let records = budget(&a, 10);
    let running = records.acquire_owned().await.unwrap();
    let call = tokio::spawn(async move {
        tokio::time::sleep(ms(20)).await;
        drop(running);
    });
    a.shutdown().await;
    call.await.unwrap();
    assert!(server.0.shares_held("search").is_empty(), "nothing left");
}

/// After Redis lost the budget's state, a report counts the calls the fallback admitted while
/// Redis was away, and the budget keeps them whole while it learns, past the limit if need be:
/// their permits are kept because the calls run, not because they are free. A local call that
/// ends while that report is on its way gives no permit to a new call.
#[tokio::test(start_paused = true)]
async fn a_local_call_ending_during_a_report_frees_no_permit_while_the_limit_is_passed() {
    let server = Shared::default();
    let (a, b) = (
        store(Arc::new(server.clone()), 6, Fail::Local(2)),
        store(Arc::new(server.clone()), 6, Fail::Local(2)),
    );
    let (ra, rb) = (budget(&a, 6), budget(&b, 6));
    // b has met the budget and holds nothing; a runs the whole limit.
    drop(rb.acquire().await.unwrap());
    tokio::time::sleep(LEASE).await;
    assert_eq!(b.snapshot().reserved, 0);
    let mut a_calls = permits(&ra, 6).await;
    assert_eq!(a.snapshot().reserved, 6);
    // Redis is away: b admits its local limit.
    server.0.down.store(true, Relaxed);
    let locals = permits(&rb, 2).await;
    assert!(all_local(&locals));
    // Redis is back, empty, and answers after 20 ms.
    server.0.wipe();
    server.0.delay_ms.store(20, Relaxed);
    server.0.down.store(false, Relaxed);
    tokio::time::sleep(ms(250)).await;
    // A newcomer of b asks: b's report counts its 2 local calls, which end before the answer.
    let newcomer = tokio::spawn({
        let rb = rb.clone();
        async move {
            let permit = rb.acquire_owned().await.unwrap();
            assert!(!crate::fallback::Fallback::gave(permit.lease().unwrap()));
            (Instant::now(), permit)
        }
    });
    tokio::time::sleep(ms(5)).await;
    assert!(server.0.learning("search"));
    drop(locals);
    tokio::time::sleep(LEASE * 2).await;
    assert!(
        !newcomer.is_finished(),
        "nothing is free while a runs the limit: {:?} {:?}",
        a.snapshot(),
        b.snapshot()
    );
    assert_eq!(a.snapshot().reserved, 6, "a's calls are registered");
    let ended = Instant::now();
    drop(a_calls.pop());
    let (started, _permit) = tokio::time::timeout(ms(2000), newcomer)
        .await
        .expect("the newcomer starts once fewer than the limit run")
        .unwrap();
    assert!(started > ended);
}

/// A process with no share that runs only calls its fallback admitted while Redis was away
/// reports them once Redis is back, so they count against the fleet limit until they end.
#[tokio::test(start_paused = true)]
async fn local_calls_of_a_process_without_a_share_count_once_redis_is_back() {
    let server = Shared::default();
    let b = store(Arc::new(server.clone()), 6, Fail::Local(2));
    let rb = budget(&b, 6);
    // b has met the budget and holds nothing.
    drop(rb.acquire().await.unwrap());
    tokio::time::sleep(LEASE).await;
    assert_eq!((b.snapshot().share, reserved(&server)), (0, 0));
    // Redis is away: b admits its local limit.
    server.0.down.store(true, Relaxed);
    let locals = permits(&rb, 2).await;
    assert!(all_local(&locals));
    tokio::time::sleep(ms(50)).await;
    // Redis is back, empty: within a renewal b's report counts its 2 local calls.
    server.0.wipe();
    server.0.down.store(false, Relaxed);
    tokio::time::sleep(LEASE / 3 + ms(10)).await;
    assert_eq!(
        reserved(&server),
        2,
        "b's local calls are registered: {:?}",
        b.snapshot()
    );
    // Once they end, they stop counting.
    drop(locals);
    tokio::time::sleep(LEASE + LEASE / 3).await;
    assert_eq!(reserved(&server), 0, "{:?}", b.snapshot());
}

/// A local call admitted while the reporter sleeps with nothing to renew, during the pause
/// after a failed report (when callers do not ask the server), is reported once Redis is back.
#[tokio::test(start_paused = true)]
async fn a_local_call_admitted_while_nothing_was_held_is_reported_once_redis_is_back() {
    let server = Shared::default();
    let b = store(Arc::new(server.clone()), 6, Fail::Local(2));
    let rb = budget(&b, 6);
    drop(rb.acquire().await.unwrap());
    tokio::time::sleep(LEASE).await;
    // Redis is away past the last share's lease.
    server.0.down.store(true, Relaxed);
    tokio::time::sleep(LEASE * 3).await;
    let first = rb.acquire().await.unwrap();
    tokio::time::sleep(ms(5)).await;
    // Ending it asks for a report, which waits out the pause: nothing is held then.
    drop(first);
    tokio::time::sleep(ms(5)).await;
    assert_eq!(b.snapshot().local_held, 0);
    // Within the pause, a call is admitted locally without asking the server.
    let local = rb.acquire().await.unwrap();
    assert!(crate::fallback::Fallback::gave(local.lease().unwrap()));
    server.0.wipe();
    server.0.down.store(false, Relaxed);
    tokio::time::sleep(LEASE / 3 + ms(10)).await;
    assert_eq!(reserved(&server), 1, "{:?}", b.snapshot());
    drop(local);
    tokio::time::sleep(LEASE + LEASE / 3).await;
    assert_eq!(reserved(&server), 0, "{:?}", b.snapshot());
}

/// While Redis is away, no process admits locally until the outage is a lease and a third old:
/// by then every share taken before it has ended on its holder's clock, and its calls are told
/// their leases are lost (a budget with `on_lost = "cancel"` drops them). So a process that ran
/// the whole limit and one that ran nothing never run the limit plus a local limit together.
#[tokio::test(start_paused = true)]
async fn the_local_fallback_admits_nothing_until_the_shares_from_before_the_outage_have_ended() {
    let server = Shared::default();
    let (a, b) = (
        store(Arc::new(server.clone()), 6, Fail::Local(2)),
        store(Arc::new(server.clone()), 6, Fail::Local(2)),
    );
    let (ra, rb) = (budget(&a, 6), budget(&b, 6));
    // b has met the budget and holds nothing; a runs the whole limit.
    drop(rb.acquire().await.unwrap());
    tokio::time::sleep(LEASE).await;
    let a_calls = permits(&ra, 6).await;
    assert_eq!(a.snapshot().reserved, 6);
    server.0.down.store(true, Relaxed);
    let down = Instant::now();
    let hold = LEASE + LEASE / 3;
    let early = tokio::time::timeout(hold - ms(10), rb.acquire()).await;
    assert!(early.is_err(), "admitted within the hold: {early:?}");
    assert!(b.snapshot().redis_down);
    assert_eq!(b.snapshot().fallbacks, 0);
    let locals = permits(&rb, 2).await;
    assert!(all_local(&locals));
    let admitted = Instant::now();
    assert!(
        admitted - down >= hold && admitted - down <= hold + ms(10),
        "admitted {:?} into the outage",
        admitted - down
    );
    assert!(
        a_calls.iter().all(|p| p.lease().unwrap().is_lost()),
        "a's calls were told their share ended before b admitted"
    );
    assert_eq!(a.snapshot().share, 0);
    // Without the calls of its lost share (dropped, as `on_lost = "cancel"` does), a admits its
    // own local limit: the two run 2 x 2, under the fleet's 6.
    drop(a_calls);
    let a_locals = permits(&ra, 2).await;
    assert!(all_local(&a_locals));
    assert!(
        tokio::time::timeout(ms(100), rb.acquire()).await.is_err(),
        "b's local limit is full"
    );
    assert_eq!((a.snapshot().local_held, b.snapshot().local_held), (2, 2));
}

/// A store made known before any call is asked once by `check`: a Redis that does not
/// answer is said at once, and asked again while the store is idle until it is back.
#[tokio::test(start_paused = true)]
async fn a_check_before_any_call_says_redis_is_down_and_sees_it_back_without_a_call() {
    let server = Shared::default();
    let s = store(Arc::new(server.clone()), 8, Fail::Closed);
    // Not known yet: nothing to ask.
    s.check().await;
    assert!(!s.snapshot().redis_down);
    s.register("search");
    server.0.down.store(true, Relaxed);
    s.check().await;
    assert!(s.snapshot().redis_down, "said before any call");
    assert_eq!(s.snapshot().share, 0);
    server.0.down.store(false, Relaxed);
    // No caller comes: the reporter asks again by itself.
    tokio::time::sleep(LEASE / 3 + ms(250)).await;
    assert!(!s.snapshot().redis_down, "seen back without a call");
    // Once up and idle, it sends nothing more.
    let reports = s.snapshot().reports;
    tokio::time::sleep(LEASE * 3).await;
    assert_eq!(s.snapshot().reports, reports);
}

/// Learning after Redis lost the budget's state lasts as long as the answer said: a process
/// whose last report was answered while the budget learned (its caller gave up meanwhile) and
/// that sends none after it stops saying it learns once that is past.
#[tokio::test(start_paused = true)]
async fn an_idle_budget_stops_saying_it_learns_once_the_learning_is_over() {
    let server = Shared::default();
    let a = store(Arc::new(server.clone()), 6, Fail::Closed);
    let ra = budget(&a, 6);
    // a has met the budget and holds nothing.
    drop(ra.acquire().await.unwrap());
    tokio::time::sleep(LEASE).await;
    assert_eq!(a.snapshot().reserved, 0);
    // Redis comes back empty: a's next report hears that the budget learns, for a lease; its
    // caller gives up before anything is granted.
    server.0.wipe();
    let gave_up = tokio::time::timeout(ms(100), ra.acquire()).await;
    assert!(
        gave_up.is_err(),
        "nothing is granted while the budget learns"
    );
    assert!(server.0.learning("search"));
    tokio::time::sleep(ms(50)).await;
    assert!(a.snapshot().learning, "{:?}", a.snapshot());
    let reports = a.snapshot().reports;
    tokio::time::sleep(LEASE).await;
    assert!(!server.0.learning("search"));
    assert_eq!(
        a.snapshot().reports,
        reports,
        "a sent nothing since: {:?}",
        a.snapshot()
    );
    assert!(!a.snapshot().learning, "{:?}", a.snapshot());
}
