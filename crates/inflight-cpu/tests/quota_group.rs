//! Real cgroup tests of `QuotaGroup`: they create cgroups on this machine, so they need root and
//! a cgroup cpu controller; elsewhere they print why they skip.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use inflight_cpu::{Enforcement, QuotaGroup, PERIOD_US};

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A group with `cpus`, or `None` (with a printed note) where this machine cannot make one.
fn group_or_skip(cpus: f64) -> Option<QuotaGroup> {
    if !is_root() {
        eprintln!("skipping: cgroup tests need root");
        return None;
    }
    match QuotaGroup::create(cpus) {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("skipping: cannot create a cgroup here: {e}");
            None
        }
    }
}

/// The relative cgroup path a process's `/proc/<pid>/cgroup` shows for the controller in use.
fn cgroup_line_path(text: &str, enforcement: Enforcement) -> Option<String> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = match enforcement {
            Enforcement::CgroupV2 => id == "0",
            _ => ctrl.split(',').any(|c| c == "cpu"),
        };
        matches.then(|| path.to_string())
    })
}

fn quota_text(group: &QuotaGroup) -> String {
    match group.enforcement() {
        Enforcement::CgroupV2 => std::fs::read_to_string(group.path().join("cpu.max")).unwrap(),
        _ => format!(
            "{} {}",
            std::fs::read_to_string(group.path().join("cpu.cfs_quota_us"))
                .unwrap()
                .trim(),
            std::fs::read_to_string(group.path().join("cpu.cfs_period_us"))
                .unwrap()
                .trim()
        ),
    }
}

fn name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn child_runs_inside_the_group_from_its_first_instruction() {
    let Some(group) = group_or_skip(0.5) else {
        return;
    };
    assert_ne!(group.enforcement(), Enforcement::None);
    assert_eq!(group.cpus(), 0.5);
    assert_eq!(group.quota_us(), PERIOD_US / 2);
    assert_eq!(quota_text(&group).trim(), "50000 100000");
    assert!(name_of(group.path()).starts_with(&format!("inflight-{}-", std::process::id())));

    // The child reports its own cgroup before doing anything else.
    let mut cmd = Command::new("cat");
    cmd.arg("/proc/self/cgroup").stdout(Stdio::piped());
    group.prepare_command(&mut cmd);
    let out = cmd.output().expect("cat runs");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let path = cgroup_line_path(&text, group.enforcement()).expect("a cpu cgroup line");
    assert!(
        path.ends_with(&format!("/{}", name_of(group.path()))),
        "child cgroup {path:?} is not {}",
        group.path().display()
    );

    let dir = group.path().to_path_buf();
    drop(group);
    assert!(!dir.exists(), "{} still exists after drop", dir.display());
}

#[test]
fn add_pid_moves_a_running_child_and_drop_waits_for_it_to_leave() {
    let Some(group) = group_or_skip(1.0) else {
        return;
    };
    let mut child = Command::new("sleep").arg("30").spawn().expect("sleep runs");
    group.add_pid(child.id()).expect("add the child");
    let text = std::fs::read_to_string(format!("/proc/{}/cgroup", child.id())).unwrap();
    let path = cgroup_line_path(&text, group.enforcement()).unwrap();
    assert!(path.ends_with(&name_of(group.path())), "{path}");
    let procs = std::fs::read_to_string(group.path().join("cgroup.procs")).unwrap();
    assert!(procs.lines().any(|l| l.trim() == child.id().to_string()));

    // A nested cgroup (a child of the group) is removed along with it.
    let nested = group.path().join("nested");
    std::fs::create_dir(&nested).unwrap();

    child.kill().unwrap();
    child.wait().unwrap();
    let dir = group.path().to_path_buf();
    group.remove().expect("removed once the child has exited");
    assert!(!dir.exists());
    assert!(!nested.exists());
}

#[test]
fn throttle_stats_count_a_busy_child_over_its_quota() {
    let Some(group) = group_or_skip(0.1) else {
        return;
    };
    let before = group.throttle_stats().expect("cpu.stat");
    // A busy loop for about 0.6 s of wall time at 10% of one CPU must be throttled.
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "end=$(( $(date +%s%N) + 600000000 )); while [ $(date +%s%N) -lt $end ]; do :; done",
    ]);
    group.prepare_command(&mut cmd);
    let status = cmd.status().expect("sh runs");
    assert!(status.success());
    let after = group.throttle_stats().unwrap().since(&before);
    assert!(after.nr_periods > 0, "{after:?}");
    assert!(after.nr_throttled > 0, "{after:?}");
    assert!(after.throttled > Duration::ZERO, "{after:?}");
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn tokio_command_joins_the_group() {
    let Some(group) = group_or_skip(1.5) else {
        return;
    };
    assert_eq!(group.quota_us(), 150_000);
    let mut cmd = tokio::process::Command::new("cat");
    cmd.arg("/proc/self/cgroup");
    group.prepare_tokio_command(&mut cmd);
    let out = cmd.output().await.expect("cat runs");
    let text = String::from_utf8(out.stdout).unwrap();
    let path = cgroup_line_path(&text, group.enforcement()).unwrap();
    assert!(path.ends_with(&name_of(group.path())), "{path}");
}

#[test]
fn groups_left_by_a_killed_run_are_swept_when_the_next_one_is_created() {
    let Some(first) = group_or_skip(0.5) else {
        return;
    };
    // A process that has exited: its pid names a run that can no longer clean up after itself.
    let mut child = Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let base = first.path().parent().unwrap().to_path_buf();
    let stale = base.join(format!("inflight-{dead_pid}-0"));
    std::fs::create_dir(&stale).unwrap();
    // Our own live group is not touched by the sweep.
    let second = QuotaGroup::create(0.5).unwrap();
    assert!(!stale.exists(), "{} was not swept", stale.display());
    assert!(first.path().exists());
    drop(second);
    drop(first);
}
