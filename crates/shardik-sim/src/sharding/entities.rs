//! The simulated entities: the core's entity lifecycle
//! ([`Entities`](shardik_core::sharding::entities::Entities), the very code the runtime's kind
//! task drives) with handlers that are plain functions taking simulated time.
//!
//! A client command is handled in [`EntitySpec::handle_time`] and the kind's stop message in
//! the configuration's `entity_stop_delay`, so that commands queue behind busy entities and
//! stops behind commands. Some commands (chosen by their number, deterministically) fail, or
//! start a timer whose tick must reach the incarnation that set it. Remembered entities are
//! kept in a store shared by every node ([`RememberedStore`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardik_core::Instant;
use shardik_core::sharding::entities::{
    self, ContextRequest, Done, EntitySettings, Run, Runner, TimerCommand,
};
use shardik_core::sharding::{EntityId, ShardId};

use shardik_persistence::{Fence, WriteResult};

use super::durable::DurableJournal;
pub use super::life::{SimAsk, SimCmd, SimEntity, SimLife};
use super::messages::Output;

/// What the simulated entities' handlers do. How the entities live (passivation, remembering,
/// restart back-off) is the node's configuration, as in the runtime
/// ([`ShardingSettings::entity_settings`](shardik_core::node::ShardingSettings::entity_settings)).
#[derive(Clone, Debug, Default)]
pub struct EntitySpec {
    /// How long a client command takes to handle (zero: handled the moment it is delivered).
    pub handle_time: Duration,
    /// Every command whose number is a multiple of this fails (its incarnation ends).
    pub fail_every: Option<u64>,
    /// Every command whose number is a multiple of this starts a one-shot timer of this
    /// entity, which must reach the incarnation that set it.
    pub timer_every: Option<u64>,
}

/// The lifecycle of one kind's simulated entities on one node.
pub type SimEntities = entities::Entities<SimLife>;
/// What that lifecycle asks for.
pub type SimOutput = entities::Output<SimLife>;

/// Makes a kind's lifecycle living by `settings`; incarnations are numbered by `counter`,
/// shared over the run.
pub fn new_entities(
    settings: &EntitySettings,
    counter: Arc<AtomicU64>,
    now: Instant,
) -> SimEntities {
    let factory = Arc::new(move |_: &str| SimEntity {
        incarnation: counter.fetch_add(1, Ordering::Relaxed),
        journal: None,
        state: Vec::new(),
        marks: None,
    });
    let stop = Arc::new(|| SimCmd::Stop);
    SimEntities::new(settings, factory, Some(stop), now)
}

/// What a handler did that the world checks.
pub enum Handled {
    /// A client command was handled by `entity`.
    Command {
        /// The command's number.
        msg: u64,
        /// Its entity.
        entity: EntityId,
    },
    /// A timer reached another incarnation than the one that set it.
    StrayTick {
        /// The entity.
        entity: EntityId,
        /// Who set the timer.
        set_by: u64,
        /// Who got it.
        got: u64,
    },
    /// A remembered entity was recorded as started.
    Remembered {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
}

/// Runs one kind's handlers: at once when they take no time, else held until they are due.
pub struct SimHandlers {
    spec: EntitySpec,
    stop_time: Duration,
    /// The time handlers run at (set by the node before each call into the lifecycle).
    pub now: Instant,
    /// Handlers running, by when they finish (and a number that keeps equal instants apart).
    held: BTreeMap<(Instant, u64), Run<SimLife>>,
    next: u64,
    /// What the handlers did, for the node to report.
    pub handled: Vec<Handled>,
    /// A durable kind's journal: its client commands persist before they are answered.
    durable: Option<DurableJournal>,
    /// What the durable handlers asked of the world (writes, snapshots, acknowledgements).
    pub durable_out: Vec<Output>,
}

impl SimHandlers {
    /// Handlers as `spec` says; the stop message takes `stop_time`. With `durable`, client
    /// commands persist through it and finish when the store answers.
    pub(crate) fn new(
        spec: &EntitySpec,
        stop_time: Duration,
        durable: Option<DurableJournal>,
        now: Instant,
    ) -> Self {
        SimHandlers {
            spec: spec.clone(),
            stop_time,
            now,
            held: BTreeMap::new(),
            next: 0,
            handled: Vec::new(),
            durable,
            durable_out: Vec::new(),
        }
    }

    /// The writes of `shard`'s durable entities carry `fence` from now on.
    pub(crate) fn set_fence(&mut self, shard: &ShardId, fence: Option<Fence>) {
        if let Some(d) = self.durable.as_mut() {
            d.set_fence(shard, fence);
        }
    }

    /// The store answered write `token`: the handler that sent it, if it still counts.
    pub(crate) fn write_done(&mut self, token: u64, result: WriteResult) -> Option<Done<SimLife>> {
        let d = self.durable.as_mut()?;
        d.write_done(token, result, &mut self.durable_out)
    }

    /// `shard`'s entities were force-stopped: their writes no longer complete a handler.
    pub(crate) fn orphan_shard(&mut self, shard: &ShardId) {
        if let Some(d) = self.durable.as_mut() {
            d.orphan_shard(shard);
        }
    }

    /// When the next held handler finishes.
    pub fn next_due(&self) -> Option<Instant> {
        self.held.keys().next().map(|&(at, _)| at)
    }

    /// Finishes the next handler due by `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Done<SimLife>> {
        let (&key, _) = self.held.first_key_value()?;
        if key.0 > now {
            return None;
        }
        let run = self.held.remove(&key).expect("first key");
        Some(self.handle(run))
    }

    /// Drops every running handler (the node died): the client commands they held.
    pub fn kill(&mut self) -> Vec<u64> {
        let mut lost: Vec<u64> = std::mem::take(&mut self.held)
            .into_values()
            .filter_map(|run| match run.job.cmd {
                SimCmd::Client(msg) => Some(msg.id),
                _ => None,
            })
            .collect();
        if let Some(d) = self.durable.as_mut() {
            lost.extend(d.kill());
        }
        self.durable_out.clear();
        lost
    }

    fn handle(&mut self, run: Run<SimLife>) -> Done<SimLife> {
        let Run {
            shard,
            id,
            entity,
            job,
            was_stop,
            record_first,
        } = run;
        if record_first {
            self.handled.push(Handled::Remembered {
                shard: shard.clone(),
                entity: id.clone(),
            });
        }
        let mut requests = Vec::new();
        let outcome = match job.cmd {
            SimCmd::Client(msg) => {
                self.handled.push(Handled::Command {
                    msg: msg.id,
                    entity: id.clone(),
                });
                if self.spec.fail_every.is_some_and(|n| msg.id % n == 0) {
                    Err(format!("command {} told to fail", msg.id))
                } else {
                    if self.spec.timer_every.is_some_and(|n| msg.id % n == 0) {
                        requests.push(ContextRequest::StartTimer {
                            key: "tick".into(),
                            command: TimerCommand::Once(SimCmd::Tick {
                                incarnation: entity.incarnation,
                            }),
                            delay: Duration::from_millis(30),
                        });
                    }
                    Ok(Some(msg.id))
                }
            }
            SimCmd::Tick { incarnation } => {
                if incarnation != entity.incarnation {
                    self.handled.push(Handled::StrayTick {
                        entity: id.clone(),
                        set_by: incarnation,
                        got: entity.incarnation,
                    });
                }
                Ok(Some(0))
            }
            SimCmd::Stop => Ok(None),
        };
        Done {
            shard,
            id,
            entity: outcome.is_ok().then_some(entity),
            reply: job.reply,
            outcome,
            passivate: false,
            was_stop,
            from_context: job.from_context,
            requests,
            unrecorded: false,
        }
    }
}

impl Runner<SimLife> for SimHandlers {
    fn run(&mut self, run: Run<SimLife>) -> Option<Done<SimLife>> {
        if let (Some(journal), SimCmd::Client(msg)) = (self.durable.as_mut(), &run.job.cmd) {
            let msg = msg.clone();
            if run.record_first {
                self.handled.push(Handled::Remembered {
                    shard: run.shard.clone(),
                    entity: run.id.clone(),
                });
            }
            self.handled.push(Handled::Command {
                msg: msg.id,
                entity: run.id.clone(),
            });
            return journal.start(run, msg, self.now, &mut self.durable_out);
        }
        let takes = match run.job.cmd {
            SimCmd::Client(_) => self.spec.handle_time,
            SimCmd::Tick { .. } => Duration::ZERO,
            SimCmd::Stop => self.stop_time,
        };
        if takes.is_zero() {
            return Some(self.handle(run));
        }
        self.next += 1;
        self.held.insert((self.now + takes, self.next), run);
        None
    }
}

/// The remembered entities of every kind and shard, shared by all nodes (the runtime keeps
/// them in the store every node uses).
#[derive(Clone, Default)]
pub struct RememberedStore(Arc<Mutex<Remembered>>);

/// Remembered entities by kind and shard.
type Remembered = BTreeMap<(usize, ShardId), BTreeSet<EntityId>>;

impl RememberedStore {
    fn with<T>(&self, f: impl FnOnce(&mut Remembered) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records entity `id` of `kind` and `shard` as started.
    pub fn add(&self, kind: usize, shard: &ShardId, id: &EntityId) {
        self.with(|m| {
            m.entry((kind, shard.clone()))
                .or_default()
                .insert(id.clone())
        });
    }

    /// Forgets entity `id` (it was passivated).
    pub fn remove(&self, kind: usize, shard: &ShardId, id: &EntityId) {
        self.with(|m| {
            if let Some(set) = m.get_mut(&(kind, shard.clone())) {
                set.remove(id);
            }
        });
    }

    /// The remembered entities of `kind`'s `shard`.
    pub fn entities(&self, kind: usize, shard: &ShardId) -> Vec<EntityId> {
        self.with(|m| {
            m.get(&(kind, shard.clone()))
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default()
        })
    }

    /// The shards of `kind` with remembered entities.
    pub fn shards(&self, kind: usize) -> Vec<ShardId> {
        self.with(|m| {
            m.iter()
                .filter(|((k, _), set)| *k == kind && !set.is_empty())
                .map(|((_, s), _)| s.clone())
                .collect()
        })
    }
}
