//! The fleet's Lua scripts on a real `redis-server` (on a free loopback port; each test says it
//! skipped where none is installed): the limit and the queue's hand-off, the shares, the GCRA,
//! the epochs after a loss of state, and the keys' hash tag.
//!
//! The scripts are the crate's own business, so this test builds the crate's `scripts` module
//! itself, from its source: the module uses nothing else of the crate, and the Lua and the
//! putting together of the scripts under test are those the crate ships.

// Only part of the module is used here.
#[allow(dead_code, unused_imports)]
#[path = "../src/scripts/mod.rs"]
mod scripts;

mod support;

use std::time::{Duration, Instant};

use redis::Script;

use scripts::keys::holders_key;
use scripts::{
    budget_keys, grants_channel, lease_keys, rate_key, sharded_grants_channel, share_keys,
    shares_key, Scripts, GCRA,
};
use support::RedisServer;

/// A `redis-server` on a free loopback port (killed on drop), and a connection to it.
fn server() -> Option<(RedisServer, redis::Connection)> {
    let server = RedisServer::start()?;
    let conn = server.conn();
    Some((server, conn))
}

/// A lease script's call on budget "b", by a caller that has seen `seen`.
fn call(
    script: &'static Script,
    seen: (u64, u64),
    limit: u64,
    lease_ms: u64,
) -> redis::ScriptInvocation<'static> {
    let mut call = script.prepare_invoke();
    for key in lease_keys("b") {
        call.key(key);
    }
    call.arg(seen.0).arg(seen.1).arg(limit).arg(lease_ms);
    call
}

fn scripts() -> &'static Scripts {
    Scripts::for_node()
}

/// `(epoch, version, learning ms, granted, holders, reclaimed, wait, ahead)`.
type Acquire = (u64, u64, u64, u8, u64, u64, i64, u64);

fn acquire_seen(
    conn: &mut redis::Connection,
    id: &str,
    seen: (u64, u64),
    limit: u64,
    lease_ms: u64,
) -> Acquire {
    call(&scripts().acquire, seen, limit, lease_ms)
        .arg(id)
        .arg(2000)
        .invoke(conn)
        .unwrap()
}

/// `(granted, holders, reclaimed, wait, ahead)` for a caller that has seen nothing.
fn acquire(
    conn: &mut redis::Connection,
    id: &str,
    limit: u64,
    lease_ms: u64,
) -> (u8, u64, u64, i64, u64) {
    let r = acquire_seen(conn, id, (0, 0), limit, lease_ms);
    (r.3, r.4, r.5, r.6, r.7)
}

fn release(conn: &mut redis::Connection, ids: &[&str], limit: u64, lease_ms: u64) -> u64 {
    let mut call = call(&scripts().release, (0, 0), limit, lease_ms);
    for id in ids {
        call.arg(*id);
    }
    let (_, _, _, removed): (u64, u64, u64, u64) = call.invoke(conn).unwrap();
    removed
}

/// `(epoch, version, learning ms, added back, lost)`.
type Renew = (u64, u64, u64, u64, Vec<String>);

fn renew_seen(
    conn: &mut redis::Connection,
    ids: &[&str],
    locals: &[&str],
    seen: (u64, u64),
    lease_ms: u64,
) -> Renew {
    let mut call = call(&scripts().renew, seen, 2, lease_ms);
    call.arg(ids.len());
    for id in ids.iter().chain(locals) {
        call.arg(*id);
    }
    call.invoke(conn).unwrap()
}

fn renew(conn: &mut redis::Connection, ids: &[&str], lease_ms: u64) -> Vec<String> {
    renew_seen(conn, ids, &[], (0, 0), lease_ms).4
}

#[test]
fn the_scripts_keep_the_limit_and_touch_only_their_own_lease() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    assert_eq!(acquire(conn, "a", 2, 200).0, 1);
    // A retry with the same id (a reply lost) is granted again, not twice.
    assert_eq!(acquire(conn, "a", 2, 200), (1, 1, 0, 0, 0));
    assert_eq!(acquire(conn, "b", 2, 200).0, 1);
    let (granted, holders, _, wait, ahead) = acquire(conn, "c", 2, 200);
    assert_eq!((granted, holders, ahead), (0, 2, 0));
    assert!(wait > 0 && wait <= 200, "{wait}");
    // Full, but a holder retrying is still granted.
    assert_eq!(acquire(conn, "b", 2, 200).0, 1);
    // A limit of 0 grants nothing, and says so.
    let mut zero = scripts().acquire.prepare_invoke();
    for key in lease_keys("none") {
        zero.key(key);
    }
    let zero: Acquire = zero
        .arg(0)
        .arg(0)
        .arg(0)
        .arg(200)
        .arg("a")
        .arg(2000)
        .invoke(conn)
        .unwrap();
    assert_eq!((zero.3, zero.4, zero.5, zero.6, zero.7), (0, 0, 0, 0, 0));
    // Releasing someone else's id, or one not held, removes nothing.
    assert_eq!(release(conn, &["zzz"], 2, 200), 0);
    // Renew keeps "a"; "gone" was never held and is reported lost.
    assert_eq!(renew(conn, &["a", "gone"], 200), ["gone"]);
    // "c" gave up waiting: its release takes it out of the queue.
    assert_eq!(release(conn, &["c"], 2, 200), 0);
    // After a lease with no renewal, both expire: the next acquirer reclaims them.
    std::thread::sleep(Duration::from_millis(250));
    let (granted, holders, reclaimed, _, _) = acquire(conn, "c", 2, 200);
    assert_eq!((granted, holders, reclaimed), (1, 1, 2));
    assert_eq!(
        renew(conn, &["a", "c"], 200),
        ["a"],
        "an expired lease is lost"
    );
    assert_eq!(release(conn, &["c"], 2, 200), 1);
}

#[test]
fn a_release_hands_its_permit_to_the_earliest_waiter_and_tells_its_process() {
    let Some(mut server) = server() else {
        return;
    };
    let client = redis::Client::open(server.0.url()).unwrap();
    let mut listener = client.get_connection().unwrap();
    let mut pubsub = listener.as_pubsub();
    pubsub
        .subscribe(grants_channel("00000000000000p2"))
        .unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let conn = &mut server.1;
    let p1 = |n: u8| format!("00000000000000p1{n:016x}");
    let p2 = |n: u8| format!("00000000000000p2{n:016x}");
    assert_eq!(acquire(conn, &p1(0), 1, 5000).0, 1);
    // Queued in arrival order, whichever process they come from.
    let queued = acquire(conn, &p2(1), 1, 5000);
    assert_eq!((queued.0, queued.4), (0, 0));
    assert_eq!(acquire(conn, &p1(2), 1, 5000).4, 1);
    assert_eq!(acquire(conn, &p1(3), 1, 5000).4, 2);
    // A newcomer never overtakes them, even the moment a permit frees.
    assert_eq!(release(conn, &[&p1(0)], 1, 5000), 1);
    let message = pubsub.get_message().unwrap();
    assert_eq!(
        message.get_channel_name(),
        grants_channel("00000000000000p2")
    );
    assert_eq!(message.get_payload::<String>().unwrap(), p2(1));
    assert_eq!(
        acquire(conn, &p1(9), 1, 5000).4,
        2,
        "behind the two still waiting"
    );
    // The head was granted by the release itself; asking again confirms it.
    assert_eq!(acquire(conn, &p2(1), 1, 5000).0, 1);
    // The next waiter gave up; the release of the holder skips it.
    assert_eq!(release(conn, &[&p1(2)], 1, 5000), 0);
    assert_eq!(release(conn, &[&p2(1)], 1, 5000), 1);
    assert_eq!(acquire(conn, &p1(3), 1, 5000).0, 1, "granted in its turn");
    assert_eq!(acquire(conn, &p1(9), 1, 5000).4, 0);
}

/// A first ask of lease `id` (the script skips its lookups of it), giving back `releasing`.
fn acquire_first(
    conn: &mut redis::Connection,
    id: &str,
    releasing: &[&str],
    limit: u64,
) -> (u8, u64, u64, i64, u64) {
    let mut call = call(&scripts().acquire, (0, 0), limit, 5000);
    call.arg(id).arg(2000).arg(1);
    for gone in releasing {
        call.arg(*gone);
    }
    let r: Acquire = call.invoke(conn).unwrap();
    (r.3, r.4, r.5, r.6, r.7)
}

#[test]
fn a_first_ask_queues_behind_the_others_and_gives_back_what_it_carries() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    assert_eq!(acquire_first(conn, "a", &[], 1).0, 1);
    let b = acquire_first(conn, "b", &[], 1);
    assert_eq!((b.0, b.1, b.4), (0, 1, 0));
    assert!((4000..=5000).contains(&b.3), "a's lease ends in {} ms", b.3);
    assert_eq!(acquire_first(conn, "c", &[], 1).4, 1, "one waiter ahead");
    // "a" given back with a first ask: "b" is granted in its turn, "d" waits behind "c".
    let d = acquire_first(conn, "d", &["a"], 1);
    assert_eq!((d.0, d.1, d.4), (0, 1, 1));
    assert_eq!(acquire(conn, "b", 1, 5000).0, 1, "granted by the hand-off");
    assert_eq!(
        acquire(conn, "c", 1, 5000).4,
        0,
        "an ask again finds its place"
    );
    // A waiter given back leaves the queue and its expiry.
    assert_eq!(acquire_first(conn, "e", &["c"], 1).4, 1, "behind d only");
    let keys = lease_keys("b");
    let queued: u64 = redis::cmd("ZCARD").arg(&keys[1]).query(conn).unwrap();
    let expiries: u64 = redis::cmd("ZCARD").arg(&keys[2]).query(conn).unwrap();
    assert_eq!((queued, expiries), (2, 2));
    let holders: Vec<String> = redis::cmd("ZRANGE")
        .arg(&keys[0])
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap();
    assert_eq!(holders, ["b"], "held or queued, never both");
}

#[test]
fn a_waiter_that_stops_asking_leaves_the_queue_when_its_entry_expires() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    assert_eq!(acquire(conn, "h", 1, 5000).0, 1);
    // "dead" queues with an entry of 100 ms and never asks again.
    let _: Acquire = call(&scripts().acquire, (0, 0), 1, 5000)
        .arg("dead")
        .arg(100)
        .invoke(conn)
        .unwrap();
    assert_eq!(acquire(conn, "alive", 1, 5000).4, 1);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(release(conn, &["h"], 1, 5000), 1);
    assert_eq!(
        acquire(conn, "alive", 1, 5000).0,
        1,
        "the dead waiter was skipped"
    );
}

/// One report of `process` to the shares script: `(applied, cap, has, target, processes)`.
fn shares(
    conn: &mut redis::Connection,
    process: &str,
    (wants, holding, seq): (u64, u64, u64),
    lease_ms: u64,
    leaving: bool,
) -> (u8, u64, u64, u64, u64) {
    let r = shares_seen(
        conn,
        process,
        (wants, holding, seq),
        lease_ms,
        leaving,
        (0, 0),
    );
    (r.0, r.1, r.2, r.3, r.4)
}

/// `(applied, cap, has, target, processes, epoch, version, learning ms, recheck ms)`.
type Shares = (u8, u64, u64, u64, u64, u64, u64, u64, u64, u64);

fn shares_seen(
    conn: &mut redis::Connection,
    process: &str,
    (wants, holding, seq): (u64, u64, u64),
    lease_ms: u64,
    leaving: bool,
    seen: (u64, u64),
) -> Shares {
    scripts()
        .shares
        .key(&share_keys("s")[..])
        .arg(process)
        .arg(wants)
        .arg(holding)
        .arg(seq)
        .arg(512)
        .arg(lease_ms)
        .arg(u8::from(leaving))
        .arg(seen.0)
        .arg(seen.1)
        .invoke(conn)
        .unwrap()
}

#[test]
fn the_shares_script_splits_max_min_and_grows_only_from_free_permits() {
    let Some(mut server) = server() else {
        return;
    };
    let client = redis::Client::open(server.0.url()).unwrap();
    let mut listener = client.get_connection().unwrap();
    let mut pubsub = listener.as_pubsub();
    pubsub
        .subscribe(grants_channel("00000000000000p1"))
        .unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let conn = &mut server.1;
    let (p1, p2) = ("00000000000000p1-a", "00000000000000p2-b");
    // Alone, p1 gets all it wants.
    assert_eq!(
        shares(conn, p1, (900, 0, 1), 5000, false),
        (1, 512, 512, 512, 1)
    );
    // p2 wants 100: its fair share is 100, but nothing is free while p1 holds 512, and p1
    // is told to report.
    assert_eq!(
        shares(conn, p2, (100, 0, 1), 5000, false),
        (1, 0, 0, 100, 2)
    );
    let message = pubsub.get_message().unwrap();
    let word = message.get_payload::<String>().unwrap();
    let (id, at) = word.split_once('@').unwrap();
    assert_eq!(id, p1);
    // Told at the budget's state after p2's report: p1's own next report comes later.
    let (epoch, version) = at.split_once('.').unwrap();
    assert!(epoch.parse::<u64>().unwrap() > 0 && version.parse::<u64>().unwrap() >= 2);
    // p1 still runs 450: it keeps 450 reserved, and may admit up to its share of 412.
    assert_eq!(
        shares(conn, p1, (900, 450, 2), 5000, false),
        (1, 412, 450, 412, 2)
    );
    assert_eq!(
        shares(conn, p2, (100, 0, 2), 5000, false),
        (1, 62, 62, 100, 2)
    );
    // Drained to 412, p1 gives the rest back; p2 takes it up.
    assert_eq!(
        shares(conn, p1, (900, 412, 3), 5000, false),
        (1, 412, 412, 412, 2)
    );
    assert_eq!(
        shares(conn, p2, (100, 62, 3), 5000, false),
        (1, 100, 100, 100, 2)
    );
    // A late duplicate of an older report changes nothing.
    assert_eq!(shares(conn, p1, (900, 0, 2), 5000, false).0, 0);
    // p1 leaves: its entry goes, and p2 may grow into the whole limit.
    assert_eq!(shares(conn, p1, (0, 0, 4), 5000, true).0, 1);
    assert_eq!(
        shares(conn, p2, (600, 100, 4), 5000, false),
        (1, 512, 512, 512, 1)
    );
}

/// A shares report of process `p`, wanting one, on `budget` with a limit of 2 (the turns'
/// tests): `(holding, seq)`, the lease, and what it has seen of the budget.
fn turn(
    conn: &mut redis::Connection,
    budget: &str,
    p: &str,
    (holding, seq): (u64, u64),
    lease_ms: u64,
    seen: (u64, u64),
) -> Shares {
    scripts()
        .shares
        .key(&share_keys(budget)[..])
        .arg(p)
        .arg(1)
        .arg(holding)
        .arg(seq)
        .arg(2)
        .arg(lease_ms)
        .arg(0)
        .arg(seen.0)
        .arg(seen.1)
        .invoke(conn)
        .unwrap()
}

/// A shares reply's `(cap, has, base)`.
fn cap_has_base(r: Shares) -> (u64, u64, u64) {
    (r.1, r.2, r.3)
}

/// The water level is found by walking the wants in ascending order, read a few first and then
/// in larger chunks: 70 processes that want one each and one that wants 900 of 512 give the
/// last 442 (the walk reads past both the first read and a chunk).
#[test]
fn the_water_level_walks_every_want_below_it() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    for i in 0..70 {
        let small = format!("{i:016}-small");
        assert_eq!(shares(conn, &small, (1, 0, 1), 5000, false).3, 1);
    }
    let big = shares(conn, "0000000000000big-b", (900, 0, 1), 5000, false);
    assert_eq!(
        (big.2, big.3, big.4),
        (442, 442, 71),
        "has, base, processes"
    );
}

/// The turns' tests' three processes (the first 16 characters name their grants channels).
const TURNS: (&str, &str, &str) = (
    "00000000000000p1-a",
    "00000000000000p2-b",
    "00000000000000p3-c",
);

/// A subscriber to the grants channels of processes `ids`, reading with a short timeout.
fn listen<'a>(listener: &'a mut redis::Connection, ids: &[&str]) -> redis::PubSub<'a> {
    let mut pubsub = listener.as_pubsub();
    for id in ids {
        pubsub.subscribe(grants_channel(&id[..16])).unwrap();
    }
    pubsub
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    pubsub
}

/// The words told on the subscribed channels, until none comes within the read timeout.
fn words(pubsub: &mut redis::PubSub<'_>) -> Vec<String> {
    std::iter::from_fn(|| pubsub.get_message().ok())
        .map(|m| m.get_payload::<String>().unwrap())
        .collect()
}

#[test]
fn permits_beyond_every_base_go_in_turns() {
    let Some(mut server) = server() else {
        return;
    };
    let (p1, p2, p3) = TURNS;
    // The processes listen on their grants channels, as live ones do.
    let mut listener = server.0.conn();
    let _pubsub = listen(&mut listener, &[p1, p2, p3]);
    let conn = &mut server.1;
    // A limit of 2 (the tests' helper says 512: use a budget of its own) among three
    // processes that want one each: every base is 0, the two permits go in turns.
    let report = |conn: &mut redis::Connection, p: &str, holding: u64, seq: u64| {
        cap_has_base(turn(conn, "turns", p, (holding, seq), 300, (0, 0)))
    };
    // Alone, then two of them: a base of 1 each.
    assert_eq!(report(conn, p1, 0, 1), (1, 1, 1), "cap 1, has 1, base 1");
    assert_eq!(report(conn, p2, 0, 1), (1, 1, 1));
    assert_eq!(
        report(conn, p3, 0, 1),
        (0, 0, 0),
        "none free: p3 waits its turn"
    );
    // At their next reports, p1 and p2 learn their base is 0: their permits are extras,
    // held for a term from now.
    assert_eq!(report(conn, p1, 1, 2), (1, 1, 0));
    assert_eq!(report(conn, p2, 1, 2), (1, 1, 0));
    // After a term (a third of the lease), p3 asks again: p1's term ran out...
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(report(conn, p3, 0, 2), (0, 0, 0));
    // ...so p1, still running its call, is capped at its base and queues again...
    assert_eq!(report(conn, p1, 1, 3), (0, 1, 0));
    // ...gives its permit back once its call ends, and p3 takes it.
    assert_eq!(report(conn, p1, 0, 4), (0, 0, 0));
    assert_eq!(report(conn, p3, 0, 3), (1, 1, 0));
    let held: Vec<String> = redis::cmd("HVALS")
        .arg(shares_key("turns"))
        .query(conn)
        .unwrap();
    let reserved: u64 = held
        .iter()
        .map(|v| v.split(':').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(reserved, 2, "never past the limit: {held:?}");
}

/// A holder whose term ran out is told to give back once, and only if it does not know: the
/// waiters that report after it answered (its reply capped it at its base) tell the next holder
/// whose term ran out, not it again; and a holder whose answer said when its term ends (others
/// waited) gives back on its own then, untold. (Before, every waiter's report told the same
/// holder until its calls drained, and each word cost it a report.)
#[test]
fn a_holder_whose_term_ran_out_is_told_once_and_only_if_it_does_not_know() {
    let Some(mut server) = server() else {
        return;
    };
    let (p1, p2, p3) = TURNS;
    let mut listener = server.0.conn();
    let mut pubsub = listen(&mut listener, &[p1, p2, p3]);
    let conn = &mut server.1;
    // A lease of 600 ms: terms of 100 ms, and every entry outlives the test.
    let report = |conn: &mut redis::Connection, p: &str, holding: u64, seq: u64| {
        cap_has_base(turn(conn, "told", p, (holding, seq), 600, (0, 0)))
    };
    let told = |pubsub: &mut redis::PubSub<'_>| -> Vec<String> {
        words(pubsub)
            .iter()
            .map(|w| w.split('@').next().unwrap().to_string())
            .collect()
    };
    // p1 and p2 take the two permits while nobody else waits: their answers name no term end.
    assert_eq!(report(conn, p1, 0, 1), (1, 1, 1));
    assert_eq!(report(conn, p2, 0, 1), (1, 1, 1));
    std::thread::sleep(Duration::from_millis(120));
    // p3 comes: every base is 0, and both terms ran out. Its report tells the first, p1.
    assert_eq!(report(conn, p3, 0, 1), (0, 0, 0));
    assert_eq!(told(&mut pubsub), [p1]);
    // p1 reports while its call still runs: capped at its base, it drains.
    assert_eq!(report(conn, p1, 1, 2), (0, 1, 0));
    // p3's next report tells p2, and not p1 again.
    assert_eq!(report(conn, p3, 0, 2), (0, 0, 0));
    assert_eq!(told(&mut pubsub), [p2]);
    assert_eq!(report(conn, p2, 1, 2), (0, 1, 0));
    // p1's call ended: it gives its permit back, and the queue's head, p3, is handed it: told
    // what it holds now (1) and the time to its term's end (p1 queues behind it).
    assert_eq!(report(conn, p1, 0, 3), (0, 0, 0));
    assert_eq!(told(&mut pubsub), [p3]);
    let held: String = redis::cmd("HGET")
        .arg(shares_key("told"))
        .arg(p3)
        .query(conn)
        .unwrap();
    assert!(held.starts_with("1:1:"), "p3 holds 1 on the server: {held}");
    // p3's next report says it runs its call under the turn: kept, with its term's end.
    let taken = turn(conn, "told", p3, (1, 3), 600, (0, 0));
    assert_eq!((taken.1, taken.2), (1, 1));
    assert!(taken.8 > 0, "a term's end: {taken:?}");
    std::thread::sleep(Duration::from_millis(120));
    // Its term ran out; p1's report tells nobody: p3 gives back on its own, and p2 knows.
    assert_eq!(report(conn, p1, 0, 4), (0, 0, 0));
    assert_eq!(told(&mut pubsub), Vec::<String>::new());
}

/// A permit given back while others wait in the turns is handed to the head of the queue by
/// the report that gives it back: the head's entry holds it, and its word says what it holds
/// and the time to its term's end, at the budget's state then. A report sent after hearing it
/// (its `seen` at that state) that holds nothing gives it back; one sent without hearing it
/// keeps it.
#[test]
fn a_permit_given_back_is_handed_to_the_head_of_the_turns() {
    let Some(mut server) = server() else {
        return;
    };
    let (p1, p2, p3) = TURNS;
    let mut listener = server.0.conn();
    let mut pubsub = listen(&mut listener, &[p1, p3]);
    let conn = &mut server.1;
    let report = |conn: &mut redis::Connection, p: &str, holding: u64, seq: u64, seen| {
        cap_has_base(turn(conn, "handed", p, (holding, seq), 600, seen))
    };
    let word = |pubsub: &mut redis::PubSub<'_>| -> String { words(pubsub).remove(0) };
    assert_eq!(report(conn, p1, 0, 1, (0, 0)), (1, 1, 1));
    assert_eq!(report(conn, p2, 0, 1, (0, 0)), (1, 1, 1));
    assert_eq!(report(conn, p3, 0, 1, (0, 0)), (0, 0, 0), "p3 queues");
    // p1 gives its permit back (its call ended): p3 is handed it, and p1 queues behind.
    assert_eq!(report(conn, p1, 0, 2, (0, 0)), (0, 0, 0));
    let handed = word(&mut pubsub);
    let (id, rest) = handed.split_once('@').unwrap();
    assert_eq!(id, p3);
    let (at, what) = rest.split_once('+').expect("a turn handed over");
    let (epoch, version) = at.split_once('.').unwrap();
    let (epoch, version) = (
        epoch.parse::<u64>().unwrap(),
        version.parse::<u64>().unwrap(),
    );
    let (holds, term_ms) = what.split_once('.').unwrap();
    assert_eq!(holds, "1");
    let term_ms = term_ms.parse::<u64>().unwrap();
    assert!(
        (1..=100).contains(&term_ms),
        "a term of 100 ms, p1 waiting: {term_ms}"
    );
    // Its entry holds it in the format processes of earlier versions read (held, wants,
    // expiry, seq); the turn's end and the version it was handed at are kept apart.
    let entry: String = redis::cmd("HGET")
        .arg(shares_key("handed"))
        .arg(p3)
        .query(conn)
        .unwrap();
    let fields: Vec<&str> = entry.split(':').collect();
    assert!(fields.len() == 4 && fields[0] == "1", "{entry}");
    let kept: String = redis::cmd("HGET")
        .arg(share_keys("handed")[9].as_str())
        .arg(p3)
        .query(conn)
        .unwrap();
    assert!(kept.ends_with(&format!(":{version}")), "{kept}");
    // A report p3 sent before it heard of the turn (it says it runs nothing, and has seen no
    // state of the budget) keeps the turn for it, and the answer tells it.
    let answer = turn(conn, "handed", p3, (0, 2), 600, (0, 0));
    assert_eq!(cap_has_base(answer), (1, 1, 0), "kept for p3");
    // p3 ran its call and gives the turn back, knowing of it: handed on to p1, the head now.
    assert_eq!(report(conn, p3, 0, 3, (answer.5, answer.6)), (0, 0, 0));
    let handed = word(&mut pubsub);
    assert!(
        handed.starts_with(&format!("{p1}@")) && handed.contains('+'),
        "{handed}"
    );
    assert!(words(&mut pubsub).is_empty());
    let _ = epoch;
}

/// The turns' tests' fourth process.
const P4: &str = "00000000000000p4-d";

/// Two processes take the two permits of `budget` (`TURNS`' first two: a base of 1 each), then
/// `waiting` queue for a turn, in order; every report with a lease of `lease_ms`.
fn two_hold_then_queue(
    conn: &mut redis::Connection,
    budget: &str,
    lease_ms: u64,
    waiting: &[&str],
) {
    let (p1, p2, _) = TURNS;
    for p in [p1, p2] {
        assert_eq!(
            cap_has_base(turn(conn, budget, p, (0, 1), lease_ms, (0, 0))),
            (1, 1, 1)
        );
    }
    for p in waiting {
        let answer = cap_has_base(turn(conn, budget, p, (0, 1), lease_ms, (0, 0)));
        assert_eq!(answer, (0, 0, 0), "{p} queues");
    }
}

/// A turn is not handed to a process nobody listens for (its grants channel has no
/// subscriber: the process was killed, and its connection went with it): the next head takes
/// it. The gone one, which reserves nothing, keeps its entry while its last report is less
/// than a lease old (a live process whose channel is reconnecting reports once it is back),
/// and is dropped by the first hand-over past that, instead of three leases after its last
/// report. (Before, the permit idled at the gone process until its entry expired.)
#[test]
fn a_turn_is_not_handed_to_a_process_that_no_longer_listens() {
    let Some(mut server) = server() else {
        return;
    };
    let (p1, p2, p3) = TURNS;
    let p4 = P4;
    let mut listener = server.0.conn();
    let mut pubsub = listen(&mut listener, &[p1, p2, p4]);
    // p3 listened, then was killed: its connection is gone, and Redis has seen it go.
    let mut killed = server.0.conn();
    drop(listen(&mut killed, &[p3]));
    drop(killed);
    let conn = &mut server.1;
    let channel = grants_channel(&p3[..16]);
    let listeners = |conn: &mut redis::Connection| -> u64 {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(conn)
            .unwrap();
        n
    };
    let gone = Instant::now();
    while listeners(conn) > 0 {
        assert!(
            gone.elapsed() < Duration::from_secs(5),
            "p3's connection closes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = |conn: &mut redis::Connection, p: &str, holding: u64, seq: u64| {
        cap_has_base(turn(conn, "gone", p, (holding, seq), 300, (0, 0)))
    };
    two_hold_then_queue(conn, "gone", 300, &[p3, p4]);
    // p1 gives its permit back: p3 heads the turns but is gone; p4 is handed the permit.
    assert_eq!(report(conn, p1, 0, 2), (0, 0, 0));
    let told = words(&mut pubsub);
    assert!(
        told.len() == 1 && told[0].starts_with(&format!("{p4}@")) && told[0].contains('+'),
        "{told:?}"
    );
    let entry = |conn: &mut redis::Connection, p: &str| -> Option<String> {
        redis::cmd("HGET")
            .arg(shares_key("gone"))
            .arg(p)
            .query(conn)
            .unwrap()
    };
    assert!(entry(conn, p4).unwrap().starts_with("1:"), "p4 holds it");
    assert!(
        entry(conn, p3).is_some(),
        "p3 reported less than a lease ago"
    );
    // A lease on, p2's entry (a holder's: one lease) has expired; p1's renewal drops it and
    // hands its permit on: p3, gone and silent for more than a lease, is dropped.
    std::thread::sleep(Duration::from_millis(320));
    let _ = report(conn, p1, 0, 3);
    assert_eq!(entry(conn, p3), None, "p3 is dropped");
    let sums: Vec<u64> = redis::cmd("HMGET")
        .arg(share_keys("gone")[6].as_str())
        .arg("reserved")
        .arg("wants")
        .arg("n")
        .query(conn)
        .unwrap();
    assert_eq!(sums, [1, 2, 2], "p4 holds one; p1 and p4 want one each");
}

/// A turn handed over keeps the entry's expiry of the waiter it was handed to (three leases from
/// its last report), so that expiry says nothing of whether it reported since its term began: a
/// turn it has not answered for says it has not. A process that queues once that turn's term
/// has run out (and a term more: its holder was told when it ends) tells it to give back.
#[test]
fn a_handed_turn_not_answered_for_is_told_when_others_queue_past_its_term() {
    let Some(mut server) = server() else {
        return;
    };
    let (p1, p2, p3) = TURNS;
    let p4 = P4;
    let mut listener = server.0.conn();
    let mut pubsub = listen(&mut listener, &[p1, p2, p3, p4]);
    let conn = &mut server.1;
    let report = |conn: &mut redis::Connection, p: &str, holding: u64, seq: u64| {
        cap_has_base(turn(conn, "unanswered", p, (holding, seq), 600, (0, 0)))
    };
    two_hold_then_queue(conn, "unanswered", 600, &[p3]);
    // p1 gives its permit back and queues again: p3 is handed it, for a term.
    assert_eq!(report(conn, p1, 0, 2), (0, 0, 0));
    let told = words(&mut pubsub);
    assert!(
        told.len() == 1 && told[0].starts_with(&format!("{p3}@")) && told[0].contains("+1."),
        "{told:?}"
    );
    // Two terms on (a term is a sixth of the lease), p2 renews (and is capped: p1 waits),
    // then p4 queues: p3 has held its extra past its term's end and a term more, and has not
    // answered for it: told.
    std::thread::sleep(Duration::from_millis(220));
    assert_eq!(report(conn, p2, 1, 2), (0, 1, 0));
    assert_eq!(report(conn, p4, 0, 1), (0, 0, 0), "p4 queues");
    let told = words(&mut pubsub);
    assert!(
        told.len() == 1 && told[0].starts_with(&format!("{p3}@")) && !told[0].contains('+'),
        "{told:?}"
    );
}

/// An entry that reserves nothing and only waits for a turn (its base is 0) lives three
/// leases, and the answer says so; one that holds a permit lives one.
#[test]
fn a_process_that_only_waits_for_a_turn_keeps_its_entry_three_leases() {
    let Some(mut server) = server() else {
        return;
    };
    let (p1, p2, p3) = TURNS;
    let conn = &mut server.1;
    let life = |conn: &mut redis::Connection, p: &str| turn(conn, "life", p, (0, 1), 600, (0, 0)).9;
    assert_eq!(life(conn, p1), 600, "p1 holds one");
    assert_eq!(life(conn, p2), 600);
    assert_eq!(life(conn, p3), 1800, "p3 only waits");
    let expiry = |conn: &mut redis::Connection, p: &str| -> u64 {
        redis::cmd("ZSCORE")
            .arg(share_keys("life")[2].as_str())
            .arg(p)
            .query(conn)
            .unwrap()
    };
    let gap = expiry(conn, p3) - expiry(conn, p1);
    assert!((1100..=1300).contains(&gap), "{gap} ms");
}

/// What an expired entry reserved is handed on by the report that drops it, as a permit given
/// back is: the head of the turns gets it without waiting for its own next report (which,
/// renewing every two leases, could be long in coming).
#[test]
fn permits_of_an_expired_entry_are_handed_to_the_head_of_the_turns() {
    let Some(mut server) = server() else {
        return;
    };
    let (p1, p2, p3) = TURNS;
    let mut listener = server.0.conn();
    let mut pubsub = listen(&mut listener, &[p1, p2, p3, P4]);
    let conn = &mut server.1;
    let report = |conn: &mut redis::Connection, p: &str, holding: u64, seq: u64| {
        cap_has_base(turn(conn, "expired", p, (holding, seq), 300, (0, 0)))
    };
    two_hold_then_queue(conn, "expired", 300, &[p3, P4]);
    assert!(words(&mut pubsub).is_empty());
    // p1 stops reporting (a holder killed); a lease on, p2's renewal drops its entry (three
    // processes for two permits: every base is still 0)...
    std::thread::sleep(Duration::from_millis(350));
    let _ = report(conn, p2, 1, 2);
    // ...and hands its permit to p3.
    let told = words(&mut pubsub);
    assert!(
        told.iter()
            .any(|w| w.starts_with(&format!("{p3}@")) && w.contains("+1.")),
        "{told:?}"
    );
}

/// A turn handed to a process that holds its base (a base of 1 here) has a full term from
/// when it is handed, not from when the process began to hold its base (long past: a term of
/// 0, held until a renewal while others waited).
#[test]
fn a_turn_handed_to_a_holder_of_its_base_has_a_full_term() {
    let Some(mut server) = server() else {
        return;
    };
    let (p1, p2, p3) = TURNS;
    let mut listener = server.0.conn();
    let mut pubsub = listen(&mut listener, &[p1]);
    let conn = &mut server.1;
    // A limit of 4 over three processes that want 2: bases of 1, one permit in turns.
    let report = |conn: &mut redis::Connection, p: &str, holding: u64, seq: u64| {
        let r: Shares = scripts()
            .shares
            .key(&share_keys("base")[..])
            .arg(p)
            .arg(2)
            .arg(holding)
            .arg(seq)
            .arg(4)
            .arg(600)
            .arg(0)
            .arg(0)
            .arg(0)
            .invoke(conn)
            .unwrap();
        (r.1, r.2, r.3)
    };
    assert_eq!(report(conn, p1, 0, 1), (2, 2, 2));
    assert_eq!(report(conn, p2, 0, 1), (2, 2, 2));
    assert_eq!(report(conn, p3, 0, 1), (0, 0, 1), "below its base");
    // p1 is capped at its base and gives one back, which p3 takes; p1 queues for the turn.
    assert_eq!(report(conn, p1, 2, 2), (1, 2, 1));
    assert_eq!(report(conn, p1, 1, 3), (1, 1, 1));
    assert_eq!(report(conn, p3, 0, 2), (1, 1, 1));
    // A term after p2 began to hold, it is capped, and its give-back hands the turn to p1.
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(report(conn, p2, 2, 2), (1, 2, 1));
    let _ = words(&mut pubsub);
    assert_eq!(report(conn, p2, 1, 3), (1, 1, 1));
    let handed = words(&mut pubsub);
    let what = handed
        .iter()
        .find_map(|w| w.strip_prefix(&format!("{p1}@")))
        .and_then(|rest| rest.split_once('+'))
        .unwrap_or_else(|| panic!("p1 is handed the turn: {handed:?}"))
        .1;
    let (holds, term_ms) = what.split_once('.').unwrap();
    assert_eq!(holds, "2");
    let term_ms = term_ms.parse::<u64>().unwrap();
    assert!((90..=100).contains(&term_ms), "a full term: {term_ms} ms");
}

#[test]
fn a_process_that_stops_reporting_frees_its_share_one_lease_later() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    assert_eq!(shares(conn, "dead", (512, 0, 1), 100, false).2, 512);
    assert_eq!(shares(conn, "alive", (512, 0, 1), 5000, false).2, 0);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(
        shares(conn, "alive", (512, 0, 2), 5000, false),
        (1, 512, 512, 512, 1),
        "the dead one's entry expired"
    );
}

#[test]
fn gcra_lets_a_burst_through_then_spaces_calls() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    let mut check = || -> (u8, i64) {
        GCRA.key(rate_key("r"))
            .arg(100_000) // 100 ms
            .arg(2)
            .invoke(conn)
            .unwrap()
    };
    assert_eq!(check(), (1, 0));
    assert_eq!(check(), (1, 0));
    let (allowed, wait) = check();
    assert_eq!(allowed, 0);
    assert!(wait > 0 && wait <= 100_000, "{wait}");
}

#[test]
fn keys_share_the_budget_hash_tag() {
    assert_eq!(holders_key("records"), "inflight:{records}:holders");
    assert_eq!(
        budget_keys("records"),
        [
            "inflight:{records}:holders",
            "inflight:{records}:queue",
            "inflight:{records}:queue_expiry",
            "inflight:{records}:arrivals",
            "inflight:{records}:epoch",
            "inflight:{records}:rate",
            "inflight:{records}:shares",
            "inflight:{records}:shares_expiry",
            "inflight:{records}:shares_turns",
            "inflight:{records}:shares_extra",
            "inflight:{records}:shares_below",
            "inflight:{records}:shares_sums",
            "inflight:{records}:shares_wants",
            "inflight:{records}:shares_has",
            "inflight:{records}:shares_terms"
        ]
    );
    assert_eq!(rate_key("records"), "inflight:{records}:rate");
    assert_eq!(
        grants_channel("0123456789abcdef"),
        "inflight:grants:0123456789abcdef"
    );
    assert_eq!(
        sharded_grants_channel("records", "0123456789abcdef"),
        "inflight:{records}:grants:0123456789abcdef"
    );
}

#[test]
fn a_lost_state_learns_for_one_lease_and_takes_back_the_calls_still_running() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    // A fresh budget, first met by a process that has seen nothing: no learning.
    let first = acquire_seen(conn, "a", (0, 0), 2, 400);
    assert_eq!((first.2, first.3), (0, 1), "granted at once");
    let seen = (first.0, first.1);
    assert!(seen.0 > 0 && seen.1 > 0);
    // The state is lost (a restart without persistence, a flush).
    redis::cmd("FLUSHALL").exec(conn).unwrap();
    // A newcomer is not granted while the old holder's lease is unknown...
    let b = acquire_seen(conn, "b", seen, 2, 400);
    assert_ne!(b.0, seen.0, "a new epoch");
    assert_eq!(b.3, 0, "nothing new is granted while learning");
    assert!(b.2 > 300 && b.2 <= 400, "learning for one lease: {}", b.2);
    assert!(b.6 > 0 && b.6 <= 400, "told when to ask again: {}", b.6);
    // ...the holder re-registers its lease and a local call at its next renewal...
    let renewed = renew_seen(conn, &["a"], &["a-local"], seen, 400);
    assert_eq!((renewed.3, renewed.4.len()), (1, 0), "added back, not lost");
    let mut holders: Vec<String> = redis::cmd("ZRANGE")
        .arg(holders_key("b"))
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap();
    holders.sort();
    assert_eq!(holders, ["a", "a-local"]);
    // ...and once learning ends, the two running calls (renewed meanwhile) fill the limit.
    std::thread::sleep(Duration::from_millis(250));
    let seen = (renewed.0, renewed.1);
    assert_eq!(renew_seen(conn, &["a"], &["a-local"], seen, 400).3, 0);
    std::thread::sleep(Duration::from_millis(200));
    let c = acquire_seen(conn, "c", seen, 2, 400);
    assert_eq!((c.2, c.3), (0, 0), "learning over, but the limit is held");
    // A running call ends: its permit goes to the earliest waiter, "b", queued while the
    // budget learned.
    assert_eq!(release(conn, &["a-local"], 2, 400), 1);
    assert_eq!(acquire_seen(conn, "b", seen, 2, 400).3, 1);
    assert_eq!(acquire_seen(conn, "c", seen, 2, 400).3, 0);
}

#[test]
fn writes_lost_by_a_failover_are_seen_by_the_process_that_saw_them() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    let a = acquire_seen(conn, "a", (0, 0), 3, 5000);
    // A process saw a later version than the server holds: the writes it saw are gone.
    let later = (a.0, a.1 + 5);
    let b = acquire_seen(conn, "b", later, 3, 5000);
    assert!(b.0 > a.0, "a new epoch");
    assert_eq!(b.3, 0, "learning: nothing new granted");
    // A process that saw only the old epoch is behind: its lease is renewed, and one the
    // server lost is added back.
    let r = renew_seen(conn, &["a", "gone"], &[], (a.0, a.1), 5000);
    assert_eq!((r.3, r.4.len()), (1, 0));
    // With the epoch unchanged, a lease the server does not hold was taken back: lost.
    let r = renew_seen(conn, &["never"], &[], (r.0, r.1), 5000);
    assert_eq!(r.4, ["never"]);
}

#[test]
fn shares_keep_what_each_process_runs_while_the_budget_learns() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    let (p1, p2) = ("00000000000000p1-a", "00000000000000p2-b");
    let r1 = shares_seen(conn, p1, (300, 0, 1), 400, false, (0, 0));
    let r2 = shares_seen(conn, p2, (300, 0, 1), 400, false, (0, 0));
    assert_eq!(
        (r1.2, r2.2),
        (300, 212),
        "p2 grows only from what p1 left free"
    );
    redis::cmd("FLUSHALL").exec(conn).unwrap();
    // After the loss, p2 reports first with its 212 running: kept whole, and it does not
    // grow into the permits p1 still runs.
    let a2 = shares_seen(conn, p2, (300, 212, 3), 400, false, (r2.5, r2.6));
    assert_eq!((a2.0, a2.2), (1, 212));
    assert!(a2.7 > 300, "learning: {}", a2.7);
    let a1 = shares_seen(conn, p1, (300, 300, 3), 400, false, (r1.5, r1.6));
    assert_eq!(a1.2, 300, "p1's running calls count whole too");
    assert!(a1.2 + a2.2 <= 512);
    std::thread::sleep(Duration::from_millis(250));
    let b1 = shares_seen(conn, p1, (300, 300, 4), 400, false, (a1.5, a1.6));
    assert_eq!(b1.2, 300);
    std::thread::sleep(Duration::from_millis(200));
    let b2 = shares_seen(conn, p2, (300, 212, 4), 400, false, (a2.5, a2.6));
    assert_eq!((b2.2, b2.7), (212, 0), "nothing free to grow into");
}

#[test]
fn shares_still_running_past_the_limit_stay_counted_once_the_budget_has_learned() {
    let Some(mut server) = server() else {
        return;
    };
    let conn = &mut server.1;
    let (p1, p2) = ("00000000000000p1-a", "00000000000000p2-b");
    let r1 = shares_seen(conn, p1, (500, 0, 1), 1000, false, (0, 0));
    let r2 = shares_seen(conn, p2, (100, 0, 1), 1000, false, (0, 0));
    assert_eq!((r1.2, r2.2), (500, 12));
    redis::cmd("FLUSHALL").exec(conn).unwrap();
    // After the loss, p1 runs its 500 and p2 100 (12 under its share, 88 its fallback admitted
    // while Redis was away): both kept whole while the budget learns, 600 on a limit of 512.
    let a1 = shares_seen(conn, p1, (500, 500, 2), 1000, false, (r1.5, r1.6));
    let a2 = shares_seen(conn, p2, (100, 100, 2), 1000, false, (r2.5, r2.6));
    assert_eq!((a1.2, a2.2), (500, 100));
    std::thread::sleep(Duration::from_millis(600));
    let b1 = shares_seen(conn, p1, (500, 500, 3), 1000, false, (a1.5, a1.6));
    let b2 = shares_seen(conn, p2, (100, 100, 3), 1000, false, (a2.5, a2.6));
    assert_eq!((b1.2, b2.2), (500, 100));
    std::thread::sleep(Duration::from_millis(500));
    // Learned, and still 600 running: p1's calls stay counted, not cut to what p2 leaves.
    let c1 = shares_seen(conn, p1, (500, 500, 4), 1000, false, (b1.5, b1.6));
    assert_eq!((c1.2, c1.7), (500, 0), "p1 runs 500");
    // ... but starts nothing new while p2's 100 run: 412 at most, not the 500 it kept.
    assert_eq!(c1.1, 412, "p1 may run what p2 leaves");
    assert_eq!(b1.1, 412, "while learning too");
    // p2's calls end: it grows only from what p1's running calls leave free.
    let c2 = shares_seen(conn, p2, (100, 0, 4), 1000, false, (b2.5, b2.6));
    assert_eq!(c2.2, 12, "500 of 512 run in p1");
}
