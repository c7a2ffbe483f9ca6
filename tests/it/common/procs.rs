//! Real processes for fault tests: a private `redis-server` on a free loopback port, with a
//! data directory of its own (optionally AOF `everysec`), that a test can SIGKILL and restart
//! (also for tests that need a Redis configured otherwise, or one whose keys they may wipe);
//! and the `course-forum` binary serving on a free port. Both are killed when dropped, so a
//! failing test leaves nothing running. The shared Redis and PostgreSQL are never touched.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::TestApp;

/// What a finished process wrote to stderr, as text.
pub fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// A redis-server of the test's own.
pub struct PrivateRedis {
    pub port: u16,
    dir: PathBuf,
    aof: bool,
    /// More `redis-server` arguments, after (so over) the ones `spawn` gives.
    extra: Vec<String>,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts one; with `aof`, every write is appended to disk and fsynced every second
    /// (`appendonly yes`, `appendfsync everysec`), as docs/operations.md recommends.
    pub fn start(aof: bool) -> PrivateRedis {
        Self::start_with(aof, &[])
    }

    /// `start` with more `redis-server` arguments, which win over the defaults (e.g.
    /// `["--maxmemory-policy", "allkeys-lru"]`); kept for restarts.
    pub fn start_with(aof: bool, extra: &[&str]) -> PrivateRedis {
        let dir = std::env::temp_dir().join(format!("cf-redis-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("redis data dir");
        let extra = extra.iter().map(|arg| (*arg).to_owned()).collect();
        let mut redis = PrivateRedis { port: free_port(), dir, aof, extra, child: None };
        redis.spawn();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", if self.aof { "yes" } else { "no" }, "--appendfsync", "everysec"])
            .args(["--maxmemory-policy", "noeviction"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "redis.log"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed for the fault tests (script/services installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.answers_ping() {
            assert!(Instant::now() < deadline, "the private redis-server did not answer PING within 15 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// PONG (not LOADING, not refused).
    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut reply = [0u8; 16];
        matches!(stream.read(&mut reply), Ok(n) if reply[..n].starts_with(b"+PONG"))
    }

    /// SIGKILL: no shutdown save, no final fsync; what the AOF had on disk is what survives.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port and data directory (AOF replayed when enabled).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Kills it and starts an empty one on the same port: every key is gone.
    pub fn restart_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).expect("redis data dir");
        self.spawn();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `course-forum serve` (or `worker`) as its own process, on the test's database and key
/// prefix.
pub struct ServeProcess {
    pub addr: SocketAddr,
    child: Option<Child>,
    /// Its stderr (the logs).
    pub log: PathBuf,
}

impl ServeProcess {
    /// Buffered likes, the worker inside, no rate limit; `env` adds or overrides settings.
    pub fn spawn(app: &TestApp, redis_url: &str, env: &[(&str, &str)]) -> ServeProcess {
        Self::spawn_command("serve", app, redis_url, env)
    }

    /// `course-forum worker`, with its operator endpoints on `addr` (`WORKER_METRICS_BIND`).
    pub fn spawn_worker(app: &TestApp, redis_url: &str, env: &[(&str, &str)]) -> ServeProcess {
        Self::spawn_command("worker", app, redis_url, env)
    }

    fn spawn_command(command: &str, app: &TestApp, redis_url: &str, env: &[(&str, &str)]) -> ServeProcess {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("address");
        let log = std::env::temp_dir().join(format!("cf-serve-{}.log", uuid::Uuid::new_v4().simple()));
        let stderr = std::fs::File::create(&log).expect("log file");
        let subcommand = command;
        let mut command = Command::new(env!("CARGO_BIN_EXE_course-forum"));
        command
            .arg(subcommand)
            .env("DATABASE_URL", super::database_url(&app.database))
            .env("REDIS_URL", redis_url)
            .env("REDIS_CLUSTER_NODES", super::redis_cluster_nodes().join(","))
            .env("REDIS_KEY_PREFIX", &app.redis_prefix)
            .env("JWT_SECRET", super::JWT_SECRET)
            .env("BIND", addr.to_string())
            .env("WORKER_METRICS_BIND", addr.to_string())
            .env("LIKE_MODE", "buffered")
            .env("LIKE_STREAM_SHARDS", app.state.keys.shards().to_string())
            .env("WORKER_IN_SERVE", "true")
            .env("LIKE_RATE_PER_MINUTE", "0")
            .env("RUST_LOG", "warn")
            .env_remove("LOG_FORMAT")
            .stdout(Stdio::null())
            .stderr(stderr);
        command.envs(env.iter().copied());
        let child = command.spawn().expect("spawn course-forum serve");
        ServeProcess { addr, child: Some(child), log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits until `/healthz` answers (or panics with the log after `timeout`).
    pub async fn wait_healthy(&mut self, timeout: Duration) {
        course_forum::testing::tls::install_crypto_provider();
        let client = reqwest::Client::new();
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(response) = client.get(self.url("/healthz")).timeout(Duration::from_secs(1)).send().await
                && response.status().is_success()
            {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("course-forum serve exited with {status} before it was healthy:\n{}", self.logs());
            }
            assert!(Instant::now() < deadline, "course-forum serve not healthy within {timeout:?}:\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("running")
    }

    /// SIGKILL, as an OOM killer or a pulled plug would: no shutdown at all.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, as an orchestrator stopping the process would.
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().expect("kill -TERM");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits for the process to exit, at most `timeout`; None if it is still running.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}
