//! Leases on a running node are held by the I/O-free cores' [`LeaseKeeper`]
//! (`shardik_core::lease`): sharding's shard and coordinator leases (carried out by
//! `sharding/leases.rs`) and the split-brain resolver's lease-majority lease (carried out by
//! [`crate::sbr_lease`]). What stays here is what both executors share: the name a node holds
//! its leases under, and the store calls themselves (`LeaseCalls`), each bounded by
//! `lease-operation-timeout`, counted in the same metrics and worded alike when it fails, so
//! that a lease behaves the same whichever core holds it. What each executor logs, and what
//! it does with an answer, stays with it.
//!
//! [`LeaseKeeper`]: shardik_core::lease::LeaseKeeper

use std::time::Duration;

use shardik_core::membership::UniqueAddress;
use shardik_persistence::{LeaseAcquired, Store, StoreError};

use crate::metrics::{LEASE_ACQUISITIONS_TOTAL, LEASE_RENEWAL_FAILURES_TOTAL};

/// The owner name of a node in the store's leases: its address and uid (`host:port#uid`), so
/// that a restarted node is a new owner and never mistakes its predecessor's tenure for its
/// own.
pub fn owner_for(node: &UniqueAddress) -> String {
    shardik_core::lease::owner_name(node)
}

/// The store calls on one lease as one owner, each given at most `limit`.
pub(crate) struct LeaseCalls<'a> {
    /// The store that keeps the lease.
    pub(crate) store: &'a dyn Store,
    /// The lease's name in the store.
    pub(crate) name: &'a str,
    /// This node's owner name ([`owner_for`]).
    pub(crate) owner: &'a str,
    /// The longest a call may take (`lease-operation-timeout`).
    pub(crate) limit: Duration,
}

/// Why a lease call has no answer from the store.
#[derive(Debug)]
pub(crate) enum CallFailure {
    /// The store answered with an error.
    Store(StoreError),
    /// The store did not answer within the limit (which this carries).
    Timeout(Duration),
}

impl CallFailure {
    /// The failure as the core is told it (`LeaseAnswer::Failed`): what was being done to
    /// which lease, then why, e.g. `acquiring cluster-shard-cart-3: the store did not answer
    /// within 5s`.
    pub(crate) fn describe(&self, doing: &str, lease: &str) -> String {
        match self {
            CallFailure::Store(e) => format!("{doing} {lease}: {e}"),
            CallFailure::Timeout(limit) => {
                format!("{doing} {lease}: the store did not answer within {limit:?}")
            }
        }
    }
}

impl LeaseCalls<'_> {
    /// Takes the lease for `ttl` (free, expired, or already this owner's). A grant is counted
    /// (`shardik_lease_acquisitions_total`).
    pub(crate) async fn acquire(&self, ttl: Duration) -> Result<LeaseAcquired, CallFailure> {
        let call = self.store.acquire_lease(self.name, self.owner, ttl);
        let acquired = self.bounded(call).await?;
        if let LeaseAcquired::Granted(_) = acquired {
            metrics::counter!(LEASE_ACQUISITIONS_TOTAL).increment(1);
        }
        Ok(acquired)
    }

    /// Extends the tenure `token` by `ttl`: `Ok(false)` when the store refuses (the lease is
    /// no longer this owner's). A call that fails or times out is counted
    /// (`shardik_lease_renewal_failures_total`); a refusal is not.
    pub(crate) async fn renew(&self, token: u64, ttl: Duration) -> Result<bool, CallFailure> {
        let call = self.store.renew_lease(self.name, self.owner, token, ttl);
        let renewed = self.bounded(call).await;
        if renewed.is_err() {
            metrics::counter!(LEASE_RENEWAL_FAILURES_TOTAL).increment(1);
        }
        renewed
    }

    /// Gives the tenure `token` up: `Ok(false)` when it was no longer held.
    pub(crate) async fn release(&self, token: u64) -> Result<bool, CallFailure> {
        let call = self.store.release_lease(self.name, self.owner, token);
        self.bounded(call).await
    }

    /// Awaits one store call for at most `limit`.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, CallFailure> {
        match tokio::time::timeout(self.limit, call).await {
            Ok(answer) => answer.map_err(CallFailure::Store),
            Err(_) => Err(CallFailure::Timeout(self.limit)),
        }
    }
}
