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
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_util::FutureExt;
use futures_util::stream::FuturesUnordered;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::entities::{self, Lifecycle, Run, Runner};
use shardik_core::sharding::{EntityId, ShardId};
use shardik_persistence::Fence;

use super::api::{Entity, EntityContext};
use super::messages::AskHandle;
use super::pending::AnswerRoute;
use super::remember::RememberWriter;

mod lanes;
#[cfg(test)]
mod tests;

pub(crate) use lanes::Completions;

/// The types of entity `E`'s lifecycle.
pub(crate) struct Hosted<E>(PhantomData<E>);

impl<E: Entity> Lifecycle for Hosted<E> {
    type Entity = E;
    type Command = E::Command;
    /// A handler's only result is that it finished: answers go through the command's
    /// `ReplyTo`, and the asker is told only of a failure (or that the command was handled).
    type Reply = ();
    type Asker = Asker;
}

/// A command waiting for, or being handled by, its entity.
pub(crate) type Job<E> = entities::Job<Hosted<E>>;
/// What a handler hands back.
pub(crate) type Completed<E> = entities::Done<Hosted<E>>;
/// The lifecycle of one kind's entities on this node.
pub(crate) type Entities<E> = entities::Entities<Hosted<E>>;
/// What the lifecycle asks the kind's task to do.
pub(crate) type HostOutput<E> = entities::Output<Hosted<E>>;

/// Who waits on a command: told only if it was not handled (the answer itself goes through the
/// command's `ReplyTo`).
pub(crate) enum Asker {
    /// Nobody (a tell).
    None,
    /// A local asker.
    Local(AskHandle),
    /// An asker on another node (or a node relaying for it): where a failure is reported,
    /// and the ask's id there. Two words, as a local asker: every command carries an `Asker`.
    Remote(Arc<AnswerRoute>, std::num::NonZeroU64),
}

impl entities::Asker for Asker {
    fn nobody() -> Self {
        Asker::None
    }

    fn waits(&self) -> bool {
        !matches!(self, Asker::None)
    }
}

/// A handler that could not finish when it started, polled by the kind's task.
pub(crate) type Running<E> = Pin<Box<dyn Future<Output = Completed<E>> + Send>>;

/// What a handler needs to run one command (beside the node, which the task that runs it
/// keeps: see [`Cells::node`]).
pub(super) struct Args<E: Entity> {
    pub fence: Option<Fence>,
    pub shard: ShardId,
    pub id: EntityId,
    pub entity: E,
    pub job: Job<E>,
    /// The command is the kind's stop message.
    pub was_stop: bool,
}

pin_project_lite::pin_project! {
    /// A reusable slot for the future `make` makes: empty between commands.
    struct Cell<M, F> {
        make: M,
        #[pin]
        fut: Option<F>,
    }
}

/// A [`Cell`] seen through its entity type only (its future's type has no name).
trait Handler<E: Entity>: Future<Output = Completed<E>> + Send {
    /// Puts the future of a new command into this (empty) cell, in place, and polls it once
    /// (one call through the trait object for both).
    fn start(
        self: Pin<&mut Self>,
        args: Args<E>,
        node: UniqueAddress,
        cx: &mut Context<'_>,
    ) -> Poll<Completed<E>>;
}

impl<M, F> Future for Cell<M, F>
where
    F: Future,
{
    type Output = F::Output;

    /// Polls the held future; when it finishes, the cell is emptied in place, ready for reuse.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let mut this = self.project();
        let Some(fut) = this.fut.as_mut().as_pin_mut() else {
            // Never happens: an empty cell is only ever the host's spare, which it does not
            // poll, and the running set does not poll a future again once it finished.
            debug_assert!(false, "an empty handler cell was polled");
            return Poll::Pending;
        };
        let done = std::task::ready!(fut.poll(cx));
        this.fut.set(None);
        Poll::Ready(done)
    }
}

impl<E, M, F> Handler<E> for Cell<M, F>
where
    E: Entity,
    M: Fn(Args<E>, UniqueAddress) -> F + Send,
    F: Future<Output = Completed<E>> + Send,
{
    fn start(
        mut self: Pin<&mut Self>,
        args: Args<E>,
        node: UniqueAddress,
        cx: &mut Context<'_>,
    ) -> Poll<Completed<E>> {
        let mut this = self.as_mut().project();
        let fut = (this.make)(args, node);
        this.fut.set(Some(fut));
        self.poll(cx)
    }
}

/// A new empty cell for the futures `make` makes; `F` is inferred from `make`.
fn cell_of<E, M, F>(make: M) -> Pin<Box<dyn Handler<E> + Send>>
where
    E: Entity,
    M: Fn(Args<E>, UniqueAddress) -> F + Send + 'static,
    F: Future<Output = Completed<E>> + Send + 'static,
{
    Box::pin(Cell {
        make,
        fut: None::<F>,
    })
}

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

/// What one task runs handlers with: an empty cell kept for the next command, the handlers
/// that await, and the node they run on.
pub(crate) struct Cells<E: Entity> {
    /// This node, as every handler's context names it: each task that runs handlers has a
    /// copy of its own, not a clone of one shared value. Every command's context takes a
    /// clone, and a clone of a shared address (its host is reference-counted) made by the
    /// kind's task and dropped by a lane on another core moved that count's cache line
    /// between the cores twice a command.
    node: UniqueAddress,
    /// An empty cell for the next command (`None` until the first one, and after a handler
    /// that awaited took it).
    spare: Option<Pin<Box<dyn Handler<E> + Send>>>,
    /// Handlers that await, polled by the task that started them.
    running: FuturesUnordered<Running<E>>,
}

impl<E: Entity> Cells<E> {
    /// Cells for handlers of entities on `node`, with a copy of the address of their own.
    fn new(node: &UniqueAddress) -> Self {
        Cells {
            node: node.deep_copy(),
            spare: None,
            running: FuturesUnordered::new(),
        }
    }

    /// Starts a handler and polls it once. Returns what it finished with, if it did; one that
    /// waits goes to `running`, which polls it again (with a waker of the task) before
    /// anything else can wake it, so polling it with a no-op waker first loses no wake-up.
    /// Always inlined: called out of line from the kind's task (as the compiler chose for the
    /// `SyncEntity` kind), it cost about a sixth of a local tell to such an entity.
    #[inline(always)]
    fn start(&mut self, args: Args<E>) -> Option<Completed<E>> {
        // A handler that never awaits is a plain call: no future to make, poll and empty.
        let args = if E::HANDLES_NOW {
            match run_now(args, self.node.clone()) {
                Ok(done) => return Some(done),
                Err(args) => args,
            }
        } else {
            args
        };
        let mut cell = self.spare.take().unwrap_or_else(|| cell_of(run::<E>));
        let mut cx = Context::from_waker(Waker::noop());
        match cell.as_mut().start(args, self.node.clone(), &mut cx) {
            Poll::Ready(done) => {
                self.spare = Some(cell);
                Some(done)
            }
            Poll::Pending => {
                self.running.push(cell);
                None
            }
        }
    }

    /// Runs a future made elsewhere (the first command of a remembered entity) like a handler:
    /// polled once, then finished or running.
    fn start_boxed(&mut self, mut fut: Running<E>) -> Option<Completed<E>> {
        let mut cx = Context::from_waker(Waker::noop());
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(done) => Some(done),
            Poll::Pending => {
                self.running.push(fut);
                None
            }
        }
    }
}

/// Runs the first command of a new incarnation of a remembering kind once the store records
/// the entity as started. A wrapper around [`run`], so that the future of every other command
/// does not carry the record's state (it made each handler's future larger, and so the copy
/// into its cell).
fn run_remembered<E: Entity>(
    args: Args<E>,
    node: UniqueAddress,
    writer: RememberWriter,
) -> Running<E> {
    Box::pin(async move {
        if let Err(e) = writer.started(&args.shard, &args.id).await {
            return Completed {
                shard: args.shard,
                id: args.id,
                entity: None,
                reply: args.job.reply,
                outcome: Err(format!("the entity could not be remembered: {e}")),
                passivate: false,
                was_stop: false,
                requests: Vec::new(),
                from_context: args.job.from_context,
                unrecorded: true,
            };
        }
        drop(writer);
        run(args, node).await
    })
}

/// Handles one command of a [`SyncEntity`](super::api::SyncEntity) by a plain call,
/// under the same panic guard as [`run`]. The arguments come back if the entity declines (an
/// entity that sets `HANDLES_NOW` by hand but does not handle every command at once).
fn run_now<E: Entity>(args: Args<E>, node: UniqueAddress) -> Result<Completed<E>, Args<E>> {
    let (mut entity, mut ctx, job, was_stop) = open(args, node);
    let Job {
        cmd,
        reply,
        from_context,
    } = job;
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| entity.handle_now(cmd, &mut ctx)));
    let result = match result {
        Ok(Ok(r)) => Ok(Ok(r)),
        Ok(Err(cmd)) => {
            return Err(Args {
                fence: ctx.fence,
                shard: ctx.shard_id,
                id: ctx.entity_id,
                entity,
                job: Job {
                    cmd,
                    reply,
                    from_context,
                },
                was_stop,
            });
        }
        Err(panic) => Err(panic),
    };
    Ok(completed(
        entity,
        ctx,
        reply,
        from_context,
        was_stop,
        result,
    ))
}

/// The future that handles one command: owns the entity while it runs and hands it back.
fn run<E: Entity>(
    args: Args<E>,
    node: UniqueAddress,
) -> impl Future<Output = Completed<E>> + Send + 'static {
    let (mut entity, mut ctx, job, was_stop) = open(args, node);
    async move {
        let Job {
            cmd,
            reply,
            from_context,
        } = job;
        let result = AssertUnwindSafe(entity.try_handle(cmd, &mut ctx))
            .catch_unwind()
            .await;
        let result = result.map(|r| r.map_err(|failure| failure.0));
        completed(entity, ctx, reply, from_context, was_stop, result)
    }
}

/// A handler's entity, its context, its job and whether it is the stop message. The context
/// owns the ids while the handler runs and hands them back after, so no reference count is
/// touched for them on the way.
fn open<E: Entity>(args: Args<E>, node: UniqueAddress) -> (E, EntityContext<E>, Job<E>, bool) {
    let Args {
        fence,
        shard,
        id,
        entity,
        job,
        was_stop,
    } = args;
    let ctx = EntityContext::<E> {
        entity_id: id,
        shard_id: shard,
        node,
        passivate: false,
        requests: Vec::new(),
        fence,
    };
    (entity, ctx, job, was_stop)
}

/// What became of a handler: `Ok(Ok)` its reply, `Ok(Err)` the failure it reported, `Err`
/// its panic.
type Outcome<R> = Result<Result<R, String>, Box<dyn std::any::Any + Send>>;

/// The completion of a handler that ran with `ctx` and ended with `result`.
#[inline(always)]
fn completed<E: Entity>(
    entity: E,
    ctx: EntityContext<E>,
    reply: Asker,
    from_context: bool,
    was_stop: bool,
    result: Outcome<()>,
) -> Completed<E> {
    let EntityContext {
        entity_id: id,
        shard_id: shard,
        passivate,
        requests,
        ..
    } = ctx;
    match result {
        Ok(Ok(r)) => Completed {
            shard,
            id,
            entity: Some(entity),
            reply,
            outcome: Ok(if was_stop { None } else { Some(r) }),
            passivate,
            was_stop,
            requests,
            from_context,
            unrecorded: false,
        },
        Ok(Err(failure)) => Completed {
            shard,
            id,
            entity: None,
            reply,
            outcome: Err(failure),
            passivate: false,
            was_stop,
            requests: Vec::new(),
            from_context,
            unrecorded: false,
        },
        Err(panic) => Completed {
            shard,
            id,
            entity: None,
            reply,
            outcome: Err(panic_message(panic)),
            passivate: false,
            was_stop,
            requests: Vec::new(),
            from_context,
            unrecorded: false,
        },
    }
}

/// What a handler's panic said, for the asker's error. Out of line: it is rare, and its code
/// kept [`completed`] from being inlined into the handler runs, which then copied every
/// completion once more on its way back.
#[cold]
#[inline(never)]
fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let msg = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("handler panicked: {msg}")
}
