//! `CpuBudget::detect_in` against fixture trees (`tests/fixtures/<case>`): v2, v1, hybrid,
//! nested, unlimited, fractional and broken files; and `runtime_choices` on them.

use std::path::PathBuf;

use inflight_cpu::{
    runtime_choices, CgroupVersion, CpuBudget, CpuController, DetectError, Limit, QuotaStatus,
};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn budget(name: &str) -> CpuBudget {
    CpuBudget::detect_in(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn choice(b: &CpuBudget, runtime: &str) -> (usize, Vec<String>) {
    let c = runtime_choices(b)
        .into_iter()
        .find(|c| c.runtime == runtime)
        .unwrap();
    (c.value, c.caveats)
}

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn v2_quota_on_the_leaf() {
    let b = budget("v2-limited");
    assert_eq!(b.host_cpus, 8);
    assert_eq!(b.affinity_cpus, 8);
    assert_eq!(b.cgroup_version, CgroupVersion::V2);
    assert_eq!(b.cpu_controller, Some(CpuController::V2));
    assert_eq!(b.cgroup_path.as_deref(), Some("/system.slice/app.service"));
    let names: Vec<&str> = b.levels.iter().map(|l| l.cgroup.as_str()).collect();
    assert_eq!(names, ["/system.slice/app.service", "/system.slice", "/"]);
    assert_eq!(
        b.levels[0].limit,
        Limit::Quota {
            quota_us: 200_000,
            period_us: 100_000
        }
    );
    assert_eq!(b.levels[1].limit, Limit::Unlimited);
    assert_eq!(b.levels[2].limit, Limit::Absent);
    assert_eq!(b.quota_status, QuotaStatus::Limited);
    assert_eq!(b.quota_cpus, Some(2.0));
    assert!(approx(b.effective_cpus, 2.0));
    assert_eq!(b.recommended_pool(), 2);
    for rt in ["rust", "dotnet", "jvm", "go"] {
        let (v, caveats) = choice(&b, rt);
        assert_eq!(v, 2, "{rt}");
        assert!(caveats.is_empty(), "{rt}: {caveats:?}");
    }
}

#[test]
fn v2_parent_quota_is_found_and_leaf_only_runtimes_miss_it() {
    let b = budget("v2-nested");
    assert_eq!(b.levels.len(), 4);
    assert_eq!(b.levels[0].limit, Limit::Unlimited);
    assert_eq!(b.quota_cpus, Some(1.5));
    assert_eq!(b.tightest_level().unwrap().cgroup, "/kubepods.slice/pod1");
    assert!(approx(b.effective_cpus, 1.5));
    assert_eq!(b.recommended_pool(), 1);
    assert_eq!(b.leaf_quota_cpus(), None);

    let (rust, caveats) = choice(&b, "rust");
    assert_eq!(rust, 1);
    assert!(caveats.iter().any(|c| c.contains("floors")), "{caveats:?}");
    let (dotnet, caveats) = choice(&b, "dotnet");
    assert_eq!(dotnet, 8);
    assert!(caveats.iter().any(|c| c.contains("misses")), "{caveats:?}");
    let (go, caveats) = choice(&b, "go");
    assert_eq!(go, 8);
    assert!(caveats.iter().any(|c| c.contains("/kubepods.slice/pod1")));
    let (jvm, caveats) = choice(&b, "jvm");
    assert_eq!(jvm, 2);
    assert!(caveats.iter().any(|c| c.contains("rounds")), "{caveats:?}");
}

#[test]
fn v2_unlimited_is_bounded_by_affinity() {
    let b = budget("v2-unlimited");
    assert_eq!(b.host_cpus, 16);
    assert_eq!(b.affinity_cpus, 4);
    assert_eq!(b.quota_status, QuotaStatus::Unlimited);
    assert_eq!(b.quota_cpus, None);
    assert!(approx(b.effective_cpus, 4.0));
    assert_eq!(b.recommended_pool(), 4);
    for rt in ["rust", "dotnet", "jvm", "go"] {
        assert_eq!(choice(&b, rt).0, 4, "{rt}");
    }
}

#[test]
fn v2_container_namespace_sees_only_its_own_level() {
    let b = budget("v2-container");
    assert_eq!(b.levels.len(), 1);
    assert_eq!(b.levels[0].cgroup, "/");
    assert_eq!(b.quota_cpus, Some(0.5));
    assert!(approx(b.effective_cpus, 0.5));
    assert_eq!(b.recommended_pool(), 1);
    assert_eq!(choice(&b, "rust").0, 1);
    assert_eq!(choice(&b, "dotnet").0, 1);
    let (go, caveats) = choice(&b, "go");
    assert_eq!(go, 2);
    assert!(
        caveats.iter().any(|c| c.contains("at least 2")),
        "{caveats:?}"
    );
}

#[test]
fn v1_docker_fractional_quota_through_a_mount_root() {
    let b = budget("v1-docker");
    assert_eq!(b.cgroup_version, CgroupVersion::V1);
    assert_eq!(b.cpu_controller, Some(CpuController::V1));
    assert_eq!(b.levels.len(), 1);
    assert_eq!(b.levels[0].cgroup, "/docker/abc");
    assert!(b.levels[0].dir.ends_with("sys/fs/cgroup/cpu,cpuacct"));
    assert_eq!(b.quota_cpus, Some(1.5));
    assert!(
        b.notes.iter().any(|n| n.contains("not visible")),
        "{:?}",
        b.notes
    );
    assert_eq!(b.recommended_pool(), 1);
    assert_eq!(choice(&b, "rust").0, 1);
    assert_eq!(choice(&b, "dotnet").0, 2);
    assert_eq!(choice(&b, "jvm").0, 2);
    assert_eq!(choice(&b, "go").0, 2);
}

#[test]
fn v1_parent_quota_under_an_unlimited_leaf() {
    let b = budget("v1-nested");
    let names: Vec<&str> = b.levels.iter().map(|l| l.cgroup.as_str()).collect();
    assert_eq!(names, ["/batch/job7", "/batch", "/"]);
    assert_eq!(b.levels[0].limit, Limit::Unlimited);
    assert_eq!(b.levels[2].limit, Limit::Unlimited);
    assert_eq!(b.quota_cpus, Some(1.0));
    assert_eq!(b.recommended_pool(), 1);
    assert_eq!(choice(&b, "rust").0, 1);
    assert_eq!(choice(&b, "go").0, 4);
    assert_eq!(choice(&b, "dotnet").0, 4);
}

#[test]
fn hybrid_uses_the_v1_cpu_hierarchy() {
    let b = budget("hybrid");
    assert_eq!(b.cgroup_version, CgroupVersion::Hybrid);
    assert_eq!(b.cpu_controller, Some(CpuController::V1));
    assert_eq!(b.cgroup_path.as_deref(), Some("/svc"));
    assert_eq!(b.quota_cpus, Some(0.5));
    assert!(approx(b.effective_cpus, 0.5));
    assert_eq!(b.recommended_pool(), 1);
}

#[test]
fn hybrid_without_a_cpu_controller_is_unlimited_with_a_note() {
    let b = budget("hybrid-no-cpu");
    assert_eq!(b.cgroup_version, CgroupVersion::Hybrid);
    assert_eq!(b.cpu_controller, None);
    assert!(b.levels.is_empty());
    assert_eq!(b.quota_status, QuotaStatus::Unlimited);
    assert!(approx(b.effective_cpus, 2.0));
    assert!(!b.notes.is_empty());
}

#[test]
fn a_broken_leaf_is_unknown_and_the_parent_still_counts() {
    let b = budget("broken-cpu-max");
    assert!(matches!(&b.levels[0].limit, Limit::Unknown(why) if why.contains("lots")));
    assert_eq!(b.quota_cpus, Some(3.0));
    assert_eq!(b.quota_status, QuotaStatus::Limited);
    assert!(b.notes.iter().any(|n| n.contains("could not be read")));
}

#[test]
fn only_broken_levels_make_the_quota_unknown() {
    let b = budget("broken-only");
    assert_eq!(b.quota_status, QuotaStatus::Unknown);
    assert_eq!(b.quota_cpus, None);
    assert!(matches!(&b.levels[0].limit, Limit::Unknown(why) if why.contains("12abc")));
    assert!(approx(b.effective_cpus, 4.0));
}

#[test]
fn garbage_proc_files_are_clear_errors() {
    let err = CpuBudget::detect_in(&fixture("broken-mountinfo")).unwrap_err();
    assert!(matches!(err, DetectError::Parse { .. }));
    assert!(err.to_string().contains("mountinfo"), "{err}");
    let err = CpuBudget::detect_in(&fixture("broken-proc-cgroup")).unwrap_err();
    assert!(err.to_string().contains("cgroup line 1"), "{err}");
}

#[test]
fn missing_proc_files_mean_no_cgroup() {
    let b = budget("no-cgroup");
    assert_eq!(b.host_cpus, 6);
    assert_eq!(b.cgroup_version, CgroupVersion::None);
    assert_eq!(b.affinity_cpus, 6);
    assert!(approx(b.effective_cpus, 6.0));
    assert!(b.notes.len() >= 2);
}

#[test]
fn a_missing_root_is_not_a_panic() {
    let b = CpuBudget::detect_in(&fixture("does-not-exist")).unwrap();
    assert_eq!(b.cgroup_version, CgroupVersion::None);
}

#[test]
fn an_affinity_mask_naming_offline_cpus_is_capped_at_the_online_ones() {
    let b = budget("affinity-offline");
    assert_eq!(b.host_cpus, 2);
    assert_eq!(b.affinity_cpus, 2);
    assert_eq!(b.quota_status, QuotaStatus::Unlimited);
    assert!(approx(b.effective_cpus, 2.0));
    assert_eq!(b.recommended_pool(), 2);
    assert!(
        b.notes.iter().any(|n| n.contains("only 2 are online")),
        "{:?}",
        b.notes
    );
}

#[test]
fn an_absurd_cpu_list_is_a_parse_error_not_an_overflow() {
    let err = CpuBudget::detect_in(&fixture("broken-status")).unwrap_err();
    assert!(matches!(err, DetectError::Parse { .. }), "{err}");
    assert!(err.to_string().contains("status"), "{err}");
}
