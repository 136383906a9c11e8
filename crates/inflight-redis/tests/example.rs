//! `examples/fleet.rs` run as a user runs it: real processes against a `redis-server` on
//! loopback, their output read back, their writes counted where they arrive by an [`Observer`].
//!
//! `cargo test -p inflight-redis` builds the example next to the tests; run alone (`--test
//! example`), the tests say they skipped when it is not built.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use inflight::Budget;
use inflight_redis::{Fail, RedisFleet};
use support::{Observer, RedisServer};

/// The example's binary, built by `cargo test` next to this one (`target/debug/examples`).
fn example() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let path = exe
        .parent()?
        .parent()?
        .join("examples")
        .join(format!("fleet{}", std::env::consts::EXE_SUFFIX));
    if !path.exists() {
        eprintln!(
            "skipped: {} is not built (cargo build --example fleet)",
            path.display()
        );
        return None;
    }
    Some(path)
}

fn run(example: &PathBuf, args: &[String]) -> Output {
    Command::new(example)
        .args(args)
        .output()
        .expect("the example runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The number after `word ` in `line`.
fn number(line: &str, word: &str) -> u64 {
    let at = line
        .find(&format!("{word} "))
        .unwrap_or_else(|| panic!("{word:?} in {line}"));
    line[at + word.len() + 1..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("a number after {word:?} in {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_counts_every_refusal_by_reason() {
    let (Some(example), Some(server)) = (example(), RedisServer::start()) else {
        return;
    };
    // Another replica holds the whole fleet budget for longer than the example waits (2 s).
    let fleet = RedisFleet::builder(&server.url()).build().unwrap();
    let other = Budget::builder("records")
        .max_concurrent(6)
        .store(Arc::new(fleet.store(6, Fail::Closed)))
        .build()
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(other.acquire().await.unwrap());
    }
    let output = tokio::task::spawn_blocking({
        let url = server.url();
        move || run(&example, &[url])
    })
    .await
    .unwrap();
    assert!(output.status.success());
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    let printed = stderr
        .lines()
        .filter(|l| l.starts_with("refused: "))
        .count();
    assert_eq!(printed, 24, "{stderr}");
    let summary = stdout.lines().next().unwrap();
    assert!(
        summary.starts_with("writes ok 0, refused 24 ("),
        "{summary}"
    );
    assert_eq!(number(summary, "timeout"), 24, "{summary}");
    assert_eq!(number(summary, "full"), 0, "{summary}");
    assert_eq!(number(summary, "unavailable"), 0, "{summary}");
    drop(held);
    fleet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_copies_share_six_permits_and_leave_none_behind() {
    let (Some(example), Some(server)) = (example(), RedisServer::start()) else {
        return;
    };
    let observer = Observer::start();
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let (example, args) = (example.clone(), [server.url(), observer.addr()]);
            std::thread::spawn(move || run(&example, &args))
        })
        .collect();
    for run in runs {
        let output = run.join().unwrap();
        let stdout = text(&output.stdout);
        assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
        let lines: Vec<&str> = stdout.lines().collect();
        assert!(lines[0].starts_with("writes ok 24, refused 0 "), "{stdout}");
    }
    // Counted where the writes arrive, not by the budgets or in Redis.
    let served = observer.served();
    println!("3 copies of the example, at the dependency: {served:?}");
    assert_eq!((served.begun, served.ended), (72, 72), "{served:?}");
    assert!((1..=6).contains(&served.peak), "{served:?}");
    assert_eq!(
        server.holders("records"),
        Vec::<String>::new(),
        "every lease went back before its process ended"
    );
}
