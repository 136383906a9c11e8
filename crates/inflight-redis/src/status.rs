//! [`FleetStatus`]: what the fleet's Redis holds of one budget, as `inflight fleet status`
//! shows it, read by one script on the node that owns the budget.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

/// One budget as the fleet's Redis holds it now: see [`RedisFleet::status`](crate::RedisFleet::status).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetStatus {
    /// The node that owns the budget (`host:port`, on one server and on Sentinel the address
    /// this process reached it at).
    pub node: String,
    /// Its role (`master`, or `slave` for a replica, as Redis says).
    pub role: String,
    /// Leases held now, across the fleet (calls at the dependency, as far as Redis knows).
    pub holders: u64,
    /// Leases past their expiry that no acquire has taken back yet (their holders stopped
    /// renewing).
    pub expired: u64,
    /// Of the leases held, those of calls a process admitted on its local fallback while
    /// Redis was away, registered since.
    pub local_registered: u64,
    /// Callers waiting in the fleet's queue.
    pub waiters: u64,
    /// The budget's epoch (0 before any process met it): it moves when Redis loses the state.
    pub epoch: u64,
    /// Writes to the budget's state in this epoch.
    pub version: u64,
    /// How long the budget goes on learning (granting nothing new after a loss of state).
    pub learning: Duration,
    /// Processes holding a share (`lease_mode = "shares"`).
    pub share_processes: u64,
    /// Permits reserved by those shares.
    pub shares_reserved: u64,
    /// What those processes want.
    pub shares_wanted: u64,
}

/// Reads a budget's state without changing it. `KEYS`: the lease keys, then the shares hash.
///
/// Returns `{holders, all leases, waiters, epoch, version, ms of learning left, share
/// processes, reserved, wanted, node, role, local registrations}`.
pub(crate) static STATUS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local all = redis.call('ZCARD', KEYS[1])
local waiters = redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')
local locals = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')) do
  if string.sub(id, 17, 17) == 'L' then locals = locals + 1 end
end
local m = redis.call('HMGET', KEYS[5], 'epoch', 'version', 'learn')
local learn = tonumber(m[3]) or 0
local n, has, wants = 0, 0, 0
local raw = redis.call('HGETALL', KEYS[6])
for i = 1, #raw, 2 do
  local h, w, e = string.match(raw[i + 1], '^(%d+):(%d+):(%d+):')
  if e and tonumber(e) > now then
    n = n + 1
    has = has + tonumber(h)
    wants = wants + tonumber(w)
  end
end
local node = ':' .. (string.match(redis.call('INFO', 'server'), 'tcp_port:(%d+)') or '?')
if string.match(redis.call('INFO', 'cluster'), 'cluster_enabled:1') then
  for line in string.gmatch(redis.call('CLUSTER', 'NODES'), '[^\n]+') do
    if string.find(line, 'myself', 1, true) then
      node = string.match(line, '^%S+ ([^@ ]+)') or node
    end
  end
end
local role = string.match(redis.call('INFO', 'replication'), 'role:(%a+)') or '?'
return {live, all, waiters, tonumber(m[1]) or 0, tonumber(m[2]) or 0, math.max(learn - now, 0),
  n, has, wants, node, role, locals}
"#,
    )
});

/// The status script's reply.
pub(crate) type StatusReply = (
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    String,
    String,
    u64,
);

pub(crate) fn from_reply(r: StatusReply) -> FleetStatus {
    FleetStatus {
        holders: r.0,
        expired: r.1.saturating_sub(r.0),
        waiters: r.2,
        epoch: r.3,
        version: r.4,
        learning: Duration::from_millis(r.5),
        share_processes: r.6,
        shares_reserved: r.7,
        shares_wanted: r.8,
        node: r.9,
        role: r.10,
        local_registered: r.11,
    }
}
