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

/// The Redis Cluster hash slot of every key of budget `budget` (its hash tag is the name):
/// CRC16 (XMODEM) of the tag, modulo 16,384, as the cluster specification computes it.
pub(crate) fn cluster_slot(budget: &str) -> u16 {
    // The tag is what lies between the key's first `{` and the first `}` after it.
    let tag = match budget.find('}') {
        // `inflight:{na}me:...`: the tag ends at the name's own `}`; an empty tag (a name
        // that starts with `}`) hashes the whole key.
        Some(0) => return slot_of(holders_key(budget).as_bytes()),
        Some(end) => &budget[..end],
        None => budget,
    };
    slot_of(tag.as_bytes())
}

/// CRC16 (XMODEM: polynomial 0x1021, initial value 0) of `bytes`, modulo 16,384.
fn slot_of(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_hash_to_their_cluster_slots() {
        // As Redis's `CLUSTER KEYSLOT` says (its documentation's examples).
        assert_eq!(slot_of(b"somekey"), 11_058);
        assert_eq!(slot_of(b"hash_tag"), 2_515);
        // Measured on a real cluster: `records` lives in slot 15,835.
        assert_eq!(cluster_slot("records"), 15_835);
        assert_eq!(cluster_slot("hash_tag"), 2_515);
        // A name with a `}` ends the tag there.
        assert_eq!(cluster_slot("hash_tag}x"), 2_515);
    }
}
