//! A Redis Cluster of the test's own (3 masters, 3 replicas, each a real `redis-server` on
//! loopback ports nobody else uses, cluster-node-timeout 2 s), that a test may SIGKILL a master
//! of. The shared local cluster that the cluster pass uses is never touched. Every node is
//! killed and its directory removed when this is dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a master may be unreachable before its replica takes over.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(2);

pub struct PrivateCluster {
    pub ports: Vec<u16>,
    dir: PathBuf,
    children: Vec<Option<Child>>,
}

/// A port whose cluster bus port (+10000) is free too.
fn free_cluster_port(taken: &[u16]) -> u16 {
    for _ in 0..1000 {
        let port = 20_000 + (rand::random::<u16>() % 20_000);
        if taken.contains(&port) {
            continue;
        }
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

impl PrivateCluster {
    pub fn start() -> PrivateCluster {
        let dir = std::env::temp_dir().join(format!("cf-cluster-{}", uuid::Uuid::new_v4().simple()));
        let mut ports = Vec::new();
        for _ in 0..6 {
            ports.push(free_cluster_port(&ports));
        }
        let mut cluster = PrivateCluster { ports: ports.clone(), dir, children: Vec::new() };
        for port in &ports {
            let child = cluster.spawn_node(*port);
            cluster.children.push(Some(child));
        }
        cluster.wait(Duration::from_secs(60), "every node answers PING", |c| {
            c.ports.iter().all(|p| c.cli(*p, &["ping"]) == "PONG")
        });
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&nodes)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(created.success(), "redis-cli --cluster create failed");
        cluster.wait(Duration::from_secs(30), "the cluster is ok on every node", |c| c.ok());
        cluster
            .wait(Duration::from_secs(30), "every replica is in sync with its master", |c| c.replicas_in_sync() == 3);
        cluster
    }

    /// Replicas whose link to their master is up.
    fn replicas_in_sync(&self) -> usize {
        self.ports
            .iter()
            .enumerate()
            .filter(|(i, _)| self.children[*i].is_some())
            .filter(|(_, p)| {
                let info = self.cli(**p, &["info", "replication"]);
                info.contains("role:slave") && info.contains("master_link_status:up")
            })
            .count()
    }

    /// A node on `port`, its nodes.conf in its own directory (so a restart rejoins as before).
    fn spawn_node(&self, port: u16) -> Child {
        let node_dir = self.dir.join(port.to_string());
        std::fs::create_dir_all(&node_dir).expect("node dir");
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", &NODE_TIMEOUT.as_millis().to_string()])
            .args(["--maxmemory-policy", "noeviction"])
            // A new replica syncs at once (the default waits 5 s for more replicas to share a
            // transfer): a replica that never synced may not be promoted.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(&node_dir)
            .args(["--logfile", "redis.log"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (script/services installs it)")
    }

    /// Starts a killed node again: it rejoins from its nodes.conf, as a replica of whoever took
    /// over its slots. Waits until the cluster is ok on every node.
    pub fn restart(&mut self, port: u16) {
        let index = self.ports.iter().position(|p| *p == port).expect("a node of this cluster");
        if self.children[index].is_none() {
            let child = self.spawn_node(port);
            self.children[index] = Some(child);
        }
        self.wait(Duration::from_secs(30), "the restarted node rejoined", |c| {
            c.ok()
                && c.cli(port, &["role"]).starts_with("slave")
                && c.cli(port, &["info", "replication"]).contains("master_link_status:up")
        });
    }

    /// Seed node URLs (REDIS_CLUSTER_NODES).
    pub fn urls(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("redis://127.0.0.1:{p}")).collect()
    }

    /// `redis-cli -p <port> <args…>`, trimmed; empty when the node does not answer.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    }

    fn ok(&self) -> bool {
        self.ports
            .iter()
            .enumerate()
            .all(|(i, p)| self.children[i].is_none() || self.cli(*p, &["cluster", "info"]).contains("cluster_state:ok"))
    }

    fn wait(&self, within: Duration, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !done(self) {
            assert!(Instant::now() < deadline, "private cluster: not true within {within:?}: {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The port of the master serving `key`, as a live node sees the slot table.
    pub fn master_of(&self, key: &str) -> Option<u16> {
        let alive: Vec<u16> =
            self.ports.iter().enumerate().filter(|(i, _)| self.children[*i].is_some()).map(|(_, p)| *p).collect();
        let asked = *alive.first()?;
        let slot: u16 = self.cli(asked, &["cluster", "keyslot", key]).parse().ok()?;
        // CLUSTER NODES: `<id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch> <state> <slots…>`
        self.cli(asked, &["cluster", "nodes"]).lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.contains("master") || flags.contains("fail") {
                return None;
            }
            let serves = fields.iter().skip(8).any(|range| match range.split_once('-') {
                Some((a, b)) => a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b),
                None => range.parse::<u16>() == Ok(slot),
            });
            let port = fields.get(1)?.split('@').next()?.rsplit_once(':')?.1.parse::<u16>().ok()?;
            (serves && self.ports.contains(&port)).then_some(port)
        })
    }

    /// SIGKILLs the node on `port` (no shutdown, no last replication).
    pub fn kill(&mut self, port: u16) {
        let index = self.ports.iter().position(|p| *p == port).expect("a node of this cluster");
        if let Some(mut child) = self.children[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until a master other than `old` serves `key`; returns how long that took.
    pub fn wait_for_new_master(&self, key: &str, old: u16, within: Duration) -> Duration {
        let started = Instant::now();
        self.wait(within, "a replica was promoted", |c| c.master_of(key).is_some_and(|p| p != old) && c.ok());
        started.elapsed()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The port of the master serving each of `keys`, by the cluster's own word (CLUSTER KEYSLOT,
/// CLUSTER SLOTS), through a connection to the cluster.
pub async fn master_ports(redis: &course_forum::testing::kv::Redis, keys: &[String]) -> Vec<u16> {
    let mut conn = redis.clone();
    let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn).await.expect("slots");
    let ranges: Vec<(u16, u16, u16)> = slots
        .iter()
        .map(|range| {
            let start: u16 = redis::from_redis_value_ref(&range[0]).expect("start");
            let end: u16 = redis::from_redis_value_ref(&range[1]).expect("end");
            let master: Vec<redis::Value> = redis::from_redis_value_ref(&range[2]).expect("master");
            (start, end, redis::from_redis_value_ref(&master[1]).expect("port"))
        })
        .collect();
    let mut ports = Vec::with_capacity(keys.len());
    for key in keys {
        let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query_async(&mut conn).await.expect("keyslot");
        let (_, _, port) = ranges.iter().find(|(start, end, _)| (*start..=*end).contains(&slot)).expect("a master");
        ports.push(*port);
    }
    ports
}
