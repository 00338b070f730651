//! Entities per shard per region over the whole cluster, for one kind
//! ([`Sharding::cluster_stats`]): every member that may host the kind is asked, and those
//! that do not answer in time are listed.

use std::time::Duration;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::ShardId;
use shardik_wire::ShardingBody;
use tokio::sync::mpsc;

use super::handle::Sharding;
use super::messages::Control;

/// Entities per shard per region over the cluster, for one entity kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterShardingStats {
    /// Each region that answered (by node `host:port`) with its shards and entity counts.
    pub regions: std::collections::BTreeMap<String, Vec<(ShardId, u32)>>,
    /// Nodes expected to host the kind that did not answer in time.
    pub failed: Vec<String>,
    /// Nodes that answered but cannot be given shards of the kind yet: they do not run it
    /// (`sharding().init` was not called there), or their region has not registered with the
    /// coordinator. Also listed in `regions`, with the shards they have.
    pub unregistered: Vec<String>,
}

impl Sharding {
    /// Entities per shard per region of `kind` over the whole cluster: every member that may
    /// host the kind (Up, WeaklyUp or Leaving, with the kind's role) is asked; those that do
    /// not answer within `timeout` are listed in `failed`, never silently left out.
    pub async fn cluster_stats(
        &self,
        kind: &str,
        timeout: Duration,
    ) -> Option<ClusterShardingStats> {
        let role = self
            .inner
            .kinds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)?
            .role
            .clone();
        // Which members hold the kind's shards is the sharding view's decision (with the
        // kind's own role), not this function's.
        let snapshot = self.inner.node.snapshot();
        let mut view = shardik_core::sharding::ShardingView::new(
            self.inner.self_node.clone(),
            role,
            Duration::ZERO,
        );
        view.update(
            shardik_core::Instant::ZERO,
            snapshot.members.iter().cloned(),
            snapshot
                .unreachable
                .iter()
                .map(|u| u.node.clone())
                .collect(),
        );
        let targets: Vec<UniqueAddress> = view.members_holding_shards().cloned().collect();
        let id = self
            .inner
            .next_stats_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request_id = std::num::NonZeroU64::new(id).unwrap_or(std::num::NonZeroU64::MIN);
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.inner
            .stats_waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        let mut out = ClusterShardingStats::default();
        let mut waiting: std::collections::BTreeSet<UniqueAddress> =
            std::collections::BTreeSet::new();
        for t in &targets {
            if *t == self.inner.self_node {
                continue;
            }
            let frame = shardik_wire::ShardingFrame {
                kind: kind.into(),
                body: ShardingBody::StatsRequest { request_id },
            };
            if self
                .inner
                .sender
                .send(&t.address, shardik_wire::encode_sharding(&frame))
                .await
            {
                waiting.insert(t.clone());
            } else {
                out.failed.push(t.address.to_string());
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        if targets.contains(&self.inner.self_node) {
            let me = self.inner.self_node.address.to_string();
            match self.inner.query(kind, Control::Stats, timeout).await {
                Some(counts) => {
                    if !counts.registered {
                        out.unregistered.push(me.clone());
                    }
                    out.regions.insert(
                        me,
                        counts
                            .shards
                            .into_iter()
                            .map(|(s, n)| (s, u32::try_from(n).unwrap_or(u32::MAX)))
                            .collect(),
                    );
                }
                None => out.failed.push(me),
            }
        }
        while !waiting.is_empty() {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((from, shards, registered))) => {
                    if waiting.remove(&from) {
                        if !registered {
                            out.unregistered.push(from.address.to_string());
                        }
                        out.regions.insert(from.address.to_string(), shards);
                    }
                }
                _ => break,
            }
        }
        self.inner
            .stats_waiters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        out.failed
            .extend(waiting.into_iter().map(|n| n.address.to_string()));
        out.failed.sort();
        out.unregistered.sort();
        Some(out)
    }

    /// Waits until every member that may host `kind` (Up, WeaklyUp or Leaving, with the
    /// kind's role) runs it with a region registered at the coordinator, so that the shards
    /// allocated from then on can go to any of them: right after `init` on every node, the first
    /// messages would otherwise place their shards on whichever regions registered first.
    /// Members that join later are not waited for. Fails with [`NotHosted`], naming the
    /// members still missing, when that is not so within `timeout`, or at once when `kind`
    /// is not initialized on this node.
    pub async fn wait_until_hosted(&self, kind: &str, timeout: Duration) -> Result<(), NotHosted> {
        /// How long to wait between two rounds of questions.
        const PAUSE: Duration = Duration::from_millis(50);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let ask_for = left.min(self.inner.config.query_timeout);
            let Some(stats) = self.cluster_stats(kind, ask_for).await else {
                return Err(NotHosted {
                    kind: kind.to_owned(),
                    missing: vec![self.inner.self_node.address.to_string()],
                });
            };
            if stats.failed.is_empty() && stats.unregistered.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() + PAUSE >= deadline {
                let mut missing = stats.failed;
                missing.extend(stats.unregistered);
                missing.sort();
                return Err(NotHosted {
                    kind: kind.to_owned(),
                    missing,
                });
            }
            tokio::time::sleep(PAUSE).await;
        }
    }
}

/// Not every member that may host an entity kind could be given its shards in time
/// ([`Sharding::wait_until_hosted`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "entity kind {kind} is not hosted on every member yet: {} (each must call \
     sharding().init for it, and its region register with the coordinator)",
    missing.join(", ")
)]
#[non_exhaustive]
pub struct NotHosted {
    /// The entity kind.
    pub kind: String,
    /// The members (`host:port`) that did not answer, do not run the kind, or whose region is
    /// not registered yet; this node itself when the kind is not initialized here.
    pub missing: Vec<String>,
}
