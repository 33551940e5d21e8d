//! A real Redis Cluster for the tests, of its own: `redis-server --cluster-enabled yes`
//! processes on loopback ports, joined by `redis-cli --cluster create` (both from Debian's
//! `redis-server`/`redis-tools`), each node with its own directory, no persistence.
//!
//! A test can kill the master that holds a key ([`RedisCluster::kill_master_of`]) and wait
//! for its replica to take over: a real failover, as the cluster runs it (the node timeout
//! is 1 s, so it takes a few seconds).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::error::TestkitError;

/// The node timeout of the clusters made here (ms): a dead master is failed over a few
/// seconds after.
const NODE_TIMEOUT_MS: u64 = 1_000;

/// `name` (`redis-server`, `redis-cli`) on `PATH` or in `/usr/bin`, `/usr/local/bin`.
pub fn redis_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|dir| dir.join(name))
        .find(|bin| bin.is_file())
}

/// A cluster of `masters` masters with `replicas` replicas each for a test, or `None` after
/// printing `skipped: redis-server not installed`.
///
/// # Panics
///
/// When `redis-server` or `redis-cli` is missing under CI (`CI` set: CI must run every
/// test), or when the cluster does not start.
pub fn redis_cluster_for_test(masters: usize, replicas: usize) -> Option<RedisCluster> {
    if redis_binary("redis-server").is_none() || redis_binary("redis-cli").is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this test: install redis-server and redis-tools"
        );
        println!("skipped: redis-server not installed");
        return None;
    }
    match RedisCluster::start(masters, replicas) {
        Ok(cluster) => Some(cluster),
        Err(e) => panic!("{e}"),
    }
}

struct Node {
    port: u16,
    child: Option<Child>,
}

/// A running cluster; every node is killed (and its directory removed) when dropped.
pub struct RedisCluster {
    cli: PathBuf,
    dir: PathBuf,
    nodes: Vec<Node>,
    masters: usize,
}

fn fail(message: String) -> TestkitError {
    TestkitError::Process {
        what: "the Redis Cluster",
        message,
    }
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each (at least 3 masters, as Redis
    /// requires), joins them, and waits until every node reports `cluster_state:ok` and
    /// every replica is in sync (at most 30 s).
    pub fn start(masters: usize, replicas: usize) -> Result<RedisCluster, TestkitError> {
        let server = redis_binary("redis-server")
            .ok_or_else(|| fail("redis-server is not installed".into()))?;
        let cli =
            redis_binary("redis-cli").ok_or_else(|| fail("redis-cli is not installed".into()))?;
        let count = masters * (1 + replicas);
        let dir = std::env::temp_dir().join(format!(
            "silk-test-redis-cluster-{}-{}",
            std::process::id(),
            crate::free_port()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
        let mut cluster = RedisCluster {
            cli,
            dir,
            nodes: Vec::new(),
            masters,
        };
        for _ in 0..count {
            let node = cluster.start_node(&server)?;
            cluster.nodes.push(node);
        }
        let mut create = Command::new(&cluster.cli);
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| fail(format!("redis-cli --cluster create: {e}")))?;
        if !out.status.success() {
            return Err(fail(format!(
                "redis-cli --cluster create: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let ready =
            crate::eventually_blocking(Duration::from_secs(30), Duration::from_millis(50), || {
                cluster
                    .nodes
                    .iter()
                    .all(|n| cluster.node_ready(n.port, replicas))
                    .then_some(())
            });
        ready.ok_or_else(|| {
            fail(format!(
                "not ready within 30 s; the logs are under {}",
                cluster.dir.display()
            ))
        })?;
        Ok(cluster)
    }

    /// Starts one node on fresh ports and waits until it listens (at most 10 s). A node that
    /// exits first (its port or bus port was taken meanwhile) is started again on other
    /// ports, up to three times; the error quotes its log.
    fn start_node(&self, server: &Path) -> Result<Node, TestkitError> {
        let mut last = String::new();
        for _ in 0..3 {
            let port = crate::free_port();
            let bus = crate::free_port();
            let node_dir = self.dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir)
                .map_err(|e| fail(format!("{}: {e}", node_dir.display())))?;
            let mut child = Command::new(server)
                .args(["--port", &port.to_string()])
                .args(["--cluster-port", &bus.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
                .args(["--save", ""])
                .args(["--appendonly", "no"])
                .arg("--dir")
                .arg(&node_dir)
                .args(["--logfile", "redis.log"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| fail(format!("{}: {e}", server.display())))?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let up = crate::eventually_blocking(
                Duration::from_secs(10),
                Duration::from_millis(20),
                || {
                    if !matches!(child.try_wait(), Ok(None)) {
                        return Some(false);
                    }
                    TcpStream::connect_timeout(&addr, Duration::from_millis(200))
                        .ok()
                        .map(|_| true)
                },
            );
            if up == Some(true) {
                return Ok(Node {
                    port,
                    child: Some(child),
                });
            }
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            let log = std::fs::read_to_string(node_dir.join("redis.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            last = format!(
                "a node on {addr} (bus port {bus}) did not listen within 10 s ({status}); \
                 its log ends: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        Err(fail(last))
    }

    /// Whether the node on `port` is ready: the cluster is `ok` for it, it sees every node in
    /// its role (the gossip has converged), and its replication is in sync — a master has
    /// `replicas` replicas online, a replica has its link up and no sync in progress.
    fn node_ready(&self, port: u16, replicas: usize) -> bool {
        let Some(info) = self.cli(port, &["cluster", "info"]) else {
            return false;
        };
        if !info.contains("cluster_state:ok") {
            return false;
        }
        let Some(nodes) = self.cli(port, &["cluster", "nodes"]) else {
            return false;
        };
        let flags = |role: &str| {
            nodes
                .lines()
                .filter(|l| {
                    l.split_whitespace()
                        .nth(2)
                        .is_some_and(|f| f.split(',').any(|f| f == role))
                })
                .count()
        };
        if flags("master") != self.masters || flags("slave") != self.masters * replicas {
            return false;
        }
        let Some(replication) = self.cli(port, &["info", "replication"]) else {
            return false;
        };
        if replication.contains("role:slave") {
            replication.contains("master_link_status:up")
                && replication.contains("master_sync_in_progress:0")
        } else {
            replication.contains(&format!("connected_slaves:{replicas}"))
                && replication.matches("state=online").count() == replicas
        }
    }

    /// What `redis-cli -p PORT ARGS…` printed, or `None` when it failed.
    fn cli(&self, port: u16, args: &[&str]) -> Option<String> {
        let out = Command::new(&self.cli)
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The URL of the cluster for Silk (`redis+cluster://` and the masters it started with).
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .take(self.masters)
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// The directory that holds every node's log (`PORT/redis.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The port of the master that serves `key`'s slot now, as a live node sees it.
    pub fn master_of(&self, key: &str) -> Option<u16> {
        self.master_node(key).map(|(_, port)| port)
    }

    /// The lines of `CLUSTER NODES` as a live node sees them, split in fields.
    fn cluster_nodes(&self) -> Vec<Vec<String>> {
        let Some(live) = self.nodes.iter().find(|n| n.child.is_some()) else {
            return Vec::new();
        };
        self.cli(live.port, &["cluster", "nodes"])
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    }

    /// The id and port of the master that serves `key`'s slot now.
    fn master_node(&self, key: &str) -> Option<(String, u16)> {
        let live = self.nodes.iter().find(|n| n.child.is_some())?;
        let slot: u16 = self
            .cli(live.port, &["cluster", "keyslot", key])?
            .trim()
            .parse()
            .ok()?;
        self.cluster_nodes().into_iter().find_map(|fields| {
            let flags = fields.get(2)?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                return None;
            }
            let serves = fields.iter().skip(8).any(|range| {
                let mut ends = range.splitn(2, '-');
                let start = ends.next().and_then(|s| s.parse::<u16>().ok());
                let end = ends.next().map_or(start, |s| s.parse::<u16>().ok());
                matches!((start, end), (Some(a), Some(b)) if a <= slot && slot <= b)
            });
            serves.then_some((fields.first()?.clone(), port_of(&fields)?))
        })
    }

    /// Stops (SIGSTOP) every replica of the master that holds `key`: they stay connected
    /// but confirm nothing. Returns their ports, for [`RedisCluster::resume`].
    pub fn pause_replicas_of(&self, key: &str) -> Result<Vec<u16>, TestkitError> {
        let (master, _) = self
            .master_node(key)
            .ok_or_else(|| fail(format!("no master serves `{key}`")))?;
        let ports: Vec<u16> = self
            .cluster_nodes()
            .iter()
            .filter(|f| {
                f.get(3) == Some(&master) && f.get(2).is_some_and(|fl| fl.contains("slave"))
            })
            .filter_map(|f| port_of(f))
            .collect();
        if ports.is_empty() {
            return Err(fail(format!("the master of `{key}` has no replica")));
        }
        self.signal(&ports, "-STOP")?;
        Ok(ports)
    }

    /// Continues (SIGCONT) the nodes on `ports`.
    pub fn resume(&self, ports: &[u16]) -> Result<(), TestkitError> {
        self.signal(ports, "-CONT")
    }

    fn signal(&self, ports: &[u16], signal: &str) -> Result<(), TestkitError> {
        for port in ports {
            let pid = self
                .nodes
                .iter()
                .find(|n| n.port == *port)
                .and_then(|n| n.child.as_ref())
                .map(Child::id)
                .ok_or_else(|| fail(format!("no live node of ours on port {port}")))?;
            let status = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status()
                .map_err(|e| fail(format!("kill {signal}: {e}")))?;
            if !status.success() {
                return Err(fail(format!("kill {signal} {pid}: {status}")));
            }
        }
        Ok(())
    }

    /// Kills (SIGKILL) the master that holds `key`, and waits until another node serves its
    /// slot as master and the cluster is `ok` again (at most 30 s). Returns the killed port
    /// and the new master's.
    pub fn kill_master_of(&mut self, key: &str) -> Result<(u16, u16), TestkitError> {
        let old = self
            .master_of(key)
            .ok_or_else(|| fail(format!("no master serves `{key}`")))?;
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.port == old && n.child.is_some())
            .ok_or_else(|| fail(format!("the master of `{key}` (port {old}) is not ours")))?;
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let new =
            crate::eventually_blocking(Duration::from_secs(30), Duration::from_millis(50), || {
                let new = self.master_of(key).filter(|p| *p != old)?;
                self.cli(new, &["cluster", "info"])
                    .is_some_and(|i| i.contains("cluster_state:ok"))
                    .then_some(new)
            });
        new.map(|new| (old, new)).ok_or_else(|| {
            fail(format!(
                "no replica took over `{key}` from port {old} within 30 s; the logs are under {}",
                self.dir.display()
            ))
        })
    }
}

/// The client port of a `CLUSTER NODES` line (`ip:port@bus`).
fn port_of(fields: &[String]) -> Option<u16> {
    fields
        .get(1)?
        .split('@')
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
