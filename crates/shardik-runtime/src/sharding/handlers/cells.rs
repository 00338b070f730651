//! The future that handles one command, and where it lives: a reusable *cell* per task
//! ([`Cells`]), and the functions that run a command's handler under a panic guard. See the
//! module above for why handlers run in cells.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use futures_util::FutureExt;
use futures_util::stream::FuturesUnordered;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{EntityId, ShardId};
use shardik_persistence::Fence;

use super::lifecycle::{Asker, Completed, Job, Running};
use crate::sharding::api::{Entity, EntityContext};
use crate::sharding::remember::RememberWriter;

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
pub(super) trait Handler<E: Entity>: Future<Output = Completed<E>> + Send {
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

/// What one task runs handlers with: an empty cell kept for the next command, the handlers
/// that await, and the node they run on.
pub(crate) struct Cells<E: Entity> {
    /// This node, as every handler's context names it: each task that runs handlers has a
    /// copy of its own, not a clone of one shared value. Every command's context takes a
    /// clone, and a clone of a shared address (its host is reference-counted) made by the
    /// kind's task and dropped by a lane on another core moved that count's cache line
    /// between the cores twice a command.
    pub(super) node: UniqueAddress,
    /// An empty cell for the next command (`None` until the first one, and after a handler
    /// that awaited took it).
    pub(super) spare: Option<Pin<Box<dyn Handler<E> + Send>>>,
    /// Handlers that await, polled by the task that started them.
    pub(super) running: FuturesUnordered<Running<E>>,
}

impl<E: Entity> Cells<E> {
    /// Cells for handlers of entities on `node`, with a copy of the address of their own.
    pub(super) fn new(node: &UniqueAddress) -> Self {
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
    pub(super) fn start(&mut self, args: Args<E>) -> Option<Completed<E>> {
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
    pub(super) fn start_boxed(&mut self, mut fut: Running<E>) -> Option<Completed<E>> {
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
pub(super) fn run_remembered<E: Entity>(
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
