//! Testing one event-sourced entity without a node (Akka's `EventSourcedBehaviorTestKit`):
//! [`EventSourcedTestKit`] runs commands through the entity as a node runs them, on the
//! kind's real store, and shows what each command persisted, answered and asked for.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::persistence::{EventSourced, EventSourcedEntity};
use shardik_core::sharding::entities::{ContextRequest, TimerCommand};

use crate::sharding::{
    Codec, CodecError, Entity, EntityContext, EntityFailure, EntityKind, ReplyTo, round_trip,
};

/// Runs commands through one event-sourced entity as a node runs them, and shows what each
/// did: the events it persisted, the state after them, its reply, and the timers and
/// passivation it asked for.
///
/// The entity is the kind's own ([`EntityKind::event_sourced`] or
/// [`EventSourcedKind`](crate::persistence::EventSourcedKind)), on the kind's store: recovery,
/// the journal writer, snapshots and event adapters are the ones a node runs. Give the kind a
/// store of its own for each test (`Persistence::open("memory:")`, or a temporary SQLite file).
///
/// **Everything a test sees has been through its codec**, so a type that does not survive
/// encoding fails the test rather than a node:
/// - each command is encoded and decoded with the kind's codec before the entity gets it (a
///   [`ReplyTo`] inside included);
/// - the events a command reports are read back from what was written, decoded as recovery
///   decodes them;
/// - the reply is encoded and decoded with its `ReplyTo`'s codec;
/// - when the kind takes snapshots, the state is encoded and decoded with the snapshot codec
///   after every command;
/// - [`restart`](Self::restart) drops the entity and recovers it from the store.
///
/// A command that carries an [`EntityRef`](crate::sharding::EntityRef) cannot be decoded
/// without a node; for such commands turn the command check off with
/// [`without_command_round_trip`](Self::without_command_round_trip).
///
/// What the entity asks of its context is kept as a node would keep it: timers started,
/// replaced and cancelled, the receive timeout, messages to itself, and passivation. A
/// passivation (like a failed command) ends the incarnation: its timers are cancelled, and the
/// next command recovers a new one from the store.
pub struct EventSourcedTestKit<B: EventSourcedEntity, C: Codec = crate::sharding::Postcard> {
    kind: EntityKind<EventSourced<B>, C>,
    entity_id: String,
    entity: EventSourced<B>,
    check_commands: bool,
    timers: BTreeMap<Box<str>, Timer<B::Command>>,
    receive_timeout: Option<Timer<B::Command>>,
    told_self: Vec<B::Command>,
}

/// A timer the entity started, kept until it is fired, replaced or cancelled.
struct Timer<Cmd> {
    delay: Duration,
    command: TimerCommand<Cmd>,
}

/// What one command did (Akka's `CommandResult`).
pub struct CommandResult<'k, B: EventSourcedEntity, R = ()> {
    events: Vec<B::Event>,
    state: &'k B,
    reply: Option<R>,
    passivated: bool,
}

impl<B: EventSourcedEntity, R> CommandResult<'_, B, R> {
    /// The events the command persisted, in order, as read back from the journal.
    pub fn events(&self) -> &[B::Event] {
        &self.events
    }

    /// The state after the command.
    pub fn state(&self) -> &B {
        self.state
    }

    /// The reply, once through its codec; `None` if the command did not answer.
    pub fn reply(&self) -> Option<&R> {
        self.reply.as_ref()
    }

    /// Whether the command asked to passivate the entity.
    pub fn passivated(&self) -> bool {
        self.passivated
    }
}

impl<B: EventSourcedEntity, R> std::fmt::Debug for CommandResult<'_, B, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandResult")
            .field("events", &self.events.len())
            .field("replied", &self.reply.is_some())
            .field("passivated", &self.passivated)
            .finish_non_exhaustive()
    }
}

/// Why a command run by the test kit failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestKitError {
    /// A value did not survive its codec: `what` names which (a command, a reply, an event,
    /// the state).
    #[error("the {what} does not survive its codec: {error}")]
    Codec {
        /// The command, the reply, an event or the state.
        what: &'static str,
        /// The codec's error.
        error: String,
    },
    /// The entity failed the command (its recovery or its write failed); its incarnation
    /// ended, as on a node.
    #[error("the entity failed: {0}")]
    Failed(EntityFailure),
    /// The test asked for a timer the entity has not started (or has cancelled).
    #[error("no timer {0:?} is running")]
    NoTimer(String),
}

impl<B: EventSourcedEntity, C: Codec> EventSourcedTestKit<B, C> {
    /// A test kit for entity `entity_id` of `kind`. The entity is created by the kind's
    /// factory and recovers from the kind's store before its first command.
    pub fn new(kind: EntityKind<EventSourced<B>, C>, entity_id: &str) -> Self {
        let entity = (kind.factory)(entity_id);
        entity.witness_writes();
        EventSourcedTestKit {
            kind,
            entity_id: entity_id.to_string(),
            entity,
            check_commands: true,
            timers: BTreeMap::new(),
            receive_timeout: None,
            told_self: Vec::new(),
        }
    }

    /// Hands commands to the entity as they are, not through the kind's codec: for commands
    /// that carry an [`EntityRef`](crate::sharding::EntityRef), which only a node can decode.
    pub fn without_command_round_trip(mut self) -> Self {
        self.check_commands = false;
        self
    }

    /// The entity's id.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// Runs the command `make` builds around a fresh [`ReplyTo`] (as
    /// [`EntityRef::ask`](crate::sharding::EntityRef::ask) does), and returns what it did,
    /// with the reply.
    pub async fn run_command<R, RC>(
        &mut self,
        make: impl FnOnce(ReplyTo<R, RC>) -> B::Command,
    ) -> Result<CommandResult<'_, B, R>, TestKitError>
    where
        R: Serialize + DeserializeOwned + Send + 'static,
        RC: Codec + Default,
    {
        let (reply_to, answer) = ReplyTo::<R, RC>::detached();
        let (events, passivated) = self.handle(make(reply_to)).await?;
        let reply = match answer.take() {
            Some(reply) => Some(through_codec(&RC::default(), &reply, "reply")?),
            None => None,
        };
        Ok(CommandResult {
            events,
            state: self.entity.state(),
            reply,
            passivated,
        })
    }

    /// Runs `cmd`, a command that carries no `ReplyTo` (a tell), and returns what it did.
    pub async fn run(&mut self, cmd: B::Command) -> Result<CommandResult<'_, B>, TestKitError> {
        let (events, passivated) = self.handle(cmd).await?;
        Ok(CommandResult {
            events,
            state: self.entity.state(),
            reply: None,
            passivated,
        })
    }

    /// The state now (recovered first if the entity has not run a command yet).
    pub async fn state(&mut self) -> Result<&B, TestKitError> {
        self.entity
            .recovered(&self.entity_id)
            .await
            .map_err(|failure| self.failed(failure))?;
        Ok(self.entity.state())
    }

    /// The sequence number of the last event the entity applied.
    pub fn last_seq(&self) -> u64 {
        self.entity.last_seq()
    }

    /// Drops the entity, as a node does when it passivates or moves it, and recovers a new
    /// incarnation from the store (snapshot and events): what it shows is what another node
    /// would find. Timers and the receive timeout end with the old incarnation.
    pub async fn restart(&mut self) -> Result<&B, TestKitError> {
        self.end_incarnation();
        self.state().await
    }

    /// The delay of the timer `key`, if the entity has one running.
    pub fn timer(&self, key: &str) -> Option<Duration> {
        self.timers.get(key).map(|t| t.delay)
    }

    /// The keys of the timers running, in order.
    pub fn timer_keys(&self) -> impl Iterator<Item = &str> {
        self.timers.keys().map(|k| &**k)
    }

    /// The receive timeout, if one is set.
    pub fn receive_timeout(&self) -> Option<Duration> {
        self.receive_timeout.as_ref().map(|t| t.delay)
    }

    /// Fires the timer `key` now, as the node would after its delay: delivers its command
    /// (a single timer is then gone; a repeating one keeps running).
    pub async fn fire_timer(&mut self, key: &str) -> Result<CommandResult<'_, B>, TestKitError> {
        let cmd = match self.timers.remove(key) {
            None => return Err(TestKitError::NoTimer(key.to_string())),
            Some(Timer {
                command: TimerCommand::Once(cmd),
                ..
            }) => cmd,
            Some(timer) => {
                let TimerCommand::Repeat(make) = &timer.command else {
                    unreachable!("a single timer was matched above")
                };
                let cmd = make();
                self.timers.insert(key.into(), timer);
                cmd
            }
        };
        self.run(cmd).await
    }

    /// Fires the receive timeout now, as the node would after that long without a command.
    pub async fn fire_receive_timeout(&mut self) -> Result<CommandResult<'_, B>, TestKitError> {
        let cmd = match &self.receive_timeout {
            Some(Timer {
                command: TimerCommand::Repeat(make),
                ..
            }) => make(),
            _ => return Err(TestKitError::NoTimer("receive timeout".to_string())),
        };
        self.run(cmd).await
    }

    /// The commands the entity sent itself ([`EntityContext::tell_self`]) and that have not
    /// been taken yet, in order; run them with [`run`](Self::run) to go on as a node would.
    pub fn take_told_self(&mut self) -> Vec<B::Command> {
        std::mem::take(&mut self.told_self)
    }

    /// Runs one command as the kind's task does: through the codec, into the entity's
    /// `try_handle` with a context of its own, then the context's requests applied.
    async fn handle(&mut self, cmd: B::Command) -> Result<(Vec<B::Event>, bool), TestKitError> {
        let cmd = if self.check_commands {
            let codec = &*self.kind.codec;
            round_trip(|| -> Result<B::Command, TestKitError> {
                let bytes = codec.encode(&cmd).map_err(codec_error("command"))?;
                codec.decode(&bytes).map_err(codec_error("command"))
            })?
        } else {
            cmd
        };
        let mut ctx = EntityContext::<EventSourced<B>>::detached(&self.entity_id);
        let handled = self.entity.try_handle(cmd, &mut ctx).await;
        let events = self.entity.witnessed(&self.entity_id);
        if let Err(failure) = handled {
            return Err(self.failed(failure));
        }
        let events = events.map_err(|error| TestKitError::Codec {
            what: "event",
            error,
        })?;
        if let Some(state) = self.entity.state_round_trip() {
            state.map_err(|error| TestKitError::Codec {
                what: "state",
                error,
            })?;
        }
        let passivated = ctx.passivate;
        self.apply_requests(std::mem::take(&mut ctx.requests));
        if passivated {
            self.end_incarnation();
        }
        Ok((events, passivated))
    }

    /// Keeps what the handler asked of its context, as the node's timers would.
    fn apply_requests(&mut self, requests: Vec<ContextRequest<B::Command>>) {
        for request in requests {
            match request {
                ContextRequest::TellSelf(cmd) => self.told_self.push(cmd),
                ContextRequest::StartTimer {
                    key,
                    command,
                    delay,
                } => {
                    self.timers.insert(key, Timer { delay, command });
                }
                ContextRequest::CancelTimer(key) => {
                    self.timers.remove(&key);
                }
                ContextRequest::CancelAllTimers => self.timers.clear(),
                ContextRequest::ReceiveTimeout(timeout) => {
                    self.receive_timeout = timeout.map(|(delay, make)| Timer {
                        delay,
                        command: TimerCommand::Repeat(make),
                    });
                }
            }
        }
    }

    /// Ends the incarnation after a failure, as a node does, and says why.
    fn failed(&mut self, failure: EntityFailure) -> TestKitError {
        self.end_incarnation();
        TestKitError::Failed(failure)
    }

    /// Drops the entity with its timers; the next command recovers a new incarnation.
    fn end_incarnation(&mut self) {
        self.entity = (self.kind.factory)(&self.entity_id);
        self.timers.clear();
        self.receive_timeout = None;
        self.told_self.clear();
    }
}

/// `value` encoded and decoded again with `codec`.
fn through_codec<T: Serialize + DeserializeOwned>(
    codec: &impl Codec,
    value: &T,
    what: &'static str,
) -> Result<T, TestKitError> {
    let bytes = codec.encode(value).map_err(codec_error(what))?;
    codec.decode(&bytes).map_err(codec_error(what))
}

fn codec_error(what: &'static str) -> impl Fn(CodecError) -> TestKitError {
    move |e| TestKitError::Codec {
        what,
        error: e.to_string(),
    }
}

impl<B: EventSourcedEntity, C: Codec> std::fmt::Debug for EventSourcedTestKit<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSourcedTestKit")
            .field("entity_id", &self.entity_id)
            .field("last_seq", &self.entity.last_seq())
            .field("timers", &self.timers.len())
            .finish_non_exhaustive()
    }
}
