//! Parsing of `/proc/self/mountinfo` and `/proc/self/cgroup`: where the cgroup hierarchies are
//! mounted and which cgroup this process belongs to in each.

use std::path::{Path, PathBuf};

/// Which kind of cgroup filesystem a mount is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsKind {
    V1,
    V2,
}

/// One cgroup (v1) or cgroup2 mount from `mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupMount {
    /// The cgroup this mount shows at its mount point (field 4, e.g. `/` or `/docker/abc`).
    pub root: String,
    /// Where it is mounted, as the process sees it (e.g. `/sys/fs/cgroup/cpu`).
    pub mount_point: PathBuf,
    pub kind: FsKind,
    /// v1: the controllers bound to the hierarchy (`cpu`, `cpuacct`, `name=systemd`, ...).
    pub controllers: Vec<String>,
    pub read_only: bool,
}

impl CgroupMount {
    pub(crate) fn has_controller(&self, name: &str) -> bool {
        self.controllers.iter().any(|c| c == name)
    }
}

/// One line of `/proc/self/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcCgroup {
    pub hierarchy_id: u32,
    /// Empty for the v2 line (`0::/path`).
    pub controllers: Vec<String>,
    pub path: String,
}

/// Undo the octal escapes (`\040` for a space) that mountinfo uses in paths.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let v = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                if let Ok(v) = u8::try_from(v) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup and cgroup2 mounts in a mountinfo text. Lines of other filesystems are ignored;
/// a malformed line is an error naming its number.
pub(crate) fn parse_mountinfo(text: &str) -> Result<Vec<CgroupMount>, String> {
    let mut mounts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((left, right)) = line.split_once(" - ") else {
            return Err(format!("mountinfo line {}: no ' - ' separator", n + 1));
        };
        let left: Vec<&str> = left.split_whitespace().collect();
        let right: Vec<&str> = right.split_whitespace().collect();
        if left.len() < 6 || right.is_empty() {
            return Err(format!("mountinfo line {}: too few fields", n + 1));
        }
        let kind = match right[0] {
            "cgroup" => FsKind::V1,
            "cgroup2" => FsKind::V2,
            _ => continue,
        };
        let mount_opts = left[5];
        let super_opts = right.get(2).copied().unwrap_or("");
        let read_only = mount_opts.split(',').any(|o| o == "ro");
        let controllers = match kind {
            FsKind::V1 => super_opts
                .split(',')
                .filter(|o| !o.is_empty() && *o != "rw" && *o != "ro")
                .map(str::to_string)
                .collect(),
            FsKind::V2 => Vec::new(),
        };
        mounts.push(CgroupMount {
            root: unescape(left[3]),
            mount_point: PathBuf::from(unescape(left[4])),
            kind,
            controllers,
            read_only,
        });
    }
    Ok(mounts)
}

/// The lines of a `/proc/<pid>/cgroup` text.
pub(crate) fn parse_proc_cgroup(text: &str) -> Result<Vec<ProcCgroup>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "cgroup line {}: expected 'id:controllers:path', got {line:?}",
                n + 1
            ));
        };
        let hierarchy_id = id
            .parse()
            .map_err(|_| format!("cgroup line {}: bad hierarchy id {id:?}", n + 1))?;
        if !path.starts_with('/') {
            return Err(format!(
                "cgroup line {}: path {path:?} is not absolute",
                n + 1
            ));
        }
        out.push(ProcCgroup {
            hierarchy_id,
            controllers: ctrl
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
            path: path.to_string(),
        });
    }
    Ok(out)
}

/// Whether a `cgroup.controllers` or `cgroup.subtree_control` text lists the `cpu` controller.
pub(crate) fn lists_cpu(controllers: &str) -> bool {
    controllers.split_whitespace().any(|c| c == "cpu")
}

/// The v1 mount that has the `cpu` controller, and the v2 mount, if any.
pub(crate) fn cpu_v1_mount(mounts: &[CgroupMount]) -> Option<&CgroupMount> {
    mounts
        .iter()
        .find(|m| m.kind == FsKind::V1 && m.has_controller("cpu"))
}

pub(crate) fn v2_mount(mounts: &[CgroupMount]) -> Option<&CgroupMount> {
    // Several cgroup2 mounts can exist (bind mounts); the first with root `/` is the canonical one.
    mounts
        .iter()
        .filter(|m| m.kind == FsKind::V2)
        .min_by_key(|m| m.root != "/")
}

/// The directory, under `mount` (prefixed by `prefix`), of the cgroup `proc_path` from
/// `/proc/self/cgroup`. The mount can show a sub-tree (its root field): the process path is then
/// relative to that root. When the process's cgroup is outside what the mount shows (a cgroup
/// namespace boundary, `/..`), the mount point itself is returned with a note.
pub(crate) fn cgroup_dir(
    prefix: &Path,
    mount: &CgroupMount,
    proc_path: &str,
) -> (PathBuf, Vec<String>, Option<String>) {
    let mount_dir = join_under(prefix, &mount.mount_point);
    let root = mount.root.trim_end_matches('/');
    let rel = if root.is_empty() {
        Some(proc_path.trim_start_matches('/'))
    } else if proc_path == root {
        Some("")
    } else {
        proc_path
            .strip_prefix(root)
            .and_then(|r| r.strip_prefix('/'))
    };
    match rel {
        Some(rel) if !rel.split('/').any(|c| c == "..") => {
            let components: Vec<String> = rel
                .split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            let mut dir = mount_dir;
            for c in &components {
                dir.push(c);
            }
            (dir, components, None)
        }
        _ => (
            mount_dir,
            Vec::new(),
            Some(format!(
                "this process's cgroup {proc_path:?} is outside the part of the hierarchy mounted at {} (mount root {:?}); reading the mount point instead",
                mount.mount_point.display(),
                mount.root
            )),
        ),
    }
}

/// `prefix` joined with an absolute path (`/a/b` under `/tmp/x` is `/tmp/x/a/b`).
pub(crate) fn join_under(prefix: &Path, abs: &Path) -> PathBuf {
    let rel = abs.strip_prefix("/").unwrap_or(abs);
    prefix.join(rel)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime shared:5 - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified ro,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn parses_hybrid_mountinfo() {
        let m = parse_mountinfo(HYBRID).unwrap();
        assert_eq!(m.len(), 4);
        let cpu = cpu_v1_mount(&m).unwrap();
        assert_eq!(cpu.mount_point, PathBuf::from("/sys/fs/cgroup/cpu"));
        assert!(!cpu.read_only);
        let v2 = v2_mount(&m).unwrap();
        assert!(v2.read_only);
        assert_eq!(m[2].controllers, vec!["name=systemd".to_string()]);
    }

    #[test]
    fn rejects_malformed_lines() {
        assert!(parse_mountinfo("garbage line\n").is_err());
        assert!(parse_proc_cgroup("x:cpu:/\n").is_err());
        assert!(parse_proc_cgroup("1:cpu\n").is_err());
        assert!(parse_proc_cgroup("1:cpu:relative\n").is_err());
    }

    #[test]
    fn unescapes_spaces() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/trail\\"), "/trail\\");
    }

    #[test]
    fn maps_process_path_through_mount_root() {
        let mount = CgroupMount {
            root: "/docker/abc".into(),
            mount_point: "/sys/fs/cgroup/cpu".into(),
            kind: FsKind::V1,
            controllers: vec!["cpu".into()],
            read_only: false,
        };
        let (dir, comps, note) = cgroup_dir(Path::new("/"), &mount, "/docker/abc/sub");
        assert_eq!(dir, PathBuf::from("/sys/fs/cgroup/cpu/sub"));
        assert_eq!(comps, vec!["sub".to_string()]);
        assert!(note.is_none());
        let (dir, _, note) = cgroup_dir(Path::new("/r"), &mount, "/other");
        assert_eq!(dir, PathBuf::from("/r/sys/fs/cgroup/cpu"));
        assert!(note.is_some());
    }
}
