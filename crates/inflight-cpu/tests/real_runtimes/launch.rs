//! The runtimes installed here, their versions as they report them, the tiny programs that print
//! their parallelism, and the probe's prediction of what those print.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use inflight_cpu::{runtime_choice, runtime_choices, CpuBudget, Runtime, RuntimeVersion};

/// How long a build may take (a first Go build compiles the standard library).
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);
/// How long one run of a runtime may take.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The name and predicted value of each number a program prints, for a budget.
pub type Predict = Box<dyn Fn(&CpuBudget) -> Vec<(&'static str, usize)>>;

/// One installed runtime, ready to run: the program that prints its parallelism (one number per
/// value, on one line) and the probe's prediction of each value.
pub struct Target {
    /// `JDK 17.0.15`, `Go 1.19.8`, `Python 3.11.7`, `Node 20.20.2 (libuv 1.46.0)`.
    pub label: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The files the program needs (a build directory); removed on drop.
    pub _files: Option<tempfile::TempDir>,
    pub predict: Predict,
}

/// Every JDK here (`java` on `PATH`, `$JAVA_HOME`, `/usr/lib/jvm/*`), each with a class printing
/// `Runtime.availableProcessors()` compiled by its own `javac`. Messages say what was skipped.
pub fn jdks(skipped: &mut Vec<String>) -> Vec<Target> {
    let mut candidates: Vec<PathBuf> = on_path("java").into_iter().collect();
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        candidates.push(Path::new(&home).join("bin/java"));
    }
    if let Ok(entries) = std::fs::read_dir("/usr/lib/jvm") {
        let mut homes: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        homes.sort();
        candidates.extend(homes.into_iter().map(|h| h.join("bin/java")));
    }
    let mut targets = Vec::new();
    for java in distinct_executables(candidates) {
        let Some(version) = version_of(&java, &["-version"]) else {
            skipped.push(format!(
                "{}: `java -version` gave no version",
                java.display()
            ));
            continue;
        };
        let javac = java.with_file_name("javac");
        if !is_executable(&javac) {
            skipped.push(format!(
                "JDK {version} at {}: no javac beside it",
                java.display()
            ));
            continue;
        }
        let dir = match build(
            "Main.java",
            "public class Main { public static void main(String[] a) { \
             System.out.println(Runtime.getRuntime().availableProcessors()); } }\n",
            |dir| {
                let mut cmd = Command::new(&javac);
                cmd.args(["-d", "."]).arg("Main.java").current_dir(dir);
                cmd
            },
        ) {
            Ok(dir) => dir,
            Err(e) => {
                skipped.push(format!("JDK {version}: {e}"));
                continue;
            }
        };
        targets.push(Target {
            label: format!("JDK {version}"),
            program: java,
            args: vec![
                "-cp".into(),
                dir.path().display().to_string(),
                "Main".into(),
            ],
            _files: Some(dir),
            predict: Box::new(move |b| {
                vec![(
                    "availableProcessors()",
                    runtime_choice(b, Runtime::Jvm, version).value,
                )]
            }),
        });
    }
    targets
}

/// Go (`go` on `PATH`, `/usr/lib/go/bin`, `/usr/local/go/bin`), with a program printing
/// `runtime.GOMAXPROCS(0)` whose `go.mod` names the toolchain's own version, so the toolchain's
/// defaults apply (from 1.25, `containermaxprocs`).
pub fn gos(skipped: &mut Vec<String>) -> Vec<Target> {
    let candidates = on_path("go")
        .into_iter()
        .chain([
            PathBuf::from("/usr/lib/go/bin/go"),
            PathBuf::from("/usr/local/go/bin/go"),
        ])
        .collect();
    let mut targets = Vec::new();
    for go in distinct_executables(candidates) {
        let Some(version) = version_of(&go, &["version"]) else {
            skipped.push(format!("{}: `go version` gave no version", go.display()));
            continue;
        };
        let go_mod = format!("module inflightprobe\n\ngo 1.{}\n", version.minor);
        let dir = build(
            "main.go",
            "package main\n\nimport (\n\t\"fmt\"\n\t\"runtime\"\n)\n\n\
             func main() { fmt.Println(runtime.GOMAXPROCS(0)) }\n",
            |dir| {
                let _ = std::fs::write(dir.join("go.mod"), &go_mod);
                let mut cmd = Command::new(&go);
                cmd.args(["build", "-o", "gomaxprocs", "."])
                    .current_dir(dir)
                    // Never download a newer toolchain or a module.
                    .env("GOTOOLCHAIN", "local")
                    .env("GOPROXY", "off")
                    .env("GOFLAGS", "-mod=mod");
                if std::env::var_os("HOME").is_none() && std::env::var_os("GOCACHE").is_none() {
                    cmd.env("GOCACHE", dir.join("cache"));
                }
                cmd
            },
        );
        let dir = match dir {
            Ok(dir) => dir,
            Err(e) => {
                skipped.push(format!("Go {version}: {e}"));
                continue;
            }
        };
        targets.push(Target {
            label: format!("Go {version}"),
            program: dir.path().join("gomaxprocs"),
            args: Vec::new(),
            _files: Some(dir),
            predict: Box::new(move |b| {
                vec![("GOMAXPROCS", runtime_choice(b, Runtime::Go, version).value)]
            }),
        });
    }
    targets
}

/// `python3` on `PATH` and Debian's `/usr/bin/python3`: `os.process_cpu_count()` (3.13+) or
/// `len(os.sched_getaffinity(0))`, then `os.cpu_count()`.
pub fn pythons(skipped: &mut Vec<String>) -> Vec<Target> {
    let mut targets = Vec::new();
    let candidates = on_path("python3")
        .into_iter()
        .chain([PathBuf::from("/usr/bin/python3")])
        .collect();
    for python in distinct_executables(candidates) {
        let Some(version) = version_of(&python, &["--version"]) else {
            skipped.push(format!(
                "{}: `python3 --version` gave no version",
                python.display()
            ));
            continue;
        };
        targets.push(Target {
            label: format!("Python {version}"),
            program: python,
            // -I: no PYTHON* variables, no user site.
            args: vec![
                "-I".into(),
                "-c".into(),
                "import os; f = getattr(os, 'process_cpu_count', None); \
                 print(f() if f else len(os.sched_getaffinity(0)), os.cpu_count())"
                    .into(),
            ],
            _files: None,
            predict: Box::new(move |b| {
                let cpu_count = runtime_choices(b)
                    .into_iter()
                    .find(|c| c.api.starts_with("os.cpu_count()"))
                    .expect("an os.cpu_count() row")
                    .value;
                let affinity = runtime_choice(b, Runtime::Python, version);
                vec![
                    (affinity.api, affinity.value),
                    ("os.cpu_count()", cpu_count),
                ]
            }),
        });
    }
    targets
}

/// `node` (or Debian's `nodejs`): `os.availableParallelism()`, predicted by the version of the
/// libuv inside it (`process.versions.uv`).
pub fn nodes(skipped: &mut Vec<String>) -> Vec<Target> {
    let candidates = on_path("node")
        .into_iter()
        .chain(on_path("nodejs"))
        .collect();
    let mut targets = Vec::new();
    for node in distinct_executables(candidates) {
        let (Some(version), Some(libuv)) = (
            version_of(&node, &["--version"]),
            version_of(&node, &["-p", "process.versions.uv"]),
        ) else {
            skipped.push(format!("{}: no version or libuv version", node.display()));
            continue;
        };
        let has_api = run(
            Command::new(&node).args(["-p", "typeof require('os').availableParallelism"]),
            RUN_TIMEOUT,
        );
        if has_api.as_deref().map(str::trim) != Ok("function") {
            skipped.push(format!(
                "Node {version}: no os.availableParallelism() (added in Node 18.14)"
            ));
            continue;
        }
        targets.push(Target {
            label: format!("Node {version} (libuv {libuv})"),
            program: node,
            args: vec![
                "-e".into(),
                "console.log(require('os').availableParallelism())".into(),
            ],
            _files: None,
            predict: Box::new(move |b| {
                vec![(
                    "availableParallelism()",
                    runtime_choice(b, Runtime::Node, libuv).value,
                )]
            }),
        });
    }
    targets
}

/// Runs `cmd` and returns its stdout, or why it failed; kills it after `timeout`.
pub fn run(cmd: &mut Command, timeout: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{:?} ran past {timeout:?}", cmd.get_program()));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Writes `source` as `file` in a fresh directory and runs the build there.
fn build(
    file: &str,
    source: &str,
    command: impl FnOnce(&Path) -> Command,
) -> Result<tempfile::TempDir, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    std::fs::write(dir.path().join(file), source).map_err(|e| e.to_string())?;
    run(&mut command(dir.path()), BUILD_TIMEOUT).map_err(|e| format!("build failed: {e}"))?;
    Ok(dir)
}

/// The version a runtime prints for `args`, on stdout or (as `java -version` does) stderr.
fn version_of(program: &Path, args: &[&str]) -> Option<RuntimeVersion> {
    let out = Command::new(program)
        .args(args)
        .env_remove("JAVA_TOOL_OPTIONS")
        .env_remove("_JAVA_OPTIONS")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    RuntimeVersion::parse(&text)
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The executables among `candidates`, each once (symlinks resolved), in order.
fn distinct_executables(candidates: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = BTreeSet::new();
    candidates
        .into_iter()
        .filter(|p| is_executable(p))
        .filter_map(|p| std::fs::canonicalize(&p).ok())
        .filter(|p| seen.insert(p.clone()))
        .collect()
}
