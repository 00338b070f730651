//! What goes in and out of the entity lifecycle: the jobs it queues, the handler runs it asks
//! its driver for, what a finished handler hands back, and what it tells the driver to do.
//!
//! Everything is generic over a [`Lifecycle`], which names the types of one entity kind (its
//! value, commands, replies, and where a reply goes): the runtime's are its `Entity` trait's,
//! the simulator's are plain values, and the rules applied to them are one and the same.

use std::time::Duration;

use crate::sharding::{EntityId, ShardId};

/// The types of one entity kind, as the lifecycle sees them: it moves them around and never
/// looks inside, except to tell whether anyone waits for a reply.
pub trait Lifecycle {
    /// An entity's state while it is idle (moved into a handler while one runs).
    type Entity;
    /// What an entity is told or asked.
    type Command;
    /// What a handler answers.
    type Reply;
    /// Where a command's reply goes.
    type Asker: Asker;
}

/// Where a command's reply goes.
pub trait Asker {
    /// Nowhere: a tell, a timer, a message to self, a stop message.
    fn nobody() -> Self;
    /// Whether someone waits for the reply (a tell's reply is not handed out at all).
    fn waits(&self) -> bool;
}

/// A command waiting for, or being handled by, its entity.
pub struct Job<L: Lifecycle> {
    /// The command.
    pub cmd: L::Command,
    /// Where its reply goes.
    pub reply: L::Asker,
    /// Sent by the entity to itself (a message to self, a timer, the receive timeout). As in
    /// the reference, where these go straight to the actor and not through its shard, they do
    /// not count as use for passivation: an entity kept busy only by its own timers is still
    /// passivated when idle.
    pub from_context: bool,
}

impl<L: Lifecycle> Job<L> {
    /// A command from outside the entity, answered to `reply`.
    pub fn new(cmd: L::Command, reply: L::Asker) -> Self {
        Job {
            cmd,
            reply,
            from_context: false,
        }
    }

    /// A command the entity sent itself (a timer, a message to self): nobody waits for it.
    pub(crate) fn from_context(cmd: L::Command) -> Self {
        Job {
            cmd,
            reply: L::Asker::nobody(),
            from_context: true,
        }
    }
}

/// A handler the lifecycle wants run: `entity` handles `job`.
pub struct Run<L: Lifecycle> {
    /// The entity's shard.
    pub shard: ShardId,
    /// The entity.
    pub id: EntityId,
    /// Its value, moved into the handler and handed back in [`Done::entity`].
    pub entity: L::Entity,
    /// What it handles.
    pub job: Job<L>,
    /// The command is the kind's stop message: the entity ends after it.
    pub was_stop: bool,
    /// A new incarnation of an entity of a kind that remembers its entities: the store must
    /// record it as started before the command runs (and [`Done::unrecorded`] says it could
    /// not).
    pub record_first: bool,
}

/// What a handler hands back when it finishes.
pub struct Done<L: Lifecycle> {
    /// The entity's shard.
    pub shard: ShardId,
    /// The entity.
    pub id: EntityId,
    /// The entity's value, to keep; `None` if the handler failed (the incarnation ends).
    pub entity: Option<L::Entity>,
    /// Where the reply goes.
    pub reply: L::Asker,
    /// The reply (`None` for a stop message), or why the handler failed.
    pub outcome: Result<Option<L::Reply>, String>,
    /// The handler asked to be passivated.
    pub passivate: bool,
    /// It handled the kind's stop message.
    pub was_stop: bool,
    /// The command came from the entity's own context (see `Job::from_context`).
    pub from_context: bool,
    /// What the handler asked of the lifecycle through its context, in order.
    pub requests: Vec<ContextRequest<L::Command>>,
    /// The incarnation ended because the store could not record it as started: it may not be
    /// remembered, so it is not restarted after the back-off.
    pub unrecorded: bool,
}

impl<L: Lifecycle> Done<L> {
    /// A stop that needs no handler (the kind has no stop message): the entity ends at once.
    pub(crate) fn stopped(shard: ShardId, id: EntityId) -> Self {
        Done {
            shard,
            id,
            entity: None,
            reply: L::Asker::nobody(),
            outcome: Ok(None),
            passivate: false,
            was_stop: true,
            from_context: false,
            requests: Vec::new(),
            unrecorded: false,
        }
    }
}

/// Runs handlers for the lifecycle: the runtime polls futures, the simulator calls plain
/// functions and may hold a handler back to model one that awaits.
pub trait Runner<L: Lifecycle> {
    /// Starts `run`. Returns what it finished with if it finished at once; otherwise the
    /// driver hands its [`Done`] to [`Entities::completed`](super::Entities::completed) when
    /// it finishes.
    fn run(&mut self, run: Run<L>) -> Option<Done<L>>;
}

/// What the lifecycle asks its driver to do.
pub enum Output<L: Lifecycle> {
    /// Send this reply (someone waits for it).
    Reply(L::Asker, Result<L::Reply, String>),
    /// Every entity of the shard has stopped, after [`Entities::stop_shard`](super::Entities::stop_shard).
    ShardEmpty(ShardId),
    /// An incarnation of the entity started (on a command, from the remembered set, or after
    /// a failure's back-off).
    Started {
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        id: EntityId,
    },
    /// An incarnation of the entity ended (stopped, failed, or dropped with its shard).
    Stopped {
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        id: EntityId,
    },
    /// A handler failed or panicked: its incarnation is dropped (count and log it).
    Failed {
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        id: EntityId,
        /// Why.
        why: String,
    },
    /// The entity was passivated: its remembered life is over (the store forgets it).
    Forget {
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        id: EntityId,
    },
    /// A failed remembered entity started again after `entity-restart-backoff`.
    Restarted {
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        id: EntityId,
    },
    /// A command named a shard other than the one its entity lives in here, and was refused
    /// rather than start a second copy of the entity (every node must use the same shard
    /// extractor).
    Refused {
        /// The entity the command was for.
        id: EntityId,
        /// Who waits for the command's reply.
        reply: L::Asker,
        /// What went wrong, for the asker and the log.
        why: String,
    },
}

/// The command a timer delivers: once, or a fresh copy each time.
pub enum TimerCommand<C> {
    /// Delivered once.
    Once(C),
    /// Made anew at each firing.
    Repeat(CommandMaker<C>),
}

/// Makes the command of a repeating timer or a receive timeout at each firing.
pub type CommandMaker<C> = Box<dyn Fn() -> C + Send>;

/// One request a handler made through its context.
pub enum ContextRequest<C> {
    /// Queue this command behind the ones waiting for the entity.
    TellSelf(C),
    /// Start (or restart) the timer `key`.
    StartTimer {
        /// The timer's name: starting a key again replaces its timer.
        key: Box<str>,
        /// What it delivers.
        command: TimerCommand<C>,
        /// After how long (and how often, for a repeating one).
        delay: Duration,
    },
    /// Cancel the timer `key` (nothing if there is none).
    CancelTimer(Box<str>),
    /// Cancel every timer (not the receive timeout).
    CancelAllTimers,
    /// Set (`Some`) or clear (`None`) the receive timeout.
    ReceiveTimeout(Option<(Duration, CommandMaker<C>)>),
}

impl<C: 'static> ContextRequest<C> {
    /// The same request for an entity that wraps this one and whose commands wrap `C` with
    /// `wrap` (a singleton's or a daemon's managed entity).
    pub fn map<D: 'static>(self, wrap: fn(C) -> D) -> ContextRequest<D> {
        let maker = |make: CommandMaker<C>| -> CommandMaker<D> { Box::new(move || wrap(make())) };
        match self {
            ContextRequest::TellSelf(c) => ContextRequest::TellSelf(wrap(c)),
            ContextRequest::StartTimer {
                key,
                command,
                delay,
            } => ContextRequest::StartTimer {
                key,
                command: match command {
                    TimerCommand::Once(c) => TimerCommand::Once(wrap(c)),
                    TimerCommand::Repeat(make) => TimerCommand::Repeat(maker(make)),
                },
                delay,
            },
            ContextRequest::CancelTimer(key) => ContextRequest::CancelTimer(key),
            ContextRequest::CancelAllTimers => ContextRequest::CancelAllTimers,
            ContextRequest::ReceiveTimeout(t) => {
                ContextRequest::ReceiveTimeout(t.map(|(d, make)| (d, maker(make))))
            }
        }
    }
}
