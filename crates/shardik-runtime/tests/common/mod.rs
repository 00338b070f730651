//! Helpers the runtime's in-process cluster tests share.

#![allow(dead_code)] // each test binary uses its own subset

pub mod fake_node;
pub mod gated_store;
pub mod pki;

use std::time::Duration;

use shardik_core::membership::MembershipConfig;

/// Generous bound for anything that should happen on a loaded 2-core machine.
pub const BOUND: Duration = Duration::from_secs(20);

/// The process's Prometheus recorder (installed once, shared by the tests of one binary).
pub fn metrics() -> shardik_runtime::metrics::MetricsHandle {
    shardik_runtime::metrics::Metrics::install().expect("the Prometheus recorder")
}

/// The value of counter `name` with labels `labels` (as rendered, e.g. `reason="x"`), 0 if
/// absent.
pub fn counter(handle: &shardik_runtime::metrics::MetricsHandle, name: &str, labels: &str) -> f64 {
    let prefix = format!("{name}{{{labels}}} ");
    handle
        .render()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&prefix)
                .map(|v| v.trim().parse().unwrap_or(0.0))
        })
        .unwrap_or(0.0)
}

/// Polls `cond` until it holds or [`BOUND`] passes.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + BOUND;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    shardik_runtime::testkit::free_port().expect("a free loopback port")
}

/// Membership settings with timers short enough for a test: a lone seed forms its cluster
/// after 0.5 s and gossip runs every 200 ms.
pub fn fast_membership(cluster_name: &str, roles: &[&str]) -> MembershipConfig {
    MembershipConfig {
        cluster_name: cluster_name.into(),
        seed_node_timeout: Duration::from_millis(500),
        periodic_tasks_initial_delay: Duration::from_millis(100),
        gossip_interval: Duration::from_millis(200),
        leader_actions_interval: Duration::from_millis(200),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        ..MembershipConfig::default()
    }
}

/// The built-in settings (environment ignored) with membership timers short enough for a
/// test, for nodes started from `Node::builder`: a lone seed forms its cluster after 0.3 s and
/// gossip runs every 100 ms.
pub fn fast_settings() -> shardik_runtime::config::Settings {
    let mut settings = shardik_runtime::config::Settings::load_with_env(None, &[]).unwrap();
    settings.cluster.seed_node_timeout = Duration::from_millis(300);
    settings.cluster.periodic_tasks_initial_delay = Duration::from_millis(50);
    settings.cluster.gossip_interval = Duration::from_millis(100);
    settings.cluster.leader_actions_interval = Duration::from_millis(100);
    settings
}

/// Starts a node on loopback `port` that joins through `seed` (itself for the first), with
/// sharding attached: 10 shards, region retries every 200 ms.
pub async fn start_sharding_node(
    cluster_name: &str,
    port: u16,
    seed: u16,
    roles: &[&str],
) -> (
    shardik_runtime::node::RunningNode,
    shardik_runtime::sharding::Sharding,
) {
    start_sharding_node_with(cluster_name, port, seed, roles, |_| {}).await
}

/// [`start_sharding_node`], with the sharding settings changed by `tweak` before sharding
/// starts.
pub async fn start_sharding_node_with(
    cluster_name: &str,
    port: u16,
    seed: u16,
    roles: &[&str],
    tweak: impl FnOnce(&mut shardik_runtime::sharding::ShardingConfig),
) -> (
    shardik_runtime::node::RunningNode,
    shardik_runtime::sharding::Sharding,
) {
    use shardik_core::membership::Address;
    use shardik_runtime::node::{self, NodeOptions};
    use shardik_runtime::sharding::{Sharding, ShardingConfig};
    let membership = fast_membership(cluster_name, roles);
    let running = node::start(NodeOptions {
        bind: Address::new("127.0.0.1", port),
        advertise: None,
        seeds: vec![Address::new("127.0.0.1", seed)],
        membership: membership.clone(),
        transport: shardik_runtime::transport::TransportConfig::default(),
        leave_timeout: Duration::from_secs(10),
    })
    .await
    .expect("node starts");
    let mut config = ShardingConfig {
        number_of_shards: 10,
        self_roles: membership.roles.clone(),
        ..ShardingConfig::default()
    };
    config.region.retry_interval = Duration::from_millis(200);
    tweak(&mut config);
    let sharding = Sharding::start(&running, config).expect("sharding starts");
    (running, sharding)
}

/// Waits (at most 20 s) until every node of `nodes` sees `n` members Up.
pub async fn wait_up(nodes: &[&shardik_runtime::node::RunningNode], n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !nodes.iter().all(|r| {
        r.handle
            .snapshot()
            .members
            .iter()
            .filter(|m| m.status == shardik_core::membership::MemberStatus::Up)
            .count()
            == n
    }) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "cluster did not form"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The entity ids the region of `kind` runs on this node, sorted (asked of the region, not of
/// the entities).
pub async fn running_entities(
    sharding: &shardik_runtime::sharding::Sharding,
    kind: &str,
) -> Vec<String> {
    let state = sharding
        .region_state(kind, Duration::from_secs(10))
        .await
        .expect("the region answers");
    let mut ids: Vec<String> = state
        .shards
        .into_iter()
        .flat_map(|(_, ids)| ids.into_iter().map(|id| id.to_string()))
        .collect();
    ids.sort();
    ids
}

/// An entity with no store and no behaviour: it answers each value with the value.
pub struct Echo;

/// A value for [`Echo`], and where it goes back.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Echoed(pub u8, pub shardik_runtime::sharding::ReplyTo<u8>);

impl shardik_runtime::sharding::Entity for Echo {
    type Command = Echoed;

    async fn handle(
        &mut self,
        Echoed(value, reply_to): Echoed,
        _ctx: &mut shardik_runtime::sharding::EntityContext<Self>,
    ) {
        reply_to.send(value);
    }
}

/// A log destination that keeps what a `tracing_subscriber::fmt` writer gives it, for tests
/// that assert on log lines: `.with_writer(move || sink.clone())`.
#[derive(Clone, Default)]
pub struct LogSink(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogSink {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
