//! A sharded daemon process: `n` named workers kept running somewhere in the cluster, spread
//! over the nodes, each re-created on another node when its node leaves or fails.
//!
//! # How it maps to Akka
//!
//! Akka's `ShardedDaemonProcess` is an entity kind (`sharded-daemon-process-{name}`) whose
//! entity ids are the worker indexes `0..n`, with a message extractor that makes each id its
//! own shard, and a keep-alive pinger that sends every worker a ping every
//! `keep-alive-interval` (10 s) so that a worker whose node went away is started again without
//! waiting for a message. This is the same, built on our sharding: shard id = entity id = the
//! decimal index, the default allocation strategy spreads the `n` shards over the nodes with
//! the role, and every node runs a keep-alive task (at once, then every interval) that pings
//! all `n` workers. Workers are never passivated.
//!
//! # What differs
//!
//! * A worker is an [`Entity`] created from its index; it may also be sent commands through
//!   [`ShardedDaemonProcess::worker`] (Akka's workers are behaviours reached only by the
//!   pinger). Work of its own runs in a task the worker starts when it is created and stops
//!   when it is dropped (a hand-off or its node's exit drops it).
//! * Every node pings, as in Akka 2.6 (where the pinger runs on every node with the role);
//!   nodes without the role ping too, through their proxy. The number of workers is fixed
//!   (no rescaling, which Akka added in 2.9).

use std::time::Duration;

use shardik_core::sharding::ShardId;

use super::api::{Entity, EntityKind};
use super::entity_ref::EntityRegion;
use super::handle::Sharding;
use super::keepalive::{ManagedEntity, ManagedInitError, ManagedOptions, ManagedRef, init_managed};

/// A reference to one worker of a sharded daemon process.
pub type WorkerRef<E> = ManagedRef<E>;

/// How a sharded daemon process runs.
pub struct DaemonSettings<C> {
    name: String,
    workers: u32,
    options: ManagedOptions<C>,
}

impl<C> std::fmt::Debug for DaemonSettings<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonSettings")
            .field("name", &self.name)
            .field("workers", &self.workers)
            .field("role", &self.options.role)
            .field("keep_alive_interval", &self.options.keep_alive_interval)
            .finish_non_exhaustive()
    }
}

impl<C> DaemonSettings<C> {
    /// `workers` workers of the process `name` (every node must use the same name and
    /// number), on any member, kept alive every 10 s (Akka's `keep-alive-interval`).
    pub fn new(name: &str, workers: u32) -> Self {
        DaemonSettings {
            name: name.to_string(),
            workers,
            options: ManagedOptions::default(),
        }
    }

    /// Runs workers only on members with `role`.
    pub fn with_role(mut self, role: &str) -> Self {
        self.options.set_role(role);
        self
    }

    /// How often every node pings every worker: the longest a worker stays down after its
    /// node left or failed (once its shard can be re-allocated).
    pub fn with_keep_alive_interval(mut self, interval: Duration) -> Self {
        self.options.keep_alive_interval = interval;
        self
    }

    /// The command a worker receives before it is stopped (hand-off to another node).
    pub fn with_stop_message(mut self, make: impl Fn() -> C + Send + Sync + 'static) -> Self {
        self.options.set_stop_message(make);
        self
    }

    /// The name of the entity kind the workers are registered as.
    pub fn kind_name(&self) -> String {
        format!("sharded-daemon-process-{}", self.name)
    }
}

/// A running sharded daemon process, as seen from one node.
pub struct ShardedDaemonProcess<E: Entity> {
    region: EntityRegion<ManagedEntity<E>>,
    workers: u32,
}

impl<E: Entity> std::fmt::Debug for ShardedDaemonProcess<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedDaemonProcess")
            .field("kind", &self.region.kind())
            .field("workers", &self.workers)
            .finish()
    }
}

impl<E: Entity> Clone for ShardedDaemonProcess<E> {
    fn clone(&self) -> Self {
        ShardedDaemonProcess {
            region: self.region.clone(),
            workers: self.workers,
        }
    }
}

impl<E: Entity> ShardedDaemonProcess<E> {
    /// Starts `workers` workers called `name` with the default settings; `factory` creates
    /// the worker of an index (`0..workers`) when it comes to live on this node. Every node
    /// of the cluster should call this with the same name and number.
    ///
    /// ```no_run
    /// # use shardik_runtime::facade as shardik;
    /// use serde::{Deserialize, Serialize};
    /// use shardik::{Entity, EntityContext, Node, ShardedDaemonProcess};
    ///
    /// /// Consumes partition `index` of a stream for as long as it runs.
    /// struct Consumer {
    ///     index: u32,
    /// }
    ///
    /// #[derive(Serialize, Deserialize)]
    /// enum Command {
    ///     Pause,
    /// }
    ///
    /// impl Entity for Consumer {
    ///     type Command = Command;
    ///     async fn handle(&mut self, _cmd: Command, _ctx: &mut EntityContext<Self>) {}
    /// }
    ///
    /// # async fn run(node: Node) -> Result<(), Box<dyn std::error::Error>> {
    /// // On every node, with the same name and number: eight workers kept running across the
    /// // cluster, started without a message, moved when their node leaves or fails.
    /// let consumers =
    ///     ShardedDaemonProcess::init(node.sharding(), "consumers", 8, |index| Consumer { index })?;
    /// consumers.worker(3).expect("below 8").tell(Command::Pause).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn init(
        sharding: &Sharding,
        name: &str,
        workers: u32,
        factory: impl Fn(u32) -> E + Send + Sync + 'static,
    ) -> Result<Self, ManagedInitError> {
        Self::init_with_settings(sharding, DaemonSettings::new(name, workers), factory)
    }

    /// As [`init`](Self::init), with settings.
    pub fn init_with_settings(
        sharding: &Sharding,
        settings: DaemonSettings<E::Command>,
        factory: impl Fn(u32) -> E + Send + Sync + 'static,
    ) -> Result<Self, ManagedInitError> {
        if settings.workers == 0 {
            return Err(ManagedInitError::NoWorkers);
        }
        let n = settings.workers;
        let kind = EntityKind::new(&settings.kind_name(), move |id| ManagedEntity {
            // Ids come from the network too: anything but a canonical index below `n` is no
            // worker (and stops again at once).
            inner: worker_index(id, n).map(&factory),
        })
        // Each worker its own shard, so the allocation strategy spreads them over the nodes.
        .with_shard_extractor(|id: &str| ShardId::from(id));
        let region = init_managed(sharding, kind, settings.options, move || {
            Box::new((0..n).map(|i| i.to_string()))
        })?;
        Ok(ShardedDaemonProcess { region, workers: n })
    }

    /// The number of workers.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// A reference to worker `index`, or `None` if there is no such worker.
    pub fn worker(&self, index: u32) -> Option<WorkerRef<E>> {
        (index < self.workers).then(|| ManagedRef {
            inner: self.region.entity_ref(&index.to_string()),
        })
    }

    /// The name of the underlying entity kind (for [`Sharding::region_state`] and
    /// [`Sharding::cluster_stats`]).
    pub fn kind(&self) -> &str {
        self.region.kind()
    }
}

/// The worker index an entity id names: the decimal form of a number below `n`, with no
/// sign, padding or leading zero (so that one worker has exactly one id).
fn worker_index(id: &str, n: u32) -> Option<u32> {
    let i: u32 = id.parse().ok()?;
    (i < n && i.to_string() == id).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::worker_index;

    #[test]
    fn only_canonical_indexes_below_n_are_workers() {
        assert_eq!(worker_index("0", 4), Some(0));
        assert_eq!(worker_index("3", 4), Some(3));
        for bad in ["4", "-1", "+1", "01", " 1", "", "x", "99999999999"] {
            assert_eq!(worker_index(bad, 4), None, "{bad:?}");
        }
    }
}
