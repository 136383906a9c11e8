//! The names of what a fleet budget keeps in Redis (every key with the budget's hash tag,
//! `inflight:{name}:...`) and of the channels on which a process is told of its grants.

/// The hash of a share budget's processes.
pub(crate) fn shares_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:shares")
}

/// The keys the shares script takes, in its order: the processes, the epoch, the entries'
/// expiries, the turns queue, the holders of extras, the processes below their base, the sums,
/// the wants, the permits reserved, and the processes' turns (their terms' ends and turns
/// handed over; apart from the processes' entries, which processes of earlier versions read).
pub(crate) fn share_keys(budget: &str) -> [String; 10] {
    [
        shares_key(budget),
        epoch_key(budget),
        format!("inflight:{{{budget}}}:shares_expiry"),
        format!("inflight:{{{budget}}}:shares_turns"),
        format!("inflight:{{{budget}}}:shares_extra"),
        format!("inflight:{{{budget}}}:shares_below"),
        format!("inflight:{{{budget}}}:shares_sums"),
        format!("inflight:{{{budget}}}:shares_wants"),
        format!("inflight:{{{budget}}}:shares_has"),
        format!("inflight:{{{budget}}}:shares_terms"),
    ]
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

/// The hash of a budget's epoch, version and learning deadline.
pub(crate) fn epoch_key(budget: &str) -> String {
    format!("inflight:{{{budget}}}:epoch")
}

/// The keys of a budget the lease scripts take, in their order.
pub(crate) fn lease_keys(budget: &str) -> [String; 5] {
    [
        holders_key(budget),
        queue_key(budget),
        queue_expiry_key(budget),
        arrivals_key(budget),
        epoch_key(budget),
    ]
}

/// How many characters of a lease id name the process that asked for it.
pub(crate) const PROCESS_TOKEN_LEN: usize = 16;

/// The channel on which a process is told that a lease it queued for was granted, on one
/// server; the message is the lease id, whose first [`PROCESS_TOKEN_LEN`] characters are
/// `token`.
pub(crate) fn grants_channel(token: &str) -> String {
    format!("inflight:grants:{token}")
}

/// The sharded channel of budget `budget` on which a process is told of its grants, on a
/// Cluster: in the budget's slot.
pub(crate) fn sharded_grants_channel(budget: &str, token: &str) -> String {
    format!("inflight:{{{budget}}}:grants:{token}")
}

/// Every key a fleet budget (or a fleet rate limit) of this name keeps in Redis.
pub fn budget_keys(budget: &str) -> Vec<String> {
    let mut keys = lease_keys(budget).to_vec();
    keys.push(rate_key(budget));
    for key in share_keys(budget) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// The key of a fleet rate limit's theoretical arrival time.
pub(crate) fn rate_key(name: &str) -> String {
    format!("inflight:{{{name}}}:rate")
}
