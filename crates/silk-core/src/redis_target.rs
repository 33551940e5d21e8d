//! Where Silk's Redis parts connect (the Redis frontier, the router's Redis classes): one
//! server, or a Redis Cluster.
//!
//! - `redis://[user:password@]host:port[/db]` (and `rediss://`, `unix://`): one server, as
//!   the `redis` crate reads it.
//! - `redis+cluster://[user:password@]host:port[,host:port…]`: a Redis Cluster, reached
//!   through any of the listed nodes (the client learns the others from them and follows
//!   the cluster's slot moves and failovers by itself). A cluster has no database number;
//!   `rediss+cluster://` is TLS.
//!
//! [`RedisTarget`] makes connections to either; a [`RedisConnection`] is one of them, and
//! every command, pipeline and script of the `redis` crate runs on it (it implements
//! [`ConnectionLike`]). In a cluster a command goes to the master of its first key's slot;
//! callers keep every key one call touches in one slot (a hash tag), as Lua scripts and
//! `MULTI` need. [`RedisConnection::query_at`] sends a command without keys (`WAIT`,
//! `ROLE`) to the node that holds a given key.

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::time::Duration;

/// The URL schemes of a Redis Cluster (plain and TLS).
const CLUSTER_SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis://"),
    ("rediss+cluster://", "rediss://"),
];

/// How long connecting and answering may take.
#[derive(Debug, Clone, Copy)]
pub struct RedisTimeouts {
    /// Longest wait for a TCP connection (and its handshake).
    pub connect: Duration,
    /// Longest wait for a reply.
    pub response: Duration,
}

/// A Redis server or cluster to connect to (see the module doc for the URLs).
#[derive(Clone)]
pub enum RedisTarget {
    /// One server.
    Server(redis::Client),
    /// A Redis Cluster, by its seed nodes (`redis://…` each).
    Cluster {
        /// The seed nodes, with the URL's credentials each.
        nodes: Vec<String>,
    },
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password: the kind and the number of nodes only.
        match self {
            RedisTarget::Server(_) => f.write_str("RedisTarget::Server"),
            RedisTarget::Cluster { nodes } => {
                write!(f, "RedisTarget::Cluster({} nodes)", nodes.len())
            }
        }
    }
}

fn invalid(message: &'static str, detail: String) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, message, detail))
}

/// The seed node URLs of a `redis+cluster://` URL (each `redis://userinfo@host:port`), or
/// `None` when `url` is not a cluster URL.
fn cluster_nodes(url: &str) -> Option<RedisResult<Vec<String>>> {
    let (rest, scheme) = CLUSTER_SCHEMES
        .iter()
        .find_map(|(cluster, node)| url.strip_prefix(cluster).map(|rest| (rest, *node)))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let tail = tail.trim_start_matches('/');
    if !tail.is_empty() && tail != "0" {
        return Some(Err(invalid(
            "a Redis Cluster URL takes no database or options",
            format!("`{tail}` after the nodes (a cluster has database 0 only)"),
        )));
    }
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let mut nodes = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Some(Err(invalid(
                "a Redis Cluster URL lists its nodes as host:port,host:port",
                "an empty node".into(),
            )));
        }
        nodes.push(format!("{scheme}{userinfo}{host}"));
    }
    Some(Ok(nodes))
}

impl RedisTarget {
    /// The target of `url`: a cluster for `redis+cluster://`, one server otherwise. Checks the
    /// URL only; nothing connects.
    pub fn open(url: &str) -> RedisResult<RedisTarget> {
        match cluster_nodes(url) {
            Some(nodes) => {
                let nodes = nodes?;
                // Parse them now, so that a bad node is an error here, not at connect.
                ClusterClientBuilder::new(nodes.iter().map(String::as_str)).build()?;
                Ok(RedisTarget::Cluster { nodes })
            }
            None => Ok(RedisTarget::Server(redis::Client::open(url)?)),
        }
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisTarget::Cluster { .. })
    }

    fn cluster_client(
        nodes: &[String],
        t: RedisTimeouts,
        retries: u32,
    ) -> RedisResult<ClusterClient> {
        ClusterClientBuilder::new(nodes.iter().map(String::as_str))
            .connection_timeout(t.connect)
            .response_timeout(t.response)
            .retries(retries)
            .build()
    }

    /// A connection shared by many callers that reconnects by itself: a
    /// [`ConnectionManager`] (at most `retries` reconnection attempts per call, at most 1 s
    /// apart) or a cluster connection (which follows slot moves and failovers, `retries`
    /// times per command).
    pub async fn shared(&self, t: RedisTimeouts, retries: usize) -> RedisResult<RedisConnection> {
        match self {
            RedisTarget::Server(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_number_of_retries(retries)
                    .set_max_delay(Duration::from_secs(1))
                    .set_connection_timeout(Some(t.connect))
                    .set_response_timeout(Some(t.response));
                let manager = client.get_connection_manager_with_config(config).await?;
                Ok(RedisConnection::Managed(manager))
            }
            RedisTarget::Cluster { nodes } => {
                let retries = u32::try_from(retries).unwrap_or(u32::MAX);
                let client = Self::cluster_client(nodes, t, retries)?;
                Ok(RedisConnection::Cluster(
                    client.get_async_connection().await?,
                ))
            }
        }
    }

    /// A connection of its own, for commands that hold it (a blocking pop). It does not
    /// reconnect (a cluster connection does, to the nodes it knows): the caller makes a new
    /// one after an error.
    pub async fn dedicated(&self, t: RedisTimeouts) -> RedisResult<RedisConnection> {
        match self {
            RedisTarget::Server(client) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(t.connect))
                    .set_response_timeout(Some(t.response));
                Ok(RedisConnection::Multiplexed(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            RedisTarget::Cluster { nodes } => {
                let client = Self::cluster_client(nodes, t, 2)?;
                Ok(RedisConnection::Cluster(
                    client.get_async_connection().await?,
                ))
            }
        }
    }
}

/// A connection to a server or a cluster (see [`RedisTarget`]); cheap to clone (clones share
/// the connection).
#[derive(Clone)]
pub enum RedisConnection {
    /// One server, reconnecting.
    Managed(ConnectionManager),
    /// One server, one connection.
    Multiplexed(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl RedisConnection {
    /// Runs `cmd` on the master that holds `key`'s slot in a cluster (for a command with no
    /// key that must reach that node: `WAIT` after a write there, `ROLE`); on the server
    /// otherwise.
    pub async fn query_at(&mut self, cmd: &Cmd, key: &str) -> RedisResult<Value> {
        match self {
            RedisConnection::Cluster(c) => {
                let route = Route::with_key(key.as_bytes(), SlotAddr::Master);
                c.route_command(
                    cmd.clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
            }
            other => other.req_packed_command(cmd).await,
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConnection::Managed(c) => c.req_packed_command(cmd),
            RedisConnection::Multiplexed(c) => c.req_packed_command(cmd),
            RedisConnection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConnection::Managed(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConnection::Multiplexed(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConnection::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConnection::Managed(c) => c.get_db(),
            RedisConnection::Multiplexed(c) => c.get_db(),
            RedisConnection::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_list_their_nodes_with_the_credentials() {
        let nodes = |url: &str| cluster_nodes(url).map(|r| r.map_err(|e| e.to_string()));
        assert_eq!(
            nodes("redis+cluster://127.0.0.1:7000,127.0.0.1:7001"),
            Some(Ok(vec![
                "redis://127.0.0.1:7000".to_owned(),
                "redis://127.0.0.1:7001".to_owned()
            ]))
        );
        assert_eq!(
            nodes("rediss+cluster://u:p@a:1/"),
            Some(Ok(vec!["rediss://u:p@a:1".to_owned()]))
        );
        assert_eq!(nodes("redis://127.0.0.1:6379/2"), None);
        let db = nodes("redis+cluster://a:1/3").and_then(Result::err);
        assert!(db.is_some_and(|e| e.contains("database 0 only")));
        let empty = nodes("redis+cluster://a:1,,b:2").and_then(Result::err);
        assert!(empty.is_some_and(|e| e.contains("empty node")));
    }

    #[test]
    fn targets_are_a_server_or_a_cluster() {
        let server = RedisTarget::open("redis://127.0.0.1:6379").expect("server");
        assert!(!server.is_cluster());
        let cluster = RedisTarget::open("redis+cluster://u:secret@127.0.0.1:7000,127.0.0.1:7001")
            .expect("cluster");
        assert!(cluster.is_cluster());
        assert!(!format!("{cluster:?}").contains("secret"));
        assert!(RedisTarget::open("redis+cluster://").is_err());
        assert!(RedisTarget::open("http://x").is_err());
    }
}
