//! A kind task's leases (`cluster.sharding.use-lease`, `coordinator-singleton.use-lease`): the
//! core ([`shardik_core::sharding::LeaseKeeper`], inside the region and the kind node) decides
//! when to acquire, renew and release, and until when a lease counts; this module carries its
//! calls out on the kind's store, each bounded by `lease-operation-timeout` (through
//! [`LeaseCalls`], which the split-brain resolver's lease uses too), and feeds the answers back
//! to the task. It also names the leases, makes the fences the entities' writes carry, and
//! keeps the node's record of leases whose store is failing, for `/ready`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardik_core::lease::StoreLease;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{LeaseAnswer, LeaseCall, LeaseKey, LeaseRequest, ShardId};
use shardik_persistence::{Fence, LeaseAcquired, Store};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::messages::Control;
use crate::lease::{CallFailure, LeaseCalls};

/// Leases whose store is failing on this node, by lease name, with the last error: what
/// `/ready` reports. Entries go when the lease is acquired or renewed again, or no longer
/// wanted.
#[derive(Debug, Default)]
pub struct LeaseHealth {
    failing: Mutex<BTreeMap<String, String>>,
}

impl LeaseHealth {
    /// The failing leases, by name, with their last error.
    pub fn failing(&self) -> BTreeMap<String, String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.failing.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn failed(&self, lease: String, error: String) {
        self.lock().insert(lease, error);
    }

    pub(crate) fn recovered(&self, lease: &str) {
        self.lock().remove(lease);
    }
}

/// The leases of one kind on one node.
pub(crate) struct KindLeases {
    store: Arc<dyn Store>,
    cluster: Arc<str>,
    kind: Arc<str>,
    owner: Arc<str>,
    operation_timeout: Duration,
    ttl: Duration,
    health: Arc<LeaseHealth>,
    /// Releases under way. A node that stops waits for them ([`Self::releases_done`]): a
    /// release lost with the process leaves its lease held in the store until its time-to-live
    /// runs out, and the next holder (the next oldest node's coordinator, most of all) waits
    /// that long.
    releases: Vec<JoinHandle<()>>,
}

impl KindLeases {
    pub fn new(
        store: Arc<dyn Store>,
        cluster: &str,
        kind: &str,
        node: &UniqueAddress,
        operation_timeout: Duration,
        ttl: Duration,
        health: Arc<LeaseHealth>,
    ) -> Self {
        KindLeases {
            store,
            cluster: cluster.into(),
            kind: kind.into(),
            // Address and uid: a restarted node is a new owner, never mistaking its
            // predecessor's tenure for its own.
            owner: crate::lease::owner_for(node).into(),
            operation_timeout,
            ttl,
            health,
            releases: Vec::new(),
        }
    }

    /// The lease's name in the store: `{cluster}-shard-{kind}-{shard}` (the reference's
    /// `<system>-shard-<type>-<id>`) or `{cluster}-coordinator-{kind}`.
    pub fn name(&self, key: &LeaseKey) -> String {
        match key {
            LeaseKey::Shard(shard) => format!("{}-shard-{}-{shard}", self.cluster, self.kind),
            LeaseKey::Coordinator => format!("{}-coordinator-{}", self.cluster, self.kind),
        }
    }

    /// The fence the writes of `shard`'s entities carry while its lease is held with `token`.
    /// Its scope is the lease's name, so the store refuses writes of an older tenure once a
    /// newer one has written.
    pub fn fence(&self, shard: &ShardId, token: u64) -> Fence {
        Fence::new(self.name(&LeaseKey::Shard(shard.clone())), token)
    }

    pub fn health(&self) -> &LeaseHealth {
        &self.health
    }

    /// Waits until every release asked for so far has been answered by the store or given up
    /// (each is bounded by `lease-operation-timeout`).
    pub async fn releases_done(&mut self) {
        for release in self.releases.drain(..) {
            // A release that panicked lost nothing more than one that timed out.
            let _ = release.await;
        }
    }

    /// Reads the leases of `shards` in the background, each as the store sees it now by its
    /// own clock, and sends them back to the task through `back` (the whole read bounded by
    /// `lease-operation-timeout`; a failure or a timeout is sent back as an error).
    pub fn read(&self, id: u64, shards: Vec<ShardId>, back: mpsc::WeakSender<Control>) {
        let store = Arc::clone(&self.store);
        let names: Vec<String> = shards
            .iter()
            .map(|s| self.name(&LeaseKey::Shard(s.clone())))
            .collect();
        let limit = self.operation_timeout;
        crate::task::spawn(async move {
            let read = async {
                let mut rows = Vec::with_capacity(shards.len());
                for (shard, name) in shards.into_iter().zip(&names) {
                    let row = store
                        .read_lease(name)
                        .await
                        .map_err(|e| format!("reading {name}: {e}"))?;
                    rows.push((
                        shard,
                        row.map(|info| StoreLease {
                            owner: info.owner,
                            token: info.token,
                            time_left: info.time_left,
                        }),
                    ));
                }
                Ok(rows)
            };
            let answer = match tokio::time::timeout(limit, read).await {
                Ok(answer) => answer,
                Err(_) => Err(format!(
                    "reading {} shard leases: the store did not answer within {limit:?}",
                    names.len()
                )),
            };
            if let Some(back) = back.upgrade() {
                let _ = back.send(Control::LeasesRead { id, answer }).await;
            }
        });
    }

    /// Carries `request` out in the background and sends the answer (for acquisitions and
    /// renewals) back to the task through `back`; a release is kept for
    /// [`Self::releases_done`].
    pub fn call(&mut self, request: LeaseRequest<LeaseKey>, back: mpsc::WeakSender<Control>) {
        let is_release = matches!(request.call, LeaseCall::Release { .. });
        let store = Arc::clone(&self.store);
        let name = self.name(&request.key);
        let owner = Arc::clone(&self.owner);
        let limit = self.operation_timeout;
        let ttl = self.ttl;
        let task = crate::task::spawn(async move {
            let LeaseRequest { key, id, call } = request;
            let calls = LeaseCalls {
                store: &*store,
                name: &name,
                owner: &owner,
                limit,
            };
            let answer = match call {
                LeaseCall::Acquire => match calls.acquire(ttl).await {
                    Ok(LeaseAcquired::Granted(grant)) => {
                        LeaseAnswer::Granted { token: grant.token }
                    }
                    Ok(LeaseAcquired::HeldByOther { owner, time_left }) => {
                        tracing::debug!(lease = %name, holder = %owner, ?time_left, "lease held by another node");
                        LeaseAnswer::HeldByOther
                    }
                    Err(failure) => LeaseAnswer::Failed(failure.describe("acquiring", &name)),
                },
                LeaseCall::Renew { token } => match calls.renew(token, ttl).await {
                    Ok(true) => LeaseAnswer::Renewed,
                    Ok(false) => LeaseAnswer::Refused,
                    Err(failure) => LeaseAnswer::Failed(failure.describe("renewing", &name)),
                },
                LeaseCall::Release { token } => {
                    match calls.release(token).await {
                        Ok(_) => tracing::debug!(lease = %name, token, "lease released"),
                        // Not fatal: the lease expires in the store after its time-to-live.
                        Err(CallFailure::Store(e)) => {
                            tracing::warn!(lease = %name, error = %e, "lease not released; it expires on its own")
                        }
                        Err(CallFailure::Timeout(_)) => {
                            tracing::warn!(lease = %name, "lease release not answered in time; it expires on its own")
                        }
                    }
                    return;
                }
            };
            if let Some(back) = back.upgrade() {
                // The task may be gone (its node stopped): then nobody waits for the answer.
                let _ = back.send(Control::LeaseAnswered { key, id, answer }).await;
            }
        });
        if is_release {
            self.releases.retain(|r| !r.is_finished());
            self.releases.push(task);
        }
    }
}
