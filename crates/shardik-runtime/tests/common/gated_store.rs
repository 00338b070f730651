//! A store that wraps another and holds some of its calls at gates, for tests that need a
//! write, a lease renewal or a load of remembered entities to wait (a slow disk, a stalled
//! holder, a load racing a passivation). Every other call goes straight through.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use shardik_persistence::{
    AtomicWrite, Fence, LeaseAcquired, LeaseInfo, Snapshot, Store, StoreError, StoreFuture,
    StoredEvent, StoredState, TaggedEvent, WriteResult,
};
use tokio::sync::watch;

/// Open or closed; a call that meets a closed gate waits until it opens.
pub struct Gate(watch::Sender<bool>);

impl Gate {
    /// A gate that lets calls through.
    pub fn open() -> Self {
        Gate(watch::Sender::new(true))
    }

    /// A gate that holds calls until [`set_open`](Self::set_open).
    pub fn closed() -> Self {
        Gate(watch::Sender::new(false))
    }

    /// Opens or closes the gate.
    pub fn set_open(&self, open: bool) {
        self.0.send_replace(open);
    }

    async fn pass(&self) {
        let mut open = self.0.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }
}

/// `inner` behind gates on journal appends, lease acquisitions and renewals, and loads of
/// remembered entities.
/// A load answers as of an earlier moment when `stale_remembered` is set: what the store has
/// plus those ids (as a load that read the set before a passivation was recorded would);
/// `loads_answered` counts the loads answered.
pub struct GatedStore {
    pub inner: Arc<dyn Store>,
    pub appends: Gate,
    pub acquires: Gate,
    pub renewals: Gate,
    pub loads: Gate,
    pub stale_remembered: Vec<String>,
    pub loads_answered: AtomicUsize,
    /// While set, acquiring and renewing leases fail as with a store that cannot be reached.
    pub leases_down: AtomicBool,
}

impl GatedStore {
    /// `inner` with every gate open and nothing stale.
    pub fn over(inner: Arc<dyn Store>) -> Self {
        GatedStore {
            inner,
            appends: Gate::open(),
            acquires: Gate::open(),
            renewals: Gate::open(),
            loads: Gate::open(),
            stale_remembered: Vec::new(),
            loads_answered: AtomicUsize::new(0),
            leases_down: AtomicBool::new(false),
        }
    }
}

impl GatedStore {
    fn lease_store_up(&self) -> Result<(), StoreError> {
        if self.leases_down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(
                "connection refused (the test took the lease store down)".into(),
            ));
        }
        Ok(())
    }
}

impl Store for GatedStore {
    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    fn identity(&self) -> &str {
        self.inner.identity()
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn renew_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            self.renewals.pass().await;
            self.lease_store_up()?;
            self.inner.renew_lease(name, owner, token, ttl).await
        })
    }
    fn acquire_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, LeaseAcquired> {
        Box::pin(async move {
            self.acquires.pass().await;
            self.lease_store_up()?;
            self.inner.acquire_lease(name, owner, ttl).await
        })
    }
    fn release_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
    ) -> StoreFuture<'a, bool> {
        self.inner.release_lease(name, owner, token)
    }
    fn read_lease<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<LeaseInfo>> {
        self.inner.read_lease(name)
    }
    fn append(&self, writes: Vec<AtomicWrite>) -> StoreFuture<'_, Vec<WriteResult>> {
        Box::pin(async move {
            self.appends.pass().await;
            self.inner.append(writes).await
        })
    }
    fn read_events<'a>(
        &'a self,
        pid: &'a str,
        from: u64,
        to: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        self.inner.read_events(pid, from, to, max)
    }
    fn highest_seq<'a>(&'a self, pid: &'a str) -> StoreFuture<'a, u64> {
        self.inner.highest_seq(pid)
    }
    fn delete_events_to<'a>(&'a self, pid: &'a str, to: u64) -> StoreFuture<'a, ()> {
        self.inner.delete_events_to(pid, to)
    }
    fn events_by_tag<'a>(
        &'a self,
        tag: &'a str,
        offset: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<TaggedEvent>> {
        self.inner.events_by_tag(tag, offset, max)
    }
    fn save_snapshot<'a>(&'a self, pid: &'a str, s: Snapshot) -> StoreFuture<'a, ()> {
        self.inner.save_snapshot(pid, s)
    }
    fn latest_snapshot<'a>(&'a self, pid: &'a str) -> StoreFuture<'a, Option<Snapshot>> {
        self.inner.latest_snapshot(pid)
    }
    fn delete_snapshots_below<'a>(&'a self, pid: &'a str, below: u64) -> StoreFuture<'a, ()> {
        self.inner.delete_snapshots_below(pid, below)
    }
    fn load_state<'a>(&'a self, pid: &'a str) -> StoreFuture<'a, Option<StoredState>> {
        self.inner.load_state(pid)
    }
    fn write_state<'a>(
        &'a self,
        pid: &'a str,
        s: StoredState,
        fence: Option<Fence>,
        marks: Vec<shardik_persistence::MarkChange>,
    ) -> StoreFuture<'a, WriteResult> {
        self.inner.write_state(pid, s, fence, marks)
    }
    fn update_remembered<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
        started: &'a [String],
        stopped: &'a [String],
    ) -> StoreFuture<'a, ()> {
        self.inner.update_remembered(kind, shard, started, stopped)
    }
    fn remembered_shards<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>> {
        self.inner.remembered_shards(kind)
    }
    fn remembered_entities<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
    ) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            self.loads.pass().await;
            let mut ids = self.inner.remembered_entities(kind, shard).await?;
            ids.extend(self.stale_remembered.iter().cloned());
            self.loads_answered.fetch_add(1, Ordering::SeqCst);
            Ok(ids)
        })
    }
}
