//! TLS for the test topologies: a certificate authority and a certificate (for the IP address
//! 127.0.0.1, good for serving and, on a cluster's bus, for calling other nodes) made with the
//! `openssl` command in a temporary directory, with a second, unrelated authority that a client
//! must not accept the server's certificate from; and a `redis-server` that speaks TLS only
//! (`--port 0`: no plain port) and refuses clients that do not log in as its one ACL user, on a
//! free loopback port, killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::cluster::installed;
use super::ms;

/// The ACL user that may log in.
pub const USER: &str = "app";
/// Its password.
pub const PASSWORD: &str = "s3cret-pw";

/// The authorities and the server's keys, in a directory removed on drop.
pub struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    /// Makes them, or `None` (after saying why) when `openssl` is not installed.
    pub fn make() -> Option<Certificates> {
        if Command::new("openssl")
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            eprintln!("skipped: openssl is not installed (apt-get install openssl)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        make_certificates(dir.path());
        Some(Certificates { dir })
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// The authority that signed the server's certificate (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// An authority that signed nothing of the server's (PEM).
    pub fn other_ca_file(&self) -> PathBuf {
        self.dir.path().join("other-ca.pem")
    }

    /// `redis-server` arguments for TLS alone on `port` (on a cluster's bus and a replica's
    /// link too), with the ACL user the only one let in, and replicas logging in as it.
    pub fn server_args(&self, port: u16) -> Vec<String> {
        [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &self.path("server.pem"),
            "--tls-key-file",
            &self.path("server.key"),
            "--tls-ca-cert-file",
            &self.path("ca.pem"),
            "--tls-auth-clients",
            "no",
            "--tls-cluster",
            "yes",
            "--tls-replication",
            "yes",
            "--masteruser",
            USER,
            "--masterauth",
            PASSWORD,
            // Nobody gets in without logging in as USER.
            "--user",
            "default",
            "off",
            "--user",
            USER,
            "on",
            &format!(">{PASSWORD}"),
            "~*",
            "&*",
            "+@all",
        ]
        .map(str::to_string)
        .to_vec()
    }

    /// `redis-cli` arguments to reach such a server.
    pub fn cli_args(&self) -> Vec<String> {
        ["--tls", "--cacert", &self.path("ca.pem")]
            .into_iter()
            .chain(["--user", USER, "--pass", PASSWORD])
            .map(str::to_string)
            .collect()
    }

    /// `redis-sentinel` configuration lines for TLS alone on `port`, reaching the primary
    /// `master` (and the other sentinels) over TLS as the ACL user.
    pub fn sentinel_config(&self, port: u16, master: &str) -> String {
        format!(
            "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
             tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n\
             sentinel auth-user {master} {USER}\nsentinel auth-pass {master} {PASSWORD}\n",
            self.path("server.pem"),
            self.path("server.key"),
            self.path("ca.pem"),
        )
    }

    /// How a test logs in to a data node: as the ACL user, over TLS.
    pub fn login(&self) -> Login {
        Login {
            ca: std::fs::read(self.ca_file()).unwrap(),
            acl: true,
        }
    }

    /// How a test reaches a sentinel: over TLS, as its default user.
    pub fn sentinel_login(&self) -> Login {
        Login {
            acl: false,
            ..self.login()
        }
    }
}

/// A login over TLS, trusting the test's authority: as the ACL user, or (to a sentinel) as
/// no one in particular.
#[derive(Clone)]
pub struct Login {
    ca: Vec<u8>,
    acl: bool,
}

impl Login {
    pub fn url(&self, port: u16) -> String {
        if self.acl {
            format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{port}")
        } else {
            format!("rediss://127.0.0.1:{port}")
        }
    }

    pub fn client(&self, port: u16) -> redis::Client {
        // redis's TLS needs a process-wide crypto provider; the library installs the same one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        redis::Client::build_with_tls(
            self.url(port),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(self.ca.clone()),
            },
        )
        .unwrap()
    }
}

pub struct TlsRedisServer {
    port: u16,
    child: Option<Child>,
    certificates: Certificates,
}

impl TlsRedisServer {
    /// Starts one, or `None` (after saying why) when `redis-server` or `openssl` is not
    /// installed. Panics, with the server's log, when it exits for any other reason than a
    /// port taken first (a `redis-server` built without TLS among them).
    pub fn start() -> Option<TlsRedisServer> {
        if !installed("redis-server") {
            return None;
        }
        let certificates = Certificates::make()?;
        // The port is free when picked, but another test's listener may take it before the
        // server binds it: then the server exits, and another port is tried.
        for _ in 0..20 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port();
            match spawn(&certificates, port) {
                Started::Yes(child) => {
                    return Some(TlsRedisServer {
                        port,
                        child: Some(child),
                        certificates,
                    })
                }
                Started::PortTaken => {}
            }
        }
        panic!("redis-server could not bind a free loopback port in 20 tries");
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The `rediss` URL of the server, logging in as `user` with `password` when given.
    pub fn url(&self, login: Option<(&str, &str)>) -> String {
        match login {
            Some((user, password)) => format!("rediss://{user}:{password}@{}", self.addr()),
            None => format!("rediss://{}", self.addr()),
        }
    }

    /// The authority that signed the server's certificate (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.certificates.ca_file()
    }

    /// An authority that signed nothing of the server's (PEM).
    pub fn other_ca_file(&self) -> PathBuf {
        self.certificates.other_ca_file()
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TlsRedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

enum Started {
    Yes(Child),
    PortTaken,
}

/// Starts the server on `port` with `certificates`, its log beside them.
fn spawn(certificates: &Certificates, port: u16) -> Started {
    let dir = certificates.dir.path();
    let log = dir.join(format!("redis-{port}.log"));
    let _ = std::fs::remove_file(&log);
    let mut child = Command::new("redis-server")
        .args(certificates.server_args(port))
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--dir", &dir.display().to_string()])
        .args(["--logfile", &log.display().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server starts");
    // Our server is the one on the port once it says it is ready: it exits instead when it
    // cannot bind the port.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if let Ok(Some(_)) = child.try_wait() {
            if text.contains("Address already in use") {
                return Started::PortTaken;
            }
            panic!("redis-server with TLS on port {port} exited: {text}");
        }
        if text.contains("Ready to accept connections")
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        {
            return Started::Yes(child);
        }
        std::thread::sleep(ms(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("redis-server with TLS on port {port} was not ready within 10 s");
}

/// `ca.pem`, `server.pem` and `server.key` (signed by `ca.pem`, for IP 127.0.0.1), and
/// `other-ca.pem`, in `dir`: P-256 keys, valid for two days.
fn make_certificates(dir: &Path) {
    let authority = |name: &str, cn: &str| {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
                "-days",
                "2",
                "-subj",
                &format!("/CN={cn}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
    };
    authority("ca", "inflight test CA");
    authority("other-ca", "inflight unrelated CA");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            "2",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let Output { status, stderr, .. } = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    assert!(
        status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&stderr)
    );
}
