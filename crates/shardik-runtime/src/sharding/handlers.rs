//! The handlers of one kind's entities while they run: the runtime's side of the core's
//! entity lifecycle ([`Entities`](shardik_core::sharding::entities::Entities)), which decides
//! what runs when; this module runs it. The future that handles one command, and where it
//! lives.
//!
//! Most handlers finish without awaiting anything. Boxing each command's future anew cost an
//! allocation, a copy into it and a free per command, which was a large share of a local
//! tell. So the future is written into a *cell*: a heap slot of the future's concrete type,
//! pinned once and reused. A handler is started in the spare cell and polled once; if it
//! finishes, the cell is emptied in place (`Pin::set`) and kept for the next command. Only a
//! handler that awaits keeps its cell: the cell goes to the running set, which polls it
//! until it finishes, and the next command gets a new cell.
//!
//! The cell's type is that of the future, which has no name in Rust; it is captured once, by
//! inference, from the function that makes the future ([`cell_of`]), and the runner only sees
//! it as a [`Handler`] trait object.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::stream::FuturesUnordered;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::ShardId;
use shardik_core::sharding::entities::{self, Run, Runner};
use shardik_persistence::Fence;

use super::api::Entity;
use super::remember::RememberWriter;

mod cells;
mod lanes;
mod lifecycle;
#[cfg(test)]
mod tests;

use cells::{Args, Cells, run_remembered};
pub(crate) use lanes::Completions;
pub(crate) use lifecycle::{Asker, Completed, Entities, HostOutput, Job};
use lifecycle::{Hosted, Running};

/// Runs the handlers of one kind's entities on this node: in the kind's task, or on its
/// [lanes](lanes::Lanes) when there are several and handlers take long enough to be worth
/// spreading.
pub(crate) struct Handlers<E: Entity> {
    /// Where the handlers run in the kind's own task start and wait.
    cells: Cells<E>,
    /// How many lanes the kind asked for (`handler-lanes`; 0: one per worker thread).
    lanes_wanted: usize,
    /// The kind's lanes, when it has more than one.
    lanes: Option<lanes::Lanes<E>>,
    /// Where started entities are recorded, when the kind remembers them.
    remember: Option<RememberWriter>,
    /// The fences of shards that run under a lease (`use-lease`): every handler of the
    /// shard's entities gets it in its context, and durable entities' writes carry it. Empty
    /// without leases.
    fences: HashMap<ShardId, Fence>,
}

impl<E: Entity> Runner<Hosted<E>> for Handlers<E> {
    fn run(&mut self, run: Run<Hosted<E>>) -> Option<Completed<E>> {
        let Run {
            shard,
            id,
            entity,
            job,
            was_stop,
            record_first,
        } = run;
        let args = Args {
            fence: self.fence_of(&shard),
            shard,
            id,
            entity,
            job,
            was_stop,
        };
        // The first command of a new remembered incarnation stays here: it awaits the store's
        // record first, as any handler that awaits, and lanes run plain handlers only.
        let remembered_first = record_first && self.remember.is_some();
        if let Some(lanes) = self.lanes.as_mut().filter(|l| l.spreading())
            && !remembered_first
        {
            lanes.stage(args);
            return None;
        }
        let timed = self.lanes.as_mut().is_some_and(|l| l.sample_due());
        let started = timed.then(std::time::Instant::now);
        let done = match (record_first, &self.remember) {
            (true, Some(writer)) => {
                let node = self.cells.node.clone();
                self.cells
                    .start_boxed(run_remembered(args, node, writer.clone()))
            }
            _ => self.cells.start(args),
        };
        if let (Some(started), Some(lanes)) = (started, self.lanes.as_mut()) {
            lanes.sampled(started.elapsed());
        }
        done
    }
}

impl<E: Entity> Handlers<E> {
    /// The handlers of entities on `node`, on `lanes` lanes once they start (0: one per
    /// worker thread of the runtime; 1: none, every handler in the kind's task).
    pub fn new(node: UniqueAddress, lanes: usize) -> Self {
        Handlers {
            cells: Cells::new(&node),
            lanes_wanted: lanes,
            lanes: None,
            remember: None,
            fences: HashMap::new(),
        }
    }

    /// Starts the lanes of kind `kind` on the current runtime, which has `workers` worker
    /// threads: as many as were asked for, or one per worker when that was 0. One lane is
    /// none: the kind's task runs every handler.
    pub fn start_lanes(&mut self, workers: usize, kind: &str) {
        let count = match self.lanes_wanted {
            0 => workers,
            n => n,
        };
        let node = &self.cells.node;
        self.lanes = (count > 1).then(|| lanes::Lanes::start(count, kind, node));
    }

    /// Where the lanes say they finished handlers, if the kind has lanes: wait on
    /// [`Completions::ready`](lanes::Completions::ready) while [`lanes_busy`](Self::lanes_busy),
    /// then [`take_lane_completions`](Self::take_lane_completions).
    pub fn lane_completions(&self) -> Option<Arc<lanes::Completions<E>>> {
        self.lanes.as_ref().map(|l| l.completions())
    }

    /// Whether a lane has handlers of this kind, started or not, that have not come back.
    pub fn lanes_busy(&self) -> bool {
        self.lanes.as_ref().is_some_and(|l| l.outstanding() > 0)
    }

    /// Whether enough handlers wait for the lanes to keep them busy until the kind's task next
    /// runs (never, for a kind without lanes).
    pub fn lanes_full(&self) -> bool {
        self.lanes.as_ref().is_some_and(|l| l.full())
    }

    /// Moves the handlers the lanes finished into `into`. Until
    /// [`settle_lanes`](Self::settle_lanes), the lanes leave it to the kind's task to look for
    /// more: call that before waiting on the lanes again.
    pub fn take_lane_completions(&mut self, into: &mut Vec<Completed<E>>) {
        if let Some(lanes) = &mut self.lanes {
            lanes.take(into);
        }
    }

    /// The kind's task is about to wait: if the lanes handed back handlers since it took
    /// their completions, it is woken at once.
    pub fn settle_lanes(&mut self) {
        if let Some(lanes) = &mut self.lanes {
            lanes.settle();
        }
    }

    /// Hands the handlers started during this turn to their lanes.
    pub fn send_to_lanes(&mut self) {
        if let Some(lanes) = &mut self.lanes {
            lanes.send();
        }
    }

    /// `shard` was stopped at once (its lease lost): its handlers that no lane has started
    /// will not start, and whoever waits on them is told, as for the commands that waited
    /// behind a busy entity (`Entities::force_stop_shard`, which has already dropped their
    /// entities).
    pub fn withdraw_shard(&mut self, shard: &ShardId, out: &mut Vec<HostOutput<E>>) {
        let Some(lanes) = &mut self.lanes else {
            return;
        };
        let mut withdrawn = Vec::new();
        lanes.withdraw(shard, &mut withdrawn);
        for args in withdrawn {
            if entities::Asker::waits(&args.job.reply) {
                out.push(entities::Output::Reply(
                    args.job.reply,
                    Err("the shard was stopped before this command ran".to_string()),
                ));
            }
        }
    }

    /// Records started entities with `writer` (remember-entities). Must be set before the
    /// first delivery.
    pub fn set_remember(&mut self, writer: RememberWriter) {
        self.remember = Some(writer);
    }

    /// `shard` runs under its lease with `fence` from now on: its entities' handlers get it.
    pub fn set_fence(&mut self, shard: ShardId, fence: Fence) {
        self.fences.insert(shard, fence);
    }

    /// `shard` no longer runs under a lease here (it stopped, or lost its lease).
    pub fn clear_fence(&mut self, shard: &ShardId) {
        self.fences.remove(shard);
    }

    /// The fence the handlers of `shard`'s entities get (`None` without leases).
    #[inline]
    fn fence_of(&self, shard: &ShardId) -> Option<Fence> {
        if self.fences.is_empty() {
            return None;
        }
        self.fences.get(shard).cloned()
    }

    /// Where the kind's started and passivated entities are recorded, if it remembers them.
    pub fn remember_writer(&self) -> Option<&RememberWriter> {
        self.remember.as_ref()
    }

    /// Whether any handler of the kind's own task is running (awaiting).
    pub fn has_running(&self) -> bool {
        !self.cells.running.is_empty()
    }

    /// The running handlers of the kind's own task, to poll for completions.
    pub fn running_mut(&mut self) -> &mut FuturesUnordered<Running<E>> {
        &mut self.cells.running
    }

    /// Whether an empty handler cell is kept for the next command: one is made for the first
    /// handler run as a future, never for a [`SyncEntity`](super::api::SyncEntity).
    #[cfg(test)]
    pub fn has_spare_cell(&self) -> bool {
        self.cells.spare.is_some()
    }
}
