//! The benchmark's nodes: a node with sharding attached, configured as `shardik node` is, and a
//! proxy node joined to a peer process that hosts the entities.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use shardik_core::membership::{Address, MemberStatus};
use shardik_runtime::config::Settings;
use shardik_runtime::metrics::Metrics;
use shardik_runtime::node::{self, NodeOptions, RunningNode};
use shardik_runtime::sharding::{EntityKind, EntityRef, EntityRegion, Sharding, ShardingConfig};
use shardik_runtime::tls::TlsContext;
use shardik_runtime::transport::TransportConfig;

use super::common::{CLUSTER, HOST_ROLE, REMOTE_SYNC_KIND};
use super::tally::{Probe, SyncTally, Tally, sync_tally_kind, tally_kind};
use crate::bench_support::{Peer, free_port};
use crate::bench_tls::BenchCerts;

/// A node with sharding attached, configured as `shardik node` is by default (also the node
/// of `bench persistence`).
pub(crate) struct BenchNode {
    running: RunningNode,
    pub(crate) sharding: Sharding,
    pub(super) config: ShardingConfig,
    /// The node's TLS configuration, when `transport.tls` is on.
    pub(super) tls: Option<TlsContext>,
}

impl BenchNode {
    /// Starts a node on a free loopback port that joins `seeds` (none: it forms a cluster of
    /// its own), with `roles`.
    pub(crate) async fn start(seeds: Vec<Address>, roles: &[&str]) -> anyhow::Result<BenchNode> {
        let bind = Address::new("127.0.0.1", free_port()?);
        BenchNode::start_with(bind, seeds, roles, |_| {}).await
    }

    /// Starts a node on `bind` over mutual TLS with `certs`, or over plain TCP without
    /// (whatever `transport.tls` says otherwise).
    pub(super) async fn start_at(
        bind: Address,
        seeds: Vec<Address>,
        roles: &[&str],
        certs: Option<&BenchCerts>,
    ) -> anyhow::Result<BenchNode> {
        BenchNode::start_with(bind, seeds, roles, |s| match certs {
            Some(certs) => certs.apply(s),
            None => s.transport.tls.enabled = false,
        })
        .await
    }

    /// Starts a node on `bind` as [`start`](Self::start) does, with its settings changed by
    /// `tweak` after they are loaded (a benchmark that needs, say, a minimum number of
    /// members).
    pub(crate) async fn start_with(
        bind: Address,
        seeds: Vec<Address>,
        roles: &[&str],
        tweak: impl FnOnce(&mut Settings),
    ) -> anyhow::Result<BenchNode> {
        // As `shardik node` does; the recorder is process-wide, so a second call is a no-op.
        let _ = Metrics::install();
        let mut settings = Settings::load(None).context("invalid configuration")?;
        settings.cluster.name = CLUSTER.to_string();
        settings.cluster.roles = roles.iter().map(|r| r.to_string()).collect();
        tweak(&mut settings);
        let seeds = if seeds.is_empty() {
            vec![bind.clone()]
        } else {
            seeds
        };
        settings.cluster.seed_nodes = seeds.clone();
        // As `shardik node` does: bad TLS files stop the node here, naming the file.
        let tls = TlsContext::from_settings(&settings)?;
        let running = node::start(NodeOptions {
            bind: bind.clone(),
            advertise: None,
            seeds,
            membership: settings.membership_config(),
            transport: TransportConfig {
                tls: tls.clone(),
                ..node::transport_config(&settings.transport)
            },
            leave_timeout: Duration::from_secs(10),
        })
        .await
        .with_context(|| format!("cannot start a node on {bind}"))?;
        let config = settings.node_settings().sharding;
        let sharding = Sharding::start(&running, config.clone())?;
        Ok(BenchNode {
            running,
            sharding,
            config,
            tls,
        })
    }

    /// Waits until this node is Up and sees `members` members Up.
    pub(crate) async fn wait_up(&self, members: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.running.handle.snapshot();
            let up = s
                .members
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count();
            if s.self_status == Some(MemberStatus::Up) && up >= members {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the cluster did not reach {members} members Up within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many members this node sees Up, or `None` while it is not Up itself.
    pub(crate) fn members_up(&self) -> Option<usize> {
        let s = self.running.handle.snapshot();
        (s.self_status == Some(MemberStatus::Up)).then(|| {
            s.members
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count()
        })
    }

    /// This node's address.
    pub(crate) fn address(&self) -> &Address {
        &self.running.self_node.address
    }

    /// Asks the node to stop at once, without leaving (a crash, as the others see it).
    pub(crate) async fn crash(&self) {
        // A closed channel means the node has stopped already.
        let _ = self.running.stop.send(node::StopRequest::Now).await;
    }

    /// Waits (at most `limit`) until the node's task has ended, after [`crash`](Self::crash).
    pub(crate) async fn stopped(self, limit: Duration) -> anyhow::Result<()> {
        let addr = self.address().clone();
        tokio::time::timeout(limit, self.running.finished)
            .await
            .with_context(|| format!("the node on {addr} did not stop within {limit:?}"))?
            .with_context(|| format!("the task of the node on {addr} failed"))?;
        Ok(())
    }

    /// Registers `kind`.
    pub(super) fn init<P: Probe>(&self, kind: EntityKind<Tally<P>>) -> anyhow::Result<Region<P>> {
        Ok(self.sharding.init(kind)?)
    }
}

pub(super) type Region<P> = EntityRegion<Tally<P>>;

pub(super) type Ref<P> = EntityRef<Tally<P>>;

/// A proxy node joined to a peer process that hosts the entities.
pub(super) struct RemoteSetup {
    pub(super) peer: Peer,
    pub(super) node: BenchNode,
}

impl RemoteSetup {
    /// Starts the peer (which counts `expect` tells, then turns of `turn_tells` of the turn
    /// kind) and a node without the host role that joins it, both over mutual TLS with
    /// `certs`, or plain TCP without.
    pub(super) async fn start(
        expect: u64,
        certs: Option<&BenchCerts>,
        turn_tells: u64,
    ) -> anyhow::Result<RemoteSetup> {
        let expect = expect.to_string();
        let mut args = vec!["--expect".to_string(), expect];
        if turn_tells > 0 {
            args.push("--turn-tells".to_string());
            args.push(turn_tells.to_string());
        }
        if let Some(certs) = certs {
            args.push("--tls-dir".to_string());
            args.push(certs.dir().display().to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let peer = Peer::start("bench-sharding-peer", &args).await?;
        let bind = Address::new("127.0.0.1", free_port()?);
        let node = BenchNode::start_at(bind, vec![peer.addr.clone()], &[], certs).await?;
        node.wait_up(2).await?;
        Ok(RemoteSetup { peer, node })
    }

    /// The proxy of a kind that runs on the peer only.
    pub(super) fn proxy(&self, name: &str) -> anyhow::Result<Region<()>> {
        self.node.init(tally_kind(name, ()).with_role(HOST_ROLE))
    }

    /// The proxy of the [`SyncTally`] kind that runs on the peer only.
    pub(super) fn sync_proxy(&self) -> anyhow::Result<EntityRegion<SyncTally<()>>> {
        Ok(self
            .node
            .sharding
            .init(sync_tally_kind(REMOTE_SYNC_KIND, ()).with_role(HOST_ROLE))?)
    }
}
