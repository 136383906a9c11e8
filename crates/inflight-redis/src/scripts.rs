//! The Lua scripts a fleet budget runs on the Redis server: acquire, renew, release, and the GCRA
//! of a fleet rate limit. Each reads the server's clock (`TIME`), never a client's.
//!
//! Every key a script touches is passed in `KEYS` and carries the budget's hash tag
//! (`inflight:{name}:...`), so the scripts run on Redis Cluster too. Since Redis 5 scripts are
//! replicated by their effects, so reading `TIME` inside one is safe.

use std::sync::LazyLock;

use redis::Script;

/// Takes a lease for `ARGV[1]` if fewer than `ARGV[2]` unexpired leases are held.
///
/// `KEYS[1]`: the holders, a sorted set of lease id to expiry (server milliseconds).
/// `KEYS[2]`: the waiting flag, set on a refusal (for `ARGV[4]` ms) so that releases are
/// announced only while someone waits.
/// `ARGV`: lease id, limit, lease in milliseconds, waiting flag lifetime in milliseconds.
///
/// Expired leases are reclaimed whenever they are what stands in the way (a holder killed with
/// SIGKILL frees its permits within one lease); while the set has room, they are left for later,
/// which keeps the common case to three commands. The set never holds more than `limit` entries,
/// so it needs no expiry of its own (one that lapsed while a lease was held would drop it). Idempotent: an id already holding a lease is
/// granted again with its expiry pushed back, so a retry after a lost reply never takes a second
/// permit.
///
/// Returns `{granted (0|1), holders after, reclaimed, ms until the earliest lease expires}`.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local reclaimed = 0
local n = redis.call('ZCARD', KEYS[1])
if n >= limit then
  reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  n = n - reclaimed
end
local added = 0
if n < limit then
  added = redis.call('ZADD', KEYS[1], 'NX', now + lease, ARGV[1])
  n = n + added
elseif redis.call('ZSCORE', KEYS[1], ARGV[1]) == false then
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = 0
  if first[2] then wait = tonumber(first[2]) - now end
  return {0, n, reclaimed, wait}
end
if added == 0 then
  -- Held already (a retry after a lost reply): its expiry moves to a full lease from now.
  redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[1])
end
return {1, n, reclaimed, 0}
"#,
    )
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

/// Gives back leases `ARGV[2..]` and, if any was held and someone waits, says so on channel
/// `ARGV[1]` so that waiters look again.
///
/// `KEYS[1]`: the holders; `KEYS[2]`: the waiting flag. Only the ids' own entries are removed: a
/// holder whose lease expired and was taken by someone else removes nothing.
///
/// Returns how many of the leases were held.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local removed = 0
for i = 2, #ARGV do
  removed = removed + redis.call('ZREM', KEYS[1], ARGV[i])
end
if removed > 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
end
return removed
"#,
    )
});

/// GCRA: lets one event through if the theoretical arrival time allows it.
///
/// `KEYS[1]`: the budget's theoretical arrival time (server microseconds).
/// `ARGV`: emission interval in microseconds, burst (events that may pass back to back).
///
/// Returns `{allowed (0|1), µs to wait before the next event would be allowed}`.
pub(crate) static GCRA: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - interval * burst
if allow_at > now then
  return {0, allow_at - now}
end
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, 0}
"#,
    )
});

/// The sorted set of a budget's lease holders.
pub(crate) fn holders_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:holders")
}

/// The flag that says someone waits for a lease of the budget.
pub(crate) fn waiting_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:waiting")
}

/// The channel a budget's releases are announced on.
pub(crate) fn released_channel(budget: &str) -> String {
    format!("inflight:{{{budget}}}:released")
}

/// The pattern that matches every budget's release channel.
pub(crate) const RELEASED_PATTERN: &str = "inflight:{*}:released";

/// The budget a release channel belongs to.
pub(crate) fn budget_of_channel(channel: &str) -> Option<&str> {
    channel
        .strip_prefix("inflight:{")?
        .strip_suffix("}:released")
}

/// Every key a fleet budget (or a fleet rate limit) of this name keeps in Redis.
pub fn budget_keys(budget: &str) -> Vec<String> {
    vec![holders_key(budget), waiting_key(budget), rate_key(budget)]
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

    /// A `redis-server` on a free loopback port, killed on drop.
    struct Server(Child, redis::Connection);

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
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(conn) = client.get_connection() {
                return Some(Server(child, conn));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn acquire(
        conn: &mut redis::Connection,
        id: &str,
        limit: u64,
        lease_ms: u64,
    ) -> (u8, u64, u64, i64) {
        ACQUIRE
            .key(holders_key("b"))
            .key(waiting_key("b"))
            .arg(id)
            .arg(limit)
            .arg(lease_ms)
            .arg(2000)
            .invoke(conn)
            .unwrap()
    }

    #[test]
    fn the_scripts_keep_the_limit_and_touch_only_their_own_lease() {
        let Some(mut server) = server() else {
            return;
        };
        let conn = &mut server.1;
        assert_eq!(acquire(conn, "a", 2, 200).0, 1);
        // A retry with the same id (a reply lost) is granted again, not twice.
        assert_eq!(acquire(conn, "a", 2, 200), (1, 1, 0, 0));
        assert_eq!(acquire(conn, "b", 2, 200).0, 1);
        let (granted, holders, _, wait) = acquire(conn, "c", 2, 200);
        assert_eq!((granted, holders), (0, 2));
        assert!(wait > 0 && wait <= 200, "{wait}");
        // Full, but a holder retrying is still granted.
        assert_eq!(acquire(conn, "b", 2, 200).0, 1);
        // A limit of 0 grants nothing, and says so.
        let zero: (u8, u64, u64, i64) = ACQUIRE
            .key(holders_key("none"))
            .key(waiting_key("none"))
            .arg("a")
            .arg(0)
            .arg(200)
            .arg(2000)
            .invoke(conn)
            .unwrap();
        assert_eq!(zero, (0, 0, 0, 0));
        // Releasing someone else's id, or one not held, removes nothing.
        let released: u8 = RELEASE
            .key(holders_key("b"))
            .key(waiting_key("b"))
            .arg(released_channel("b"))
            .arg("zzz")
            .invoke(conn)
            .unwrap();
        assert_eq!(released, 0);
        // Renew keeps "a"; "gone" was never held and is reported lost.
        let lost: Vec<String> = RENEW
            .key(holders_key("b"))
            .arg(200)
            .arg("a")
            .arg("gone")
            .invoke(conn)
            .unwrap();
        assert_eq!(lost, ["gone"]);
        // After a lease with no renewal, both expire: the next acquirer reclaims them.
        std::thread::sleep(Duration::from_millis(250));
        let (granted, holders, reclaimed, _) = acquire(conn, "c", 2, 200);
        assert_eq!((granted, holders, reclaimed), (1, 1, 2));
        let lost: Vec<String> = RENEW
            .key(holders_key("b"))
            .arg(200)
            .arg("a")
            .arg("c")
            .invoke(conn)
            .unwrap();
        assert_eq!(lost, ["a"], "an expired lease is lost to its holder");
        let released: u8 = RELEASE
            .key(holders_key("b"))
            .key(waiting_key("b"))
            .arg(released_channel("b"))
            .arg("c")
            .invoke(conn)
            .unwrap();
        assert_eq!(released, 1);
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
                "inflight:{records}:waiting",
                "inflight:{records}:rate"
            ]
        );
        assert_eq!(released_channel("records"), "inflight:{records}:released");
        assert_eq!(rate_key("records"), "inflight:{records}:rate");
        assert_eq!(waiting_key("records"), "inflight:{records}:waiting");
        assert_eq!(
            budget_of_channel(&released_channel("a.b")),
            Some("a.b"),
            "a channel names its budget"
        );
        assert_eq!(budget_of_channel("other"), None);
    }
}
