//! Real runtimes in real cgroups: each case builds a cgroup hierarchy (a quota on the process's
//! own cgroup, its parent or grandparent) and an affinity mask, runs every installed JDK, Go,
//! Python and Node inside it, and compares what each prints with the probe's prediction for that
//! runtime's version (`runtime_choice`). Needs root and a cgroup cpu controller; a runtime that is
//! not installed is skipped with a message. Run with `--nocapture` to see the measured table.

mod launch;
mod placement;

use launch::{Target, RUN_TIMEOUT};
use placement::{Placement, CASES};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs every target in every case and fails on the first table with a value the probe did not
/// predict; prints the whole table either way.
fn check(what: &str, find: fn(&mut Vec<String>) -> Vec<Target>) {
    if !is_root() {
        eprintln!("skipping {what}: creating cgroups needs root");
        return;
    }
    if let Err(e) = inflight_cpu::QuotaGroup::create(1.0) {
        eprintln!("skipping {what}: cannot create a cgroup here: {e}");
        return;
    }
    let mut skipped = Vec::new();
    let targets = find(&mut skipped);
    for s in &skipped {
        eprintln!("skipping {s}");
    }
    if targets.is_empty() {
        eprintln!("skipping {what}: none installed here");
        return;
    }
    let mut table = Vec::new();
    let mut wrong = Vec::new();
    for case in CASES {
        let placed = match Placement::create(case) {
            Ok(p) => p,
            Err(e) => {
                eprintln!(
                    "skipping case {:?}: cannot build its cgroups: {e}",
                    case.name
                );
                continue;
            }
        };
        let budget = placed
            .budget()
            .unwrap_or_else(|e| panic!("{}: cannot read the budget: {e}", case.name));
        let quota = budget
            .quota_cpus
            .map_or("none".to_string(), |q| format!("{q:.2}"));
        for target in &targets {
            let predicted = (target.predict)(&budget);
            let measured: Result<Vec<usize>, String> = launch::run(
                &mut placed.command(&target.program, &target.args),
                RUN_TIMEOUT,
            )
            .and_then(|out| {
                out.split_whitespace()
                    .map(|n| n.parse().map_err(|_| format!("not a number: {out:?}")))
                    .collect()
            });
            let measured = measured
                .unwrap_or_else(|e| panic!("{} in case {:?}: {e}", target.label, case.name));
            assert_eq!(
                measured.len(),
                predicted.len(),
                "{} printed {measured:?}",
                target.label
            );
            for ((name, want), got) in predicted.iter().zip(&measured) {
                let verdict = if want == got { "ok" } else { "WRONG" };
                table.push(format!(
                    "{:<28} affinity {} quota {:<5} {:<38} {:<26} {got} (predicted {want}) {verdict}",
                    case.name, budget.affinity_cpus, quota, target.label, name
                ));
                if want != got {
                    wrong.push(table.last().cloned().unwrap_or_default());
                }
            }
        }
    }
    eprintln!("{what} in real cgroups:\n{}", table.join("\n"));
    assert!(
        wrong.is_empty(),
        "values the probe did not predict:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn jdks_match_the_probe() {
    check("JDKs", launch::jdks);
}

#[test]
fn go_matches_the_probe() {
    check("Go", launch::gos);
}

#[test]
fn python_matches_the_probe() {
    check("Python", launch::pythons);
}

#[test]
fn node_matches_the_probe() {
    check("Node", launch::nodes);
}
