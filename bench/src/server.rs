//! A real `course-forum serve` child process for one scenario: started next to the bench binary
//! on a free port with its own Redis key prefix, waited for until healthy, read through its
//! `GET /metrics` (the app's own counters), and stopped. Also the machine facts a run records:
//! load average and the CPU time each process used.

use std::collections::HashMap;
use std::time::Duration;

use course_forum::testing::config::{LikeMode, RedisTarget};
use course_forum::testing::db::stmt;
use course_forum::testing::error::{AppError, AppResult};
use sea_orm::{DatabaseConnection, FromQueryResult};

/// One server to run: a binary, and environment of its own (`--variant-env`).
#[derive(Clone, Debug)]
pub struct ServerBin {
    pub exe: std::path::PathBuf,
    pub env: Vec<(String, String)>,
    /// Runs on the schema without migration 0009's ranking column and triggers
    /// (`--pre-0009-server-bin`).
    pub pre_0009: bool,
}

/// Takes migration 0009's per-row costs out of the schema: the triggers and the generated
/// column (the notification tables stay: nothing writes them then).
const SCHEMA_WITHOUT_0009: &str = "DROP TRIGGER IF EXISTS posts_like_milestones ON posts; \
     DROP TRIGGER IF EXISTS comments_like_milestones ON comments; \
     ALTER TABLE posts DROP COLUMN IF EXISTS hot_score";

/// Puts them back as migration 0009 made them.
const SCHEMA_WITH_0009: &str = "ALTER TABLE posts ADD COLUMN IF NOT EXISTS hot_score double precision \
       GENERATED ALWAYS AS (post_hot_score(like_count, comment_count, created_at)) STORED; \
     CREATE OR REPLACE TRIGGER posts_like_milestones AFTER UPDATE OF like_count ON posts FOR EACH ROW \
       WHEN ((OLD.like_count < 10 AND NEW.like_count >= 10) OR (OLD.like_count < 100 AND NEW.like_count >= 100) \
          OR (OLD.like_count < 1000 AND NEW.like_count >= 1000)) EXECUTE FUNCTION post_like_milestones(); \
     CREATE OR REPLACE TRIGGER comments_like_milestones AFTER UPDATE OF like_count ON comments FOR EACH ROW \
       WHEN ((OLD.like_count < 10 AND NEW.like_count >= 10) OR (OLD.like_count < 100 AND NEW.like_count >= 100) \
          OR (OLD.like_count < 1000 AND NEW.like_count >= 1000)) EXECUTE FUNCTION comment_like_milestones()";

/// A short name for a server in tables: its file name and, for `course-forum` itself, the
/// profile directory (`release/course-forum`), then its own environment.
pub fn label(server: &ServerBin) -> String {
    let exe = &server.exe;
    let name = exe.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut label = match exe.parent().and_then(|d| d.file_name()) {
        Some(dir) if name == "course-forum" => format!("{}/{name}", dir.to_string_lossy()),
        _ => name,
    };
    for (name, value) in &server.env {
        label.push_str(&format!(" {name}={value}"));
    }
    if server.pre_0009 {
        label.push_str(" (schema before 0009)");
    }
    label
}

/// The signing secret every bench server and its load share.
pub const SECRET: &str = "bench-secret-0123456789abcdef";

pub fn internal(what: &str) -> impl Fn(String) -> AppError + '_ {
    move |e| AppError::Internal(format!("{what}: {e}"))
}

pub struct Server {
    child: tokio::process::Child,
    pub pid: u32,
    /// Which binary it runs, as tables name it (`label`).
    pub label: String,
    pub base: String,
    pub prefix: String,
    /// Where its keys are (its own REDIS_CLUSTER_NODES, else the bench's Redis).
    redis: RedisTarget,
    http: reqwest::Client,
}

impl Server {
    /// Starts `course-forum serve` on `database_url` with a fresh key prefix. `env` adds or
    /// overrides settings (the defaults are production's, except the secret and the address).
    pub async fn start(
        cli: &crate::Cli,
        server: &ServerBin,
        database_url: &str,
        mode: LikeMode,
        env: &[(&str, String)],
    ) -> AppResult<Server> {
        let redis_url = &cli.redis_url;
        let database_url = match &cli.db_sslmode {
            Some(mode) => format!("{database_url}?sslmode={mode}"),
            None => database_url.to_owned(),
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| internal("free port")(e.to_string()))?
            .port();
        let prefix = format!("bench{}", uuid::Uuid::new_v4().simple());
        let mode_name = match mode {
            LikeMode::Sync => "sync",
            LikeMode::Recount => "recount",
            LikeMode::Buffered => "buffered",
        };
        // The schema this server expects: before 0009 for the "before" binary, else current.
        let schema = course_forum::testing::db::connect_url(&database_url, Duration::from_secs(5), 1).await?;
        sea_orm::ConnectionTrait::execute_unprepared(
            &schema,
            if server.pre_0009 { SCHEMA_WITHOUT_0009 } else { SCHEMA_WITH_0009 },
        )
        .await?;
        schema.close().await?;
        let mut command = tokio::process::Command::new(&server.exe);
        command
            .arg("serve")
            .env("DATABASE_URL", &database_url)
            .env("REDIS_URL", redis_url)
            .env("REDIS_KEY_PREFIX", &prefix)
            .env("JWT_SECRET", SECRET)
            .env("BIND", format!("127.0.0.1:{port}"))
            .env("LIKE_MODE", mode_name)
            .env("RUST_LOG", "warn")
            // The load comes from one address and reuses a few users' tokens for thousands of
            // sockets: the per-address and per-user socket caps would refuse the bench itself.
            .env("WS_MAX_PER_ADDRESS", "0")
            .env("WS_MAX_PER_USER", "0")
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        for (name, value) in cli.server_env.iter().chain(&server.env) {
            command.env(name, value);
        }
        let child = command
            .spawn()
            .map_err(|e| internal("start the server (run `cargo build --release --bins` first)")(e.to_string()))?;
        let pid = child.id().unwrap_or(0);
        let http = reqwest::Client::new();
        let cluster = cli.server_env.iter().chain(&server.env).rev().find(|(name, _)| name == "REDIS_CLUSTER_NODES");
        let redis = match cluster {
            Some((_, nodes)) if !nodes.is_empty() => {
                RedisTarget::Cluster(nodes.split(',').map(str::to_owned).collect())
            }
            _ => RedisTarget::Node(redis_url.clone()),
        };
        let label = label(server);
        let server = Server { child, pid, label, base: format!("http://127.0.0.1:{port}"), prefix, redis, http };
        server.wait_healthy().await?;
        Ok(server)
    }

    pub fn graphql_url(&self) -> String {
        format!("{}/graphql", self.base)
    }

    pub fn ws_url(&self) -> String {
        format!("ws://127.0.0.1:{}/graphql/ws", self.base.rsplit(':').next().unwrap_or_default())
    }

    async fn wait_healthy(&self) -> AppResult<()> {
        for _ in 0..200 {
            if self.http.get(format!("{}/healthz", self.base)).send().await.is_ok_and(|r| r.status().is_success()) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(AppError::Internal("the server did not become healthy within 10 s".into()))
    }

    /// Every sample of `GET /metrics`, by its name with labels.
    pub async fn metrics(&self) -> AppResult<HashMap<String, f64>> {
        let text = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .map_err(|e| internal("GET /metrics")(e.to_string()))?
            .text()
            .await
            .map_err(|e| internal("GET /metrics")(e.to_string()))?;
        let mut samples = HashMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            if let Some((name, value)) = line.rsplit_once(' ')
                && let Ok(value) = value.parse::<f64>()
            {
                samples.insert(name.to_owned(), value);
            }
        }
        Ok(samples)
    }

    /// The app's own counters, from `GET /metrics`.
    pub async fn counters(&self) -> AppResult<Counters> {
        let samples = self.metrics().await?;
        let get = |name: &str| samples.get(name).copied().unwrap_or(0.0);
        Ok(Counters {
            redis_api: get("redis_commands_total{role=\"api\"}"),
            redis_worker: get("redis_commands_total{role=\"worker\"}"),
            sql: get("sql_statements_total{role=\"api\"}"),
        })
    }

    /// Stops the server and deletes every key of its prefix.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        delete_prefix(&self.redis, &self.prefix).await;
    }
}

/// A snapshot of the app's counters; subtract two for a window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub redis_api: f64,
    pub redis_worker: f64,
    pub sql: f64,
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, earlier: Counters) -> Counters {
        Counters {
            redis_api: self.redis_api - earlier.redis_api,
            redis_worker: self.redis_worker - earlier.redis_worker,
            sql: self.sql - earlier.sql,
        }
    }
}

/// Deletes every key under `prefix` (SCAN, not KEYS: the Redis is shared). Best effort.
pub async fn delete_prefix(redis: &RedisTarget, prefix: &str) {
    if let Ok(conn) = course_forum::testing::kv::connect_to(redis, Duration::from_secs(5), "bench").await {
        let _ = course_forum::testing::kv::unlink_matching(&conn, &format!("{prefix}:*")).await;
    }
}

/// CPU seconds (user + system) a process has used, from /proc (Linux); 0 when unknown.
pub fn cpu_seconds_of(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let Some((_, rest)) = stat.rsplit_once(')') else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / clock_ticks_per_second()
}

/// CPU seconds used so far by every process whose name is `comm` (e.g. `postgres`), machine-wide.
pub fn cpu_seconds_named(comm: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0.0 };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm))
        .map(cpu_seconds_of)
        .sum()
}

fn clock_ticks_per_second() -> f64 {
    // USER_HZ is 100 on every Linux architecture this runs on.
    100.0
}

/// The 1-minute load average.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// CPU seconds by component over a window: this bench process, the server, the PostgreSQL
/// backends serving the benchmark's database (not anyone else's), and Redis (machine-wide: one
/// shared process).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CpuSplit {
    pub bench: f64,
    pub server: f64,
    pub postgres: f64,
    pub redis: f64,
    #[serde(skip)]
    backends: HashMap<u32, f64>,
}

impl CpuSplit {
    pub async fn now(server_pid: u32, db: &DatabaseConnection) -> AppResult<CpuSplit> {
        #[derive(FromQueryResult)]
        struct Backend {
            pid: i32,
        }
        let backends: HashMap<u32, f64> =
            Backend::find_by_statement(stmt("SELECT pid FROM pg_stat_activity WHERE datname = current_database()", []))
                .all(db)
                .await?
                .into_iter()
                .map(|b| (b.pid as u32, cpu_seconds_of(b.pid as u32)))
                .collect();
        Ok(CpuSplit {
            bench: cpu_seconds_of(std::process::id()),
            server: cpu_seconds_of(server_pid),
            postgres: backends.values().sum(),
            redis: cpu_seconds_named("redis-server"),
            backends,
        })
    }

    pub fn since(&self, earlier: &CpuSplit) -> CpuSplit {
        let postgres =
            self.backends.iter().map(|(pid, cpu)| cpu - earlier.backends.get(pid).copied().unwrap_or(0.0)).sum();
        CpuSplit {
            bench: self.bench - earlier.bench,
            server: self.server - earlier.server,
            postgres,
            redis: self.redis - earlier.redis,
            backends: HashMap::new(),
        }
    }

    pub fn total(&self) -> f64 {
        self.bench + self.server + self.postgres + self.redis
    }

    /// CPU milliseconds per request, all four together.
    pub fn ms_per(&self, requests: usize) -> f64 {
        self.total() * 1000.0 / requests.max(1) as f64
    }
}

/// Resident memory of a process in bytes (`VmRSS` in /proc, Linux); 0 when unknown.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}
