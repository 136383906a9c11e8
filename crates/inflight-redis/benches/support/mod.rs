//! The benches' `redis-server`: started on a free loopback port, stopped when dropped.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child and its port.
pub struct Server(Child, pub u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `redis-server` on a free loopback port and waits up to 10 s for its PING; `None`
/// when it is not installed or never answers.
pub fn start_server() -> Option<Server> {
    let port = TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let server = Server(child, port);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if let Ok(mut conn) = client.get_connection() {
            if redis::cmd("PING").query::<String>(&mut conn).is_ok() {
                return Some(server);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
