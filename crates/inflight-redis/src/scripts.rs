//! The Lua scripts a fleet budget runs on the Redis server: acquire, renew, release (with the
//! fleet's wait queue), and the GCRA of a fleet rate limit. Each reads the server's clock (`TIME`), never a client's.
//!
//! Every key a script touches is passed in `KEYS` and carries the budget's hash tag
//! (`inflight:{name}:...`), so the scripts run on Redis Cluster too. Since Redis 5 scripts are
//! replicated by their effects, so reading `TIME` inside one is safe.

use std::sync::LazyLock;

use redis::Script;

/// The part every lease script starts with: the server's clock, and `promote`, which hands
/// free permits to the earliest waiters of the fleet.
///
/// `KEYS[1]`: the holders, a sorted set of lease id to expiry (server milliseconds).
/// `KEYS[2]`: the queue, a sorted set of waiting lease id to arrival number.
/// `KEYS[3]`: the queue's expiries, a sorted set of waiting lease id to the moment its waiter
/// counts as gone unless it asks again (a waiter killed while queued blocks nobody).
/// `KEYS[4]`: the arrival counter.
///
/// `promote` first drops queue entries whose waiters stopped asking; then, if the holders are
/// at the limit, reclaims expired leases (a holder killed with SIGKILL frees its permits within
/// one lease); then, while there is room and someone waits, grants the head of the queue its
/// lease and tells it on its process's channel (`inflight:grants:` and the first
/// [`PROCESS_TOKEN_LEN`] characters of its id). So no permit is free while anyone waits: a newcomer never overtakes the queue.
const PRELUDE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function promote(limit, lease)
  local queued = redis.call('ZCARD', KEYS[2])
  if queued > 0 then
    local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
    for _, id in ipairs(gone) do
      queued = queued - redis.call('ZREM', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
    end
  end
  local reclaimed = 0
  local n = redis.call('ZCARD', KEYS[1])
  if n >= limit then
    reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
    n = n - reclaimed
  end
  while n < limit and queued > 0 do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not head then break end
    redis.call('ZREM', KEYS[2], head)
    redis.call('ZREM', KEYS[3], head)
    n = n + redis.call('ZADD', KEYS[1], now + lease, head)
    queued = queued - 1
    redis.call('PUBLISH', 'inflight:grants:' .. string.sub(head, 1, TOKEN_LEN), head)
  end
  return n, reclaimed
end
"#;

/// Takes a lease for `ARGV[1]` if a permit is free and nobody waits; otherwise puts it in the
/// queue (or keeps it there), where `promote` grants it in its turn.
///
/// `KEYS`: see [`PRELUDE`]. `ARGV`: lease id, limit, lease in milliseconds, queue entry lifetime
/// in milliseconds.
///
/// The holders never exceed `limit` entries, so the set needs no expiry of its own (one that
/// lapsed while a lease was held would drop it). Idempotent: an id already holding a lease
/// (granted from the queue, or a retry after a lost reply) is granted again with its expiry
/// pushed back, so a retry never takes a second permit; an id already queued keeps its place.
///
/// Returns `{granted (0|1), holders after, reclaimed, ms until the earliest lease expires,
/// waiters ahead of this one}`.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        PRELUDE.replace("TOKEN_LEN", &PROCESS_TOKEN_LEN.to_string()),
        r#"
local id = ARGV[1]
local limit = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local n, reclaimed = promote(limit, lease)
if redis.call('ZSCORE', KEYS[1], id) then
  redis.call('ZADD', KEYS[1], 'XX', now + lease, id)
  return {1, n, reclaimed, 0, 0}
end
if n < limit then
  redis.call('ZADD', KEYS[1], now + lease, id)
  return {1, n + 1, reclaimed, 0, 0}
end
if redis.call('ZSCORE', KEYS[2], id) == false then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), id)
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), id)
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait = 0
if first[2] then wait = tonumber(first[2]) - now end
return {0, n, reclaimed, wait, redis.call('ZRANK', KEYS[2], id)}
"#
    ))
});

/// Pushes back the expiry of each unexpired lease in `ARGV[2..]`; an expired one is removed.
///
/// `KEYS[1]`: the holders. `ARGV`: lease in milliseconds, then the lease ids.
///
/// Returns the ids that were no longer held (expired, reclaimed, or gone with a restart): their
/// holders have lost them.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
  local expiry = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if expiry and tonumber(expiry) > now then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[i])
  else
    if expiry then redis.call('ZREM', KEYS[1], ARGV[i]) end
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
"#,
    )
});

/// Gives back leases `ARGV[3..]`, whether they hold a permit or wait in the queue (a waiter that
/// gave up), then hands the freed permits to the earliest waiters (see [`PRELUDE`]).
///
/// `KEYS`: see [`PRELUDE`]. `ARGV`: limit, lease in milliseconds, lease ids. Only the ids' own
/// entries are removed: a holder whose lease expired and was taken by someone else removes
/// nothing.
///
/// Returns how many of the leases were held.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{}{}",
        PRELUDE.replace("TOKEN_LEN", &PROCESS_TOKEN_LEN.to_string()),
        r#"
local removed = 0
for i = 3, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZREM', KEYS[3], ARGV[i])
  end
end
promote(tonumber(ARGV[1]), tonumber(ARGV[2]))
return removed
"#
    ))
});

/// GCRA: lets one event through if the theoretical arrival time allows it, or, given a longest
/// wait, reserves the next slot if it comes within it (turns in the order callers reach Redis).
///
/// `KEYS[1]`: the budget's theoretical arrival time (server microseconds).
/// `ARGV`: emission interval in microseconds, burst (events that may pass back to back), and
/// optionally the longest wait in microseconds for a slot to be reserved (default 0: now or not
/// at all).
///
/// Returns `{allowed (0|1), µs to wait}`: when allowed, until the reserved slot (0 without a
/// longest wait); when not, until the next event would be allowed (nothing is reserved).
pub(crate) static GCRA: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3] or '0')
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - interval * burst
local wait = allow_at - now
if wait < 0 then wait = 0 end
if wait > max_wait then
  return {0, wait}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, wait}
"#,
    )
});

/// A report of one process of a share budget (see `shares`): what it may still be running, what
/// it wants, and what it gets. The budget's processes are one hash, `KEYS[1]`, of process id to
/// `has:wants:expiry:seq` (expiry in server milliseconds).
///
/// `ARGV`: process id, wants, holding (the most calls it may run until it hears back), report
/// number, limit, lease in milliseconds, leaving (`1`: it wants nothing more; its entry goes
/// when it holds nothing, and otherwise keeps `holding` until it expires).
///
/// Entries past their expiry are dropped (a process killed frees its share one lease after its
/// last report). The reporter's reservation becomes `holding`, then grows towards its max-min
/// fair target of the wants only from permits no entry holds, so the reservations never sum
/// past the limit. A report numbered no higher than the last one applied (a late duplicate) is
/// ignored. When the reporter is short of its target, each process holding more than its own is
/// told on its channel to report (it gives back as its calls end); when the reporter gave
/// permits back, each process short of its target is told, so freed permits are taken up at
/// once rather than at the next renewal.
///
/// Returns `{applied (0|1), cap, has, target, processes}`.
pub(crate) static SHARES: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ARGV[1]
local wants = tonumber(ARGV[2])
local holding = tonumber(ARGV[3])
local seq = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local lease = tonumber(ARGV[6])
local raw = redis.call('HGETALL', KEYS[1])
local ids, has, want, gone = {{}}, {{}}, {{}}, {{}}
local mine = nil
local reserved = 0
for i = 1, #raw, 2 do
  local h, w, e, s = string.match(raw[i + 1], '^(%d+):(%d+):(%d+):(%d+)$')
  h, w, e, s = tonumber(h), tonumber(w), tonumber(e), tonumber(s)
  if raw[i] == me then
    mine = {{h, w, e, s}}
  elseif e <= now then
    gone[#gone + 1] = raw[i]
  else
    ids[#ids + 1] = raw[i]
    has[raw[i]] = h
    want[raw[i]] = w
    reserved = reserved + h
  end
end
for i = 1, #gone, 1000 do
  redis.call('HDEL', KEYS[1], unpack(gone, i, math.min(i + 999, #gone)))
end
if mine and mine[3] > now and seq <= mine[4] then
  return {{0, 0, 0, 0, #ids + 1}}
end
local gone_now = false
if ARGV[7] == '1' then
  -- Leaving: it wants nothing more; calls it still runs keep their permits until they
  -- expire with the entry.
  wants = 0
  if holding == 0 then
    redis.call('HDEL', KEYS[1], me)
    gone_now = true
  end
end
local before = 0
if mine and mine[3] > now then before = mine[1] end
local mhas = math.min(holding, math.max(limit - reserved, 0))
ids[#ids + 1] = me
want[me] = wants
local order = {{}}
for i, id in ipairs(ids) do order[i] = id end
table.sort(order, function(a, b)
  if want[a] ~= want[b] then return want[a] < want[b] end
  return a < b
end)
local target, left = {{}}, limit
for k, id in ipairs(order) do
  local fair = math.floor(left / (#order - k + 1))
  target[id] = math.min(want[id], fair)
  left = left - target[id]
end
if target[me] > mhas then
  local free = math.max(limit - reserved - mhas, 0)
  mhas = mhas + math.min(target[me] - mhas, free)
end
local cap = math.min(mhas, target[me])
if not gone_now then
  redis.call('HSET', KEYS[1], me, mhas .. ':' .. wants .. ':' .. (now + lease) .. ':' .. seq)
end
for i = 1, #ids - 1 do
  local id = ids[i]
  if (cap < target[me] and has[id] > target[id]) or (mhas < before and has[id] < target[id]) then
    redis.call('PUBLISH', 'inflight:grants:' .. string.sub(id, 1, {token}), id)
  end
end
return {{1, cap, mhas, target[me], #ids}}
"#,
        token = PROCESS_TOKEN_LEN
    ))
});

/// The hash of a share budget's processes.
pub(crate) fn shares_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:shares")
}

/// The sorted set of a budget's lease holders.
pub(crate) fn holders_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:holders")
}

/// The sorted set of a budget's waiters, by arrival.
pub(crate) fn queue_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:queue")
}

/// The sorted set of the moments a budget's waiters count as gone unless they ask again.
pub(crate) fn queue_expiry_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:queue_expiry")
}

/// The counter that numbers a budget's waiters by arrival.
pub(crate) fn arrivals_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:arrivals")
}

/// The keys of a budget the lease scripts take, in their order.
pub(crate) fn lease_keys(budget: &str) -> [String; 4] {
    [
        holders_key(budget),
        queue_key(budget),
        queue_expiry_key(budget),
        arrivals_key(budget),
    ]
}

/// How many characters of a lease id name the process that asked for it.
pub(crate) const PROCESS_TOKEN_LEN: usize = 16;

/// The channel on which a process is told that a lease it queued for was granted; the message
/// is the lease id, whose first [`PROCESS_TOKEN_LEN`] characters are `token`.
pub(crate) fn grants_channel(token: &str) -> String {
    format!("inflight:grants:{token}")
}

/// Every key a fleet budget (or a fleet rate limit) of this name keeps in Redis.
pub fn budget_keys(budget: &str) -> Vec<String> {
    let mut keys = lease_keys(budget).to_vec();
    keys.push(rate_key(budget));
    keys.push(shares_key(budget));
    keys
}

/// The key of a fleet rate limit's theoretical arrival time.
pub(crate) fn rate_key(name: &str) -> String {
    format!("inflight:{{{name}}}:rate")
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use super::*;

    /// A `redis-server` on a free loopback port, killed on drop; a connection, and its URL.
    struct Server(Child, redis::Connection, String);

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn server() -> Option<Server> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let Ok(child) = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        else {
            eprintln!("skipped: redis-server is not installed");
            return None;
        };
        let url = format!("redis://127.0.0.1:{port}");
        let client = redis::Client::open(url.as_str()).ok()?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(conn) = client.get_connection() {
                return Some(Server(child, conn, url));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn call(script: &'static Script, budget: &str) -> redis::ScriptInvocation<'static> {
        let mut call = script.prepare_invoke();
        for key in lease_keys(budget) {
            call.key(key);
        }
        call
    }

    fn acquire(
        conn: &mut redis::Connection,
        id: &str,
        limit: u64,
        lease_ms: u64,
    ) -> (u8, u64, u64, i64, u64) {
        call(&ACQUIRE, "b")
            .arg(id)
            .arg(limit)
            .arg(lease_ms)
            .arg(2000)
            .invoke(conn)
            .unwrap()
    }

    fn release(conn: &mut redis::Connection, ids: &[&str], limit: u64, lease_ms: u64) -> u64 {
        let mut call = call(&RELEASE, "b");
        call.arg(limit).arg(lease_ms);
        for id in ids {
            call.arg(*id);
        }
        call.invoke(conn).unwrap()
    }

    fn renew(conn: &mut redis::Connection, ids: &[&str], lease_ms: u64) -> Vec<String> {
        let mut call = RENEW.key(holders_key("b"));
        call.arg(lease_ms);
        for id in ids {
            call.arg(*id);
        }
        call.invoke(conn).unwrap()
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
        let zero: (u8, u64, u64, i64, u64) = call(&ACQUIRE, "none")
            .arg("a")
            .arg(0)
            .arg(200)
            .arg(2000)
            .invoke(conn)
            .unwrap();
        assert_eq!(zero, (0, 0, 0, 0, 0));
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
        let client = redis::Client::open(server.2.as_str()).unwrap();
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

    #[test]
    fn a_waiter_that_stops_asking_leaves_the_queue_when_its_entry_expires() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        assert_eq!(acquire(conn, "h", 1, 5000).0, 1);
        // "dead" queues with an entry of 100 ms and never asks again.
        let _: (u8, u64, u64, i64, u64) = call(&ACQUIRE, "b")
            .arg("dead")
            .arg(1)
            .arg(5000)
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
        SHARES
            .key(shares_key("s"))
            .arg(process)
            .arg(wants)
            .arg(holding)
            .arg(seq)
            .arg(512)
            .arg(lease_ms)
            .arg(u8::from(leaving))
            .invoke(conn)
            .unwrap()
    }

    #[test]
    fn the_shares_script_splits_max_min_and_grows_only_from_free_permits() {
        let Some(mut server) = server() else {
            return;
        };
        let client = redis::Client::open(server.2.as_str()).unwrap();
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
        assert_eq!(message.get_payload::<String>().unwrap(), p1);
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
                "inflight:{records}:rate",
                "inflight:{records}:shares"
            ]
        );
        assert_eq!(rate_key("records"), "inflight:{records}:rate");
        assert_eq!(
            grants_channel("0123456789abcdef"),
            "inflight:grants:0123456789abcdef"
        );
    }
}
