//! Unmodified clients behind the proxy: the Python and Node fan-outs in `clients/`, written with
//! no knowledge of inflight, send 500 calls at once to a dependency that takes 20 ms, through a
//! budget of 8.

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use crate::support::{budget, metrics, proxy, run_bounded, until, version_of, Upstream};

const CALLS: usize = 500;
const MAX_CONCURRENT: usize = 8;
const SERVICE_MS: u64 = 20;
/// The budget: 8 at once, and room for every other caller to wait for a permit rather than be
/// refused. The README's budgets file has these lines too.
const SETTINGS: &str =
    "max_concurrent = 8\nmax_queued = 1000\npermit_timeout = \"60s\"\ncall_timeout = \"2s\"";
/// One client test at a time: each runs 500 callers, and two at once on a 2-core machine would
/// measure each other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
/// Far past what a run takes on a loaded machine; a client still running then is killed.
const CLIENT_LIMIT: Duration = Duration::from_secs(60);

fn client_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("clients")
        .join(name)
}

/// The one JSON line a client prints at its end.
#[derive(Debug)]
struct Report {
    ok: usize,
    failed: usize,
    failed_by_status: String,
    elapsed_s: f64,
    /// The run as the test timed it, interpreter start-up included.
    wall_s: f64,
}

impl Report {
    fn parse(line: &str) -> Report {
        let line = line.trim();
        assert!(
            line.starts_with('{') && line.ends_with('}'),
            "not a JSON object: {line}"
        );
        // The text after `"key":`, up to where its value ends.
        let value = |key: &str, end: fn(char) -> bool| -> String {
            let (_, rest) = line
                .split_once(&format!("\"{key}\":"))
                .unwrap_or_else(|| panic!("no {key:?} in {line}"));
            let rest = rest.trim_start();
            let len = rest.find(end).unwrap_or(rest.len());
            rest[..len].to_string()
        };
        let number = |c: char| !(c.is_ascii_digit() || c == '.');
        let ok = value("ok", number);
        let failed = value("failed", number);
        let elapsed_s = value("elapsed_s", number);
        let mut failed_by_status = value("failed_by_status", |c| c == '}');
        failed_by_status.push('}');
        Report {
            ok: ok
                .parse()
                .unwrap_or_else(|_| panic!("ok: {ok:?} in {line}")),
            failed: failed
                .parse()
                .unwrap_or_else(|_| panic!("failed: {failed:?} in {line}")),
            failed_by_status,
            elapsed_s: elapsed_s
                .parse()
                .unwrap_or_else(|_| panic!("elapsed_s: {elapsed_s:?} in {line}")),
            wall_s: 0.0,
        }
    }
}

/// Runs `program file URL 500` to the end and reads its report; panics with its output if it
/// fails.
async fn run_client(program: &str, file: &str, url: &str) -> Report {
    let run = run_bounded(
        Command::new(program)
            .arg(client_file(file))
            .arg(url)
            .arg(CALLS.to_string()),
        CLIENT_LIMIT,
    )
    .await;
    assert!(
        run.status.success(),
        "{program} {file} {url} exited with {}; stdout:\n{}\nstderr:\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
    let mut report = Report::parse(run.stdout.lines().last().unwrap_or_default());
    report.wall_s = run.elapsed.as_secs_f64();
    report
}

/// Runs the client `file` straight at a 20 ms upstream, then through a proxy with a budget of 8
/// in front of another, and checks that through the proxy every call got through, with exactly
/// 8 at the upstream at once, in about the time 63 waves of 20 ms take.
async fn fan_out_through_a_budget_of_8(program: &str, file: &str) {
    let _alone = ONE_AT_A_TIME.lock().await;
    // Without the proxy: how many at once the client really sends.
    let direct = Upstream::start().await;
    let alone = run_client(
        program,
        file,
        &format!("{}/sleep/{SERVICE_MS}", direct.url()),
    )
    .await;
    eprintln!(
        "{file} straight to the upstream: {} of {CALLS} ok, peak {} at once, {:.3} s",
        alone.ok,
        direct.peak(),
        alone.elapsed_s
    );
    assert!(
        direct.peak() > MAX_CONCURRENT,
        "the client alone sends more than {MAX_CONCURRENT} at once, so the proxy is what holds \
         them to {MAX_CONCURRENT} below; it sent {}",
        direct.peak()
    );

    assert!(SETTINGS.starts_with(&format!("max_concurrent = {MAX_CONCURRENT}\n")));
    let upstream = Upstream::start().await;
    let (proxy, _) = proxy(&budget("records", &upstream.url(), SETTINGS)).await;
    let url = format!(
        "http://{}/sleep/{SERVICE_MS}",
        proxy.local_addr("records").unwrap()
    );
    let report = run_client(program, file, &url).await;
    let peak = upstream.peak();
    let served = upstream.seen().len();
    // 500 calls through 8 lanes take ceil(500 / 8) = 63 waves of 20 ms: none can finish sooner.
    let waves = CALLS.div_ceil(MAX_CONCURRENT);
    let floor_s = (waves as u64 * SERVICE_MS) as f64 / 1000.0;
    eprintln!(
        "{file} through the proxy: {} of {CALLS} ok, {} failed {}; upstream served {served}, peak {peak} at once \
         (budget {MAX_CONCURRENT}); {:.3} s as the client measured it ({:.3} s with start-up), \
         {:.2}x the floor of {floor_s:.2} s",
        report.ok,
        report.failed,
        report.failed_by_status,
        report.elapsed_s,
        report.wall_s,
        report.elapsed_s / floor_s,
    );
    assert_eq!(
        (report.ok, report.failed),
        (CALLS, 0),
        "every call succeeds, none is refused: {report:?}"
    );
    assert_eq!(served, CALLS, "the upstream served each call once");
    assert_eq!(
        peak, MAX_CONCURRENT,
        "at most 8 at the upstream at once, and the budget used in full"
    );
    let m = metrics(&proxy);
    assert_eq!(
        m["inflight_proxy_requests_total{budget=records,status_class=2xx}"],
        CALLS as f64
    );
    // The floor is physical; 5% below it allows for how clocks round.
    assert!(
        report.elapsed_s >= 0.95 * floor_s,
        "{} s is faster than {waves} waves of {SERVICE_MS} ms: more than {MAX_CONCURRENT} ran at once",
        report.elapsed_s
    );
    // Generous: the machine is shared, and the client's own cost (500 threads or fetches to
    // start, on this machine's load now) comes on top; it is what the run straight to the
    // upstream took.
    let ceiling_s = 4.0 * floor_s + alone.elapsed_s;
    assert!(
        report.elapsed_s <= ceiling_s,
        "{} s is more than 4x the floor of {floor_s:.2} s plus the {:.3} s the client took alone",
        report.elapsed_s,
        alone.elapsed_s
    );
}

/// The two clients: the program that runs each, and its file in `clients/`.
const PYTHON: (&str, &str) = ("python3", "fanout.py");
const NODE: (&str, &str) = ("node", "fanout.mjs");

/// Whether `client` can run here; if not, a line in the test's log says it skipped and why.
fn usable((program, file): (&str, &str)) -> bool {
    let Some(version) = version_of(program) else {
        eprintln!("skipped {file}: {program} is not installed");
        return false;
    };
    if program == "node" {
        let major: Option<u32> = version
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|major| major.parse().ok());
        if major.is_none_or(|major| major < 18) {
            eprintln!("skipped {file}: node {version} is older than 18 and has no global fetch");
            return false;
        }
    }
    eprintln!("{file} runs on {program} {version}");
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_thread_pool_of_500_gets_every_answer_with_8_at_the_upstream() {
    if usable(PYTHON) {
        fan_out_through_a_budget_of_8(PYTHON.0, PYTHON.1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_promise_all_of_500_fetches_gets_every_answer_with_8_at_the_upstream() {
    if usable(NODE) {
        fan_out_through_a_budget_of_8(NODE.0, NODE.1).await;
    }
}

/// With no room to queue, the proxy refuses what it cannot forward; each client counts the 503s
/// by status and exits 1. The upstream holds the first two calls until every other one has
/// been refused, so the counts are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_make_each_client_exit_1_counting_them_by_status() {
    const SENT: usize = 20;
    for client @ (program, file) in [PYTHON, NODE] {
        if !usable(client) {
            continue;
        }
        let _alone = ONE_AT_A_TIME.lock().await;
        let upstream = std::sync::Arc::new(Upstream::start().await);
        let (proxy, _) = proxy(&budget(
            "records",
            &upstream.url(),
            "max_concurrent = 2\nmax_queued = 0",
        ))
        .await;
        let url = format!("http://{}/hold", proxy.local_addr("records").unwrap());
        let run = tokio::spawn(async move {
            run_bounded(
                Command::new(program)
                    .arg(client_file(file))
                    .arg(&url)
                    .arg(SENT.to_string()),
                CLIENT_LIMIT,
            )
            .await
        });
        let refused = "inflight_proxy_replies_total{budget=records,reason=queue_full}";
        until("every call but the two held refused", || {
            metrics(&proxy).get(refused).copied() == Some((SENT - 2) as f64)
        })
        .await;
        upstream.release(2);
        let run = run.await.unwrap();
        assert_eq!(
            run.status.code(),
            Some(1),
            "{file} exits 1 when a call failed; stdout:\n{}\nstderr:\n{}",
            run.stdout,
            run.stderr
        );
        let report = Report::parse(run.stdout.lines().last().unwrap_or_default());
        assert_eq!(
            (report.ok, report.failed),
            (2, SENT - 2),
            "{file}: {report:?}"
        );
        assert_eq!(
            report.failed_by_status.replace(' ', ""),
            format!("{{\"503\":{}}}", SENT - 2),
            "{file}"
        );
        assert_eq!(upstream.seen().len(), 2, "a refused call was forwarded");
    }
}

/// A bad URL or count gets the client's usage on stderr and exit 2, before any call.
#[tokio::test]
async fn bad_arguments_make_each_client_exit_2_with_its_usage() {
    for client @ (program, file) in [PYTHON, NODE] {
        if !usable(client) {
            continue;
        }
        for args in [
            &[][..],
            &["127.0.0.1:7002"],
            &["ftp://127.0.0.1/"],
            &["http://127.0.0.1:7002/", "0"],
            &["http://127.0.0.1:7002/", "-3"],
            &["http://127.0.0.1:7002/", "many"],
            &["http://127.0.0.1:7002/", "2.5"],
        ] {
            let run = run_bounded(
                Command::new(program).arg(client_file(file)).args(args),
                CLIENT_LIMIT,
            )
            .await;
            assert_eq!(
                run.status.code(),
                Some(2),
                "{file} {args:?}: stdout {:?}, stderr {:?}",
                run.stdout,
                run.stderr
            );
            assert!(run.stdout.is_empty(), "{file} {args:?}: {}", run.stdout);
            assert!(
                run.stderr.starts_with("usage:") && !run.stderr.contains("Traceback"),
                "{file} {args:?}: {}",
                run.stderr
            );
        }
    }
}

/// The guide's section on these clients shows both files as they are, and the budget the tests
/// above use.
#[test]
fn the_guide_shows_both_clients_byte_for_byte_and_their_budget() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("docs/guide/proxy.md")).unwrap();
    let heading = "## Unmodified clients: Python and Node\n";
    let section = readme
        .split_once(heading)
        .unwrap_or_else(|| panic!("the guide's proxy chapter has no {heading:?}"))
        .1;
    // Up to the next heading (a Python comment starts with one `#` only).
    let end = ["\n## ", "\n### "]
        .iter()
        .filter_map(|heading| section.find(heading))
        .min()
        .unwrap_or(section.len());
    let section = &section[..end];
    // The text of the one code block in `section` that opens with `fence`.
    let block = |fence: &str| -> String {
        let opening = format!("```{fence}\n");
        let mut blocks = section.split(&opening).skip(1);
        let first = blocks
            .next()
            .unwrap_or_else(|| panic!("no {opening:?} block in the guide's {heading:?}"));
        assert!(blocks.next().is_none(), "more than one {fence} block");
        let end = first
            .find("\n```\n")
            .unwrap_or_else(|| panic!("the {fence} block does not end"));
        first[..=end].to_string()
    };
    for (fence, file) in [("python", "fanout.py"), ("js", "fanout.mjs")] {
        let text = std::fs::read_to_string(client_file(file)).unwrap();
        assert!(
            block(fence) == text,
            "the guide's {fence} block differs from clients/{file}: copy the file into it"
        );
    }
    let toml = block("toml");
    for setting in SETTINGS.lines() {
        assert!(
            toml.lines()
                .any(|line| line.split('#').next().unwrap().trim() == setting),
            "the guide's budgets file lacks {setting:?}:\n{toml}"
        );
    }
}
