//! A private redis-server on a free port, for tests that need a Redis of their own (a
//! different configuration, or one whose state they may wipe) without touching the shared one.

use std::process::{Command, Stdio};
use std::time::Duration;

/// A private redis-server on a free port, stopped on drop.
pub struct PrivateRedis {
    child: std::process::Child,
    pub port: u16,
}

impl PrivateRedis {
    pub fn start(extra: &[&str]) -> PrivateRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (script/services installs it)");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return PrivateRedis { child, port };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("private redis-server did not start");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
