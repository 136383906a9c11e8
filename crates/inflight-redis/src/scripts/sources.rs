//! The Lua text of each script (in `lua/`), with what it takes in `KEYS` and `ARGV` and what it
//! returns. [`Scripts`](super::Scripts) puts the lease and shares scripts together from these parts.

/// The server's clock, and `fence`, which compares the budget's epoch with what the caller has
/// seen (see the `scripts` module's docs). Starts every script that touches a budget's state.
///
/// `fence(key, seen_epoch, seen_version, lease)` returns `epoch, version, learn, behind`:
/// `behind` when the caller last saw an earlier state (its running calls must be told again).
pub(super) const FENCE: &str = include_str!("lua/fence.lua");

/// What every lease script starts with: [`FENCE`] applied to the budget, and `promote`, which
/// hands free permits to the earliest waiters of the fleet.
///
/// `KEYS[1]`: the holders, a sorted set of lease id to expiry (server milliseconds).
/// `KEYS[2]`: the queue, a sorted set of waiting lease id to arrival number.
/// `KEYS[3]`: the queue's expiries, a sorted set of waiting lease id to the moment its waiter
/// counts as gone unless it asks again (a waiter killed while queued blocks nobody).
/// `KEYS[4]`: the arrival counter.
/// `KEYS[5]`: the epoch (see the `scripts` module's docs).
///
/// `ARGV[1..4]`: the epoch and version the caller has seen (0 and 0 for none), the limit, the
/// lease in milliseconds.
///
/// An id is held or queued, never both: `give_back(id)` removes it from whichever holds it and
/// answers 1 if it held a permit.
///
/// `promote` first drops queue entries whose waiters stopped asking; then, if the holders are
/// at the limit, reclaims expired leases (a holder killed with SIGKILL frees its permits within
/// one lease); then, unless the budget is learning, while there is room and someone waits,
/// grants the head of the queue its lease and tells it on its process's channel. So no permit
/// is free while anyone waits: a newcomer never overtakes the queue. A lease id that ends in
/// `/N` was asked for under a limit of N (its process's): its waiter is granted only while
/// fewer than N are held, and keeps the head of the queue until then (processes of different
/// limits, in a rolling change of it, each hold their own).
pub(super) const PRELUDE: &str = include_str!("lua/prelude.lua");

/// `tell(id)` on one server: `PUBLISH` on the process's channel.
pub(super) const TELL_PLAIN: &str = include_str!("lua/tell_plain.lua");

/// `tell(id)` on a Cluster: `SPUBLISH` on the process's channel in the budget's slot (the
/// first key's name without its last part, then `:grants:` and the process).
pub(super) const TELL_SHARDED: &str = include_str!("lua/tell_sharded.lua");

/// Takes a lease for `ARGV[5]` if a permit is free, nobody waits and the budget is not
/// learning; otherwise puts it in the queue (or keeps it there), where `promote` grants it in
/// its turn.
///
/// `KEYS` and `ARGV[1..4]`: see [`PRELUDE`]. `ARGV[5]`: the lease id; `ARGV[6]`: the queue
/// entry's lifetime in milliseconds; `ARGV[7]`: `1` when this is the id's first ask (a new id
/// is neither held nor queued: the two lookups are skipped), anything else (or nothing) when it
/// may be either; `ARGV[8..]`: leases of the caller's process to give back first (as
/// [`RELEASE`] does, before the hand-off to the queue): a call that follows another costs one
/// script.
///
/// Idempotent: an id already holding a lease (granted from the queue, or a retry after a lost
/// reply) is granted again with its expiry pushed back, so a retry never takes a second permit;
/// an id already queued keeps its place. A retry is never a first ask.
///
/// Returns `{epoch, version, ms of learning left, granted (0|1), holders after, reclaimed, ms
/// until the earliest lease expires (or learning ends), waiters ahead of this one}`.
pub(super) const ACQUIRE: &str = include_str!("lua/acquire.lua");

/// Renews the caller's leases, and registers the calls it admitted on its local fallback.
///
/// `KEYS` and `ARGV[1..4]`: see [`PRELUDE`]. `ARGV[5]`: how many lease ids follow; then the
/// lease ids; then the ids of local calls to count as holders.
///
/// A lease still held has its expiry pushed back. One the server does not hold is lost, unless
/// the caller is behind (the state it was granted in is gone): then it is added back, and the
/// budget learns for one lease from now. Local calls are added (or renewed) as holders, whatever
/// the limit: they run.
///
/// Returns `{epoch, version, ms of learning left, leases added back, {lost lease ids}}`.
pub(super) const RENEW: &str = include_str!("lua/renew.lua");

/// Gives back leases `ARGV[5..]`, whether they hold a permit or wait in the queue (a waiter
/// that gave up), then hands the freed permits to the earliest waiters (see [`PRELUDE`]).
///
/// Only the ids' own entries are removed: a holder whose lease expired and was taken by someone
/// else removes nothing.
///
/// Returns `{epoch, version, ms of learning left, how many of the leases were held}`.
pub(super) const RELEASE: &str = include_str!("lua/release.lua");

/// A report of one process of a share budget: what it may still be running, what it wants, and
/// what it gets.
///
/// `KEYS`: see [`share_keys`](super::keys::share_keys): the processes (a hash of process id to
/// `has:wants:expiry:seq`, expiry in server milliseconds), the budget's epoch, the entries'
/// expiries, the processes waiting for a turn at a permit beyond their base share (by when they
/// queued, in milliseconds with their microseconds), the processes holding such extra permits
/// (by when their term began), the processes below their base, the sums (`reserved`, `wants`,
/// `n`), the wants and the permits reserved (sorted sets), and the processes' terms (a hash of
/// process id to `term_end:handed_version`: when its answer said its term ends, and the
/// budget's version when another's report handed it a turn it has not answered for yet).
///
/// `ARGV`: process id, wants, holding (the most calls it may run until it hears back), report
/// number, limit, lease in milliseconds, leaving (`1`: it wants nothing more; its entry goes
/// when it holds nothing, and otherwise keeps `holding` until it expires), then the epoch and
/// version the process has seen.
///
/// - **Base shares, max-min fair.** The water level `L` of the wants (`sum of min(wants, L)` is
///   the limit) is found by walking the wants in ascending order only up to the first at or above
///   its fair part: never more entries than the limit, and one when every process wants more
///   than its part; the sums are kept as reports come, so a report costs a few commands whatever
///   the number of processes. A process's base is `min(wants, floor(L))`: the bases never sum
///   past the limit.
/// - **Turns at the rest.** What the bases leave over (`limit - sum of bases`, all of it when
///   every process's fair share is below one permit) goes in turns: a process that wants more
///   than its base queues for a turn, a free permit goes to the head of the queue, one per
///   report, and a process that holds permits beyond its base while others wait, a sixth of a
///   lease after it began to hold, is capped to its base (its extras go back as its calls end)
///   and queues again.
/// - **Never past the limit.** A share grows only from permits no entry holds; the reporter's
///   `holding` is kept up to what its live entry reserves or the others leave free (so calls
///   kept past the limit after a loss of state stay counted once the budget has learned), and,
///   while the budget learns after a loss of state or when the reporter is behind, kept whole
///   (its calls run) with no growth. Whatever it keeps, its cap is never more than the others
///   leave: past the limit, it starts nothing new until they make room.
/// - **Told, and handed.** A process below its base tells those holding more than any base to
///   report (they are capped at once); one that gave permits back tells those below their base,
///   or, when none is, hands each permit to a head of the turns queue (its entry holds it now,
///   and its word, `id@epoch.version+holds.term_ms`, says so); one that queued for a turn tells
///   the holder of extras whose term ran out, if that holder has not reported since and was not
///   told when its term ends. Words are `id@epoch.version`: the budget's state they were told
///   at. A report sent without knowing of a turn handed to it (its `seen` below the version the
///   turn was handed at) keeps the turn.
///
/// Expired entries are dropped twenty at a time by each report. A report numbered no higher than
/// the last one applied (a late duplicate) is ignored.
///
/// Returns `{applied (0|1), cap, has, target (the base), processes, epoch, version, ms of
/// learning left, ms until the reporter should report again to give back what it holds beyond
/// its base (0: no need)}`: a holder of a turn reports when its term runs out, so that the
/// turns move at the pace of the term, not of the renewals.
pub(super) const SHARES: &str = include_str!("lua/shares.lua");

/// GCRA: lets one event through if the theoretical arrival time allows it, or, given a longest
/// wait, reserves the next slot if it comes within it (turns in the order callers reach Redis).
///
/// `KEYS[1]`: the budget's theoretical arrival time (server microseconds). `KEYS[2]`, when
/// given: the budget's epoch (see the `scripts` module's docs): a theoretical arrival time lost with an
/// epoch that began with learning starts as if the whole burst was spent when it began.
/// `ARGV`: emission interval in microseconds, burst (events that may pass back to back), and
/// optionally the longest wait in microseconds for a slot to be reserved (default 0: now or not
/// at all).
///
/// Returns `{allowed (0|1), µs to wait}`: when allowed, until the reserved slot (0 without a
/// longest wait); when not, until the next event would be allowed (nothing is reserved).
pub(super) const GCRA_SOURCE: &str = include_str!("lua/gcra.lua");
