//! The benchmark entity: a counter told numbers to add and asked its total, as an async and as a
//! sync entity, and the progress its handlers report to.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::bail;
use serde::{Deserialize, Serialize};
use shardik_runtime::sharding::{Entity, EntityContext, EntityKind, ReplyTo, SyncEntity};
use tokio::sync::Notify;

use crate::bench_support::unix_ns;

/// Told [`TallyCmd::Add`]: adds. Asked [`TallyCmd::Read`]: answers the value. `P` observes
/// handled tells; `()` observes nothing and takes no space, so `Tally<()>` is a plain u64
/// counter.
pub(super) struct Tally<P> {
    value: u64,
    probe: P,
}

/// What a [`Tally`] reports each handled tell to.
pub(super) trait Probe: Clone + Send + Sync + 'static {
    fn told(&self);
}

impl Probe for () {
    fn told(&self) {}
}

impl Probe for Arc<Progress> {
    fn told(&self) {
        self.hit();
    }
}

/// What a [`Tally`] is told (a number to add) or asked (its value). As small as a tell of a
/// bare `u64` plus its tag: the `ReplyTo` is one pointer.
#[derive(Serialize, Deserialize)]
pub(super) enum TallyCmd {
    Add(u64),
    Read(ReplyTo<u64>),
}

impl<P: Probe> Entity for Tally<P> {
    type Command = TallyCmd;

    async fn handle(&mut self, cmd: TallyCmd, _ctx: &mut EntityContext<Self>) {
        self.handle(cmd)
    }
}

impl<P: Probe> Tally<P> {
    /// A tally at zero.
    fn new(probe: P) -> Self {
        Tally { value: 0, probe }
    }

    /// Adds, or answers the total.
    fn handle(&mut self, cmd: TallyCmd) {
        match cmd {
            TallyCmd::Add(add) => {
                self.value += add;
                self.probe.told();
            }
            TallyCmd::Read(reply_to) => reply_to.send(self.value),
        }
    }
}

/// [`Tally`] as a [`SyncEntity`]: the same handler, called without a future.
pub(super) struct SyncTally<P>(Tally<P>);

impl<P: Probe> SyncEntity for SyncTally<P> {
    type Command = TallyCmd;

    fn handle(&mut self, cmd: TallyCmd, _ctx: &mut EntityContext<Self>) {
        self.0.handle(cmd)
    }
}

/// The kind `name` of [`Tally`] entities that report to `probe`, never passivated.
pub(super) fn tally_kind<P: Probe>(name: &str, probe: P) -> EntityKind<Tally<P>> {
    EntityKind::new(name, move |_| Tally::new(probe.clone())).with_idle_timeout(None)
}

/// The kind `name` of [`SyncTally`] entities that report to `probe`, never passivated.
pub(super) fn sync_tally_kind<P: Probe>(name: &str, probe: P) -> EntityKind<SyncTally<P>> {
    EntityKind::new(name, move |_| SyncTally(Tally::new(probe.clone()))).with_idle_timeout(None)
}

/// Counts handled messages towards a target and wakes a waiter when it is reached.
pub(super) struct Progress {
    target: u64,
    handled: AtomicU64,
    pub(super) first_ns: AtomicU64,
    last_ns: AtomicU64,
    done: Notify,
}

impl Progress {
    pub(super) fn new(target: u64) -> Arc<Progress> {
        Arc::new(Progress {
            target,
            handled: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            done: Notify::new(),
        })
    }

    pub(super) fn hit(&self) {
        let n = self.handled.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 {
            self.first_ns.store(unix_ns(), Ordering::Relaxed);
        }
        if n == self.target {
            self.last_ns.store(unix_ns(), Ordering::Release);
            self.done.notify_one();
        }
    }

    /// Waits until the target is reached; the unix time (ns) the last message was handled.
    pub(super) async fn wait(&self, limit: Duration) -> anyhow::Result<u64> {
        if tokio::time::timeout(limit, self.done.notified())
            .await
            .is_err()
        {
            bail!(
                "only {} of {} messages handled after {limit:?}",
                self.handled.load(Ordering::Relaxed),
                self.target
            );
        }
        Ok(self.last_ns.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_tally_is_one_u64() {
        assert_eq!(std::mem::size_of::<Tally<()>>(), 8);
    }

    #[test]
    fn a_tally_command_is_a_u64_and_its_tag() {
        assert_eq!(std::mem::size_of::<TallyCmd>(), 16);
    }
}
