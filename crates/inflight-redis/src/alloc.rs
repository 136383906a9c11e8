//! The allocation of a share budget, as the `SHARES` script computes it on the server: max-min
//! fair targets from each process's wants, and a report's effect on the shares held. The script
//! is Lua; this is the same rule in Rust, for the in-memory server double and for tests.

/// One process's entry in a share budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Permits reserved for it: counted against the limit until it reports less.
    pub(crate) has: usize,
    /// What it asked for last.
    pub(crate) wants: usize,
}

/// What a report left the reporting process with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The most calls it may have running until its next report: `min(has, target)`.
    pub(crate) cap: usize,
    /// Permits reserved for it now.
    pub(crate) has: usize,
    /// Its fair share of the limit.
    pub(crate) target: usize,
}

/// Max-min fair targets of `limit` for `wants` (water-filling): each gets what it wants if that
/// is under an equal split of what is left, and the rest is split among the others.
pub(crate) fn targets(limit: usize, wants: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by_key(|&i| (wants[i], i));
    let mut targets = vec![0; wants.len()];
    let mut left = limit;
    for (k, &i) in order.iter().enumerate() {
        let fair = left / (order.len() - k);
        targets[i] = wants[i].min(fair);
        left -= targets[i];
    }
    targets
}

/// A report from `me` (`others` are the live entries of everyone else; `kept`, what its own
/// live entry reserves): it may run at most `holding` calls until it hears back, and wants
/// `wants`. Its reservation shrinks to `holding` at once, keeps what it runs up to `kept` (still
/// counted when the entries sum past the limit after a loss of state), and grows towards its
/// fair target only from permits nobody holds, so a sum within `limit` never exceeds it.
pub(crate) fn report(
    limit: usize,
    others: &[Entry],
    kept: usize,
    holding: usize,
    wants: usize,
) -> Outcome {
    let reserved: usize = others.iter().map(|e| e.has).sum();
    let mut has = holding.min(limit.saturating_sub(reserved).max(kept));
    let mut all: Vec<usize> = others.iter().map(|e| e.wants).collect();
    all.push(wants);
    let target = *targets(limit, &all).last().unwrap_or(&0);
    if target > has {
        let free = limit.saturating_sub(reserved + has);
        has += (target - has).min(free);
    }
    Outcome {
        // Past the limit, what it runs stays counted, but nothing new starts until the others
        // leave room.
        cap: has.min(target).min(limit.saturating_sub(reserved)),
        has,
        target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_max_min_fair() {
        assert_eq!(targets(512, &[100, 900]), [100, 412]);
        assert_eq!(targets(512, &[900, 100]), [412, 100]);
        assert_eq!(targets(512, &[1000, 1000, 1000]), [170, 171, 171]);
        assert_eq!(targets(512, &[10, 20]), [10, 20]);
        assert_eq!(targets(0, &[5]), [0]);
        assert_eq!(targets(10, &[]), Vec::<usize>::new());
    }

    #[test]
    fn a_share_grows_only_from_free_permits() {
        // Another holds 400 though its fair share is now 256: the newcomer gets the 112 free.
        let others = [Entry {
            has: 400,
            wants: 900,
        }];
        let out = report(512, &others, 0, 0, 900);
        assert_eq!(
            out,
            Outcome {
                cap: 112,
                has: 112,
                target: 256
            }
        );
        // The first shrinks: told 256, it still holds what it runs (300) until it reports less.
        let me = [Entry {
            has: 112,
            wants: 900,
        }];
        let out = report(512, &me, 400, 300, 900);
        assert_eq!((out.cap, out.has, out.target), (256, 300, 256));
        let out = report(512, &me, 300, 256, 900);
        assert_eq!((out.cap, out.has), (256, 256));
    }

    #[test]
    fn what_runs_past_the_limit_after_a_loss_of_state_stays_counted() {
        // After learning, 500 and 100 still run on a limit of 512: each keeps what its entry
        // reserves while it runs it, and the other grows only from what is free.
        let other = [Entry {
            has: 100,
            wants: 100,
        }];
        let out = report(512, &other, 500, 500, 500);
        assert_eq!(
            (out.has, out.cap),
            (500, 412),
            "counted whole, starts nothing new"
        );
        let other = [Entry {
            has: 500,
            wants: 500,
        }];
        assert_eq!(report(512, &other, 100, 0, 100).has, 12);
    }

    #[test]
    fn a_process_back_from_a_stall_gets_only_what_is_free() {
        // Its entry expired and others took the permits: it is told what is left, not more.
        let others = [Entry {
            has: 500,
            wants: 500,
        }];
        let out = report(512, &others, 0, 40, 40);
        assert_eq!((out.cap, out.has), (12, 12));
    }
}
