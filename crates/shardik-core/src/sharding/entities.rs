//! The entities of one kind on one node (the reference's Shard, for every shard of the kind at
//! once): created on their first command, one command at a time each with a queue behind it,
//! stopped behind what is queued on passivation or hand-off, started from the remembered set,
//! restarted after a failure, woken by their own timers. One clock, one
//! [`poll_timeout`](Entities::poll_timeout).
//!
//! No I/O: the lifecycle decides, and its driver runs handlers (a [`Runner`]) and carries out
//! the [`Output`]s. The runtime's kind task polls handler futures; the simulator calls plain
//! functions and holds some back to model handlers that await. Both run this code.
//!
//! An idle entity is its value in a map plus a few words of bookkeeping: no task, no mailbox.
//! A command to an idle entity moves the value into the handler the runner runs and back when
//! it completes; commands arriving meanwhile wait in a queue that exists only while the entity
//! is busy.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use shardik_passivation::{IdleCheck, PassivationStrategy, ResolvedStrategy, Strategy};

use super::id_map::IdMap;
use super::{EntityId, ShardId};
use crate::Instant;

mod restarts;
mod slot;
mod table;
#[cfg(test)]
mod tests;
mod timers;
mod types;

use restarts::RestartSchedule;
use slot::{AtOnce, Item, Slot, finish_at_once, start_or_queue};
use table::{Found, Table};
use timers::Timers;
pub use types::{
    Asker, CommandMaker, ContextRequest, Done, Job, Lifecycle, Output, Run, Runner, TimerCommand,
};

/// How one kind's entities live, from the sharding settings.
#[derive(Clone, Debug)]
pub struct EntitySettings {
    /// Automatic passivation (`passivation.*`). Ignored when entities are remembered: as in
    /// the reference, remembered entities stop only when they ask to.
    pub passivation: ResolvedStrategy,
    /// Started and passivated entities are recorded, and a shard starts its remembered set
    /// (`remember-entities`).
    pub remember: bool,
    /// How long after a failure a remembered entity is started again
    /// (`entity-restart-backoff`).
    pub restart_backoff: Duration,
}

impl Default for EntitySettings {
    fn default() -> Self {
        EntitySettings {
            passivation: ResolvedStrategy::Disabled,
            remember: false,
            restart_backoff: Duration::from_secs(10),
        }
    }
}

/// How often to look for idle entities: the configured interval, but not more often than every
/// 100 ms (last-use times are kept in whole seconds anyway).
fn idle_scan_interval(check: IdleCheck) -> Duration {
    Duration::from_millis(check.interval_ms).max(MIN_TICK)
}

/// The shortest interval of the periodic passivation work.
const MIN_TICK: Duration = Duration::from_millis(100);

/// Whole seconds of `now`, the resolution of an entity's last use.
fn secs(now: Instant) -> u32 {
    (now.as_nanos() / 1_000_000_000) as u32
}

/// Makes an entity's initial value from its id.
pub type Factory<V> = Arc<dyn Fn(&str) -> V + Send + Sync>;
/// Makes the kind's stop message.
pub type StopMessage<C> = Arc<dyn Fn() -> C + Send + Sync>;

/// The entities of one kind on one node.
pub struct Entities<L: Lifecycle> {
    factory: Factory<L::Entity>,
    stop_message: Option<StopMessage<L::Command>>,
    /// Automatic passivation by a limit-based strategy, one instance per shard, its
    /// per-region limit split over the active shards as in the reference.
    passivation: Option<ResolvedStrategy>,
    passivate_buf: Vec<EntityId>,
    /// Passivation of idle entities by a periodic scan of their last use (the plain idle
    /// strategy: 4 bytes per entity instead of a recency list).
    idle: Option<IdleCheck>,
    next_idle_scan: Option<Instant>,
    /// When the limit strategies' periodic idle check is next due.
    next_strategy_tick: Option<Instant>,
    /// The entities, by id, and their shards (with a limit-based passivation strategy each).
    table: Table<Slot<L>>,
    /// Shards whose entities are being stopped for a hand-off.
    draining: IdMap<()>,
    /// Handlers that finished when they started but need the full completion.
    finished: VecDeque<Done<L>>,
    active: usize,
    queued: usize,
    /// The entities' timers and receive timeouts (empty while none is set).
    timers: Timers<L::Command>,
    /// Whether started and passivated entities are recorded.
    remember: bool,
    /// How long after a failure a remembered entity is started again.
    restart_backoff: Option<Duration>,
    /// Failed remembered entities waiting for their restart.
    restarts: RestartSchedule,
    /// Shards whose remembered set is being loaded, with the entities passivated since the
    /// load began: the load may have read them before their passivation was recorded, and
    /// must not start them again.
    loading: HashMap<ShardId, HashSet<EntityId>>,
}

impl<L: Lifecycle> Entities<L> {
    /// No entities yet; `now` starts the periodic passivation work.
    pub fn new(
        settings: &EntitySettings,
        factory: Factory<L::Entity>,
        stop_message: Option<StopMessage<L::Command>>,
        now: Instant,
    ) -> Self {
        let passivation = if settings.remember {
            ResolvedStrategy::Disabled
        } else {
            settings.passivation.clone()
        };
        let (idle, limited) = match passivation {
            ResolvedStrategy::Disabled => (None, None),
            ResolvedStrategy::Idle(check) => (Some(check), None),
            limited => (None, Some(limited)),
        };
        Entities {
            factory,
            stop_message,
            passivation: limited,
            passivate_buf: Vec::new(),
            idle,
            next_idle_scan: idle.map(|c| now + idle_scan_interval(c)),
            next_strategy_tick: None,
            table: Table::default(),
            draining: IdMap::default(),
            finished: VecDeque::new(),
            active: 0,
            queued: 0,
            timers: Timers::default(),
            remember: settings.remember,
            restart_backoff: settings.remember.then_some(settings.restart_backoff),
            restarts: RestartSchedule::default(),
            loading: HashMap::new(),
        }
    }

    // ---- Time ----

    /// When [`handle_timeout`](Self::handle_timeout) is next due: an entity timer or receive
    /// timeout, a restart after back-off, or the periodic passivation work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.timers.next_due().map(Instant::from_nanos),
            self.restarts.next_due().map(Instant::from_nanos),
            self.next_idle_scan,
            self.next_strategy_tick,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Does what is due by `now`: fires entity timers (their commands run like any other), starts
    /// failed remembered entities whose back-off passed if their shard still runs here
    /// (`runs_here`), and passivates idle entities.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        runs_here: impl Fn(&ShardId) -> bool,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) {
        let now_ns = now.as_nanos();
        while let Some((shard, id, cmd)) = self.timers.pop_due(now_ns) {
            // A timer never creates an entity: one whose entity is gone or stopping is dropped.
            let Some(slot) = self.table.get_mut(&shard, &id) else {
                self.timers.cancel_entity(&shard, &id);
                continue;
            };
            if slot.stopping() {
                continue;
            }
            let start = start_or_queue(slot, Job::from_context(cmd));
            self.started_or_queued(&shard, &id, start, runner);
        }
        while let Some((shard, id)) = self.restarts.pop_due(now_ns) {
            if !runs_here(&shard) || self.draining.contains_key(&shard) {
                continue;
            }
            if self.start_remembered(now, &shard, std::slice::from_ref(&id), runner, out) > 0 {
                out.push(Output::Restarted { shard, id });
            }
        }
        if self.next_strategy_tick.is_some_and(|t| t <= now) {
            self.next_strategy_tick = None;
            let now_ms = now.as_millis();
            self.ask_strategies(|st, victims| st.interval_passed(now_ms, victims), runner);
        }
        self.schedule_strategy_tick(now);
        if let (Some(at), Some(idle)) = (self.next_idle_scan, self.idle)
            && at <= now
        {
            let timeout = Duration::from_millis(idle.timeout_ms);
            let cutoff = secs(now).saturating_sub(timeout.as_secs() as u32);
            self.passivate_idle(cutoff, runner);
            self.next_idle_scan = Some(now + idle_scan_interval(idle));
        }
        self.drain_finished(now, runner, out);
    }

    /// Plans the limit strategies' next periodic check, if they want one and none is planned.
    fn schedule_strategy_tick(&mut self, now: Instant) {
        if self.next_strategy_tick.is_none() {
            self.next_strategy_tick = self
                .table
                .shards()
                .find_map(|s| s.strategy.as_ref().and_then(|st| st.scheduled_interval()))
                .map(|d| now + d.max(MIN_TICK));
        }
    }

    // ---- Commands ----

    /// Delivers `job` to entity `id` of `shard`, creating the entity if needed. A command that
    /// names another shard than the one its entity lives in here is refused
    /// ([`Output::Refused`]): one entity id is one entity on a node.
    ///
    /// The ids are taken by value: the handler gets them without touching their reference
    /// counts (which the sender's thread touches too).
    pub fn deliver(
        &mut self,
        now: Instant,
        shard_id: ShardId,
        entity_id: EntityId,
        job: Job<L>,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) {
        let (shard, id) = (&shard_id, &entity_id);
        let now_s = secs(now);
        // The common case, with one lookup: an entity that exists, and no strategy to tell.
        // Its handler usually finishes when it starts, and is then completed here, while the
        // slot is at hand.
        if self.passivation.is_none() {
            let slot = match self.table.find(shard, id) {
                Found::Here(slot) => Some(slot),
                Found::Elsewhere(home) => {
                    return out.push(refused(job, shard_id, entity_id, home));
                }
                Found::Absent => None,
            };
            if let Some(slot) = slot {
                let Some(entity) = slot.entity.take() else {
                    slot.push(Item::Job(job));
                    self.queued += 1;
                    return;
                };
                let run = Run {
                    shard: shard_id,
                    id: entity_id,
                    entity,
                    job,
                    was_stop: false,
                    record_first: false,
                };
                if let Some(done) = runner.run(run) {
                    match finish_at_once(slot, done, now_s, out) {
                        AtOnce::Finished { shard, id } => {
                            self.timers.activity(&shard, &id, now.as_nanos())
                        }
                        AtOnce::Left(done) => self.finished.push_back(done),
                    }
                }
                return self.drain_finished(now, runner, out);
            }
        } else if let Found::Elsewhere(home) = self.table.find(shard, id) {
            return out.push(refused(job, shard_id, entity_id, home));
        }
        self.ensure_shard(now, shard, runner);
        // The strategy may name the touched entity itself (an admission filter refusing a
        // newcomer, say): it still gets this command, and stops right after it.
        let mut stop_after_delivery = false;
        if self.passivation.is_some() {
            let now_ms = now.as_millis();
            let mut victims = std::mem::take(&mut self.passivate_buf);
            if let Some(st) = self
                .table
                .shard_mut(shard)
                .and_then(|s| s.strategy.as_mut())
            {
                st.entity_touched(id, now_ms, &mut victims);
            }
            for victim in victims.drain(..) {
                if victim == *id {
                    stop_after_delivery = true;
                } else {
                    self.stop_entity(shard, &victim, runner);
                }
            }
            self.passivate_buf = victims;
        }
        if !self.table.contains(id) {
            // A failed remembered entity that a message starts again needs no restart.
            self.restarts.cancel(shard, id);
            if self.draining.is_empty() {
                // No hand-off is under way that needs the shards' member lists.
                self.table.forget_members();
            }
        }
        let factory = &self.factory;
        let (slot, created) = self
            .table
            .insert_with(shard, id, || Slot::idle(factory(id), now_s));
        if created {
            self.active += 1;
            out.push(Output::Started {
                shard: shard.clone(),
                id: id.clone(),
            });
        }
        let start = start_or_queue(slot, job);
        match (created && self.remember, start) {
            // A new incarnation of a remembering kind: its first command waits until the
            // store records it as started.
            (true, Some((entity, job))) => {
                let run = Run {
                    shard: shard.clone(),
                    id: id.clone(),
                    entity,
                    job,
                    was_stop: false,
                    record_first: true,
                };
                if let Some(done) = runner.run(run) {
                    self.finished.push_back(done);
                }
            }
            (_, start) => self.started_or_queued(shard, id, start, runner),
        }
        if stop_after_delivery {
            self.stop_entity(shard, id, runner);
        }
        self.drain_finished(now, runner, out);
    }

    /// Takes a finished handler back: the entity is idle again (or stopped), its next waiting
    /// item starts, and the reply is handed out.
    pub fn completed(
        &mut self,
        now: Instant,
        done: Done<L>,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) {
        self.complete(now, done, runner, out);
        self.drain_finished(now, runner, out);
    }

    /// Completes the handlers that finished when they started (completing one may start the
    /// next command of its entity, which may finish at once too).
    fn drain_finished(
        &mut self,
        now: Instant,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) {
        while let Some(done) = self.finished.pop_front() {
            self.complete(now, done, runner, out);
        }
    }

    fn complete(
        &mut self,
        now: Instant,
        done: Done<L>,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) {
        let now_ns = now.as_nanos();
        let Done {
            shard,
            id,
            entity,
            reply,
            outcome,
            passivate,
            was_stop,
            requests,
            from_context,
            unrecorded,
        } = done;
        let failed = outcome.is_err();
        // A tell's reply goes nowhere: it is not handed out at all.
        let answered = reply.waits();
        match outcome {
            Ok(Some(r)) if answered => out.push(Output::Reply(reply, Ok(r))),
            Ok(_) => {}
            Err(why) => {
                if answered {
                    out.push(Output::Reply(reply, Err(why.clone())));
                }
                out.push(Output::Failed {
                    shard: shard.clone(),
                    id: id.clone(),
                    why,
                });
            }
        }
        let Some(slot) = self.table.get_mut(&shard, &id) else {
            // Force-stopped meanwhile: the entity is not kept.
            self.timers.cancel_entity(&shard, &id);
            return;
        };
        if !from_context {
            slot.set_last_used(secs(now));
        }
        match entity {
            Some(e) if !was_stop => {
                // The handler held the entity: the slot had none meanwhile.
                debug_assert!(
                    slot.entity.is_none(),
                    "entity {id} handed back to a live slot"
                );
                slot.entity = Some(e);
                // A stopping entity's requests are dropped: its timers are already cancelled
                // and what it tells itself would reach a stopped incarnation.
                if !slot.stopping() {
                    for request in requests {
                        if let Some(cmd) = self.timers.apply(&shard, &id, request, now_ns) {
                            slot.push(Item::Job(Job::from_context(cmd)));
                            self.queued += 1;
                        }
                    }
                    self.timers.activity(&shard, &id, now_ns);
                }
            }
            _ => {
                // Stopped (stop message handled) or failed: drop this incarnation (and its
                // timers). What waits goes to a new one.
                self.timers.cancel_entity(&shard, &id);
                let handing_off = self.draining.contains_key(&shard);
                // A passivation (not a hand-off, not a failure) ends the entity's remembered
                // life; a handed-off or failed entity stays remembered.
                if was_stop && !handing_off && self.remember {
                    out.push(Output::Forget {
                        shard: shard.clone(),
                        id: id.clone(),
                    });
                    if let Some(passivated) = self.loading.get_mut(&shard) {
                        passivated.insert(id.clone());
                    }
                }
                // What the ended incarnation sent itself is not for its successor (found by
                // the lifecycle sweep: a timer queued behind a failing command reached the
                // entity's next incarnation).
                self.queued -= slot.drop_own_commands();
                // A failure right before a queued stop ends the incarnation as the stop would
                // have: the stop is done.
                let stop_done = !was_stop && slot.pop_stop();
                // A stop still queued further back (behind commands sent before it) keeps the
                // entity stopping: those commands run first, in a new incarnation, even during
                // a hand-off (found by the lifecycle sweep: a remembered entity that failed
                // while handing off answered the commands queued before its stop with an
                // error).
                let stop_pending = slot.has_stop();
                slot.set_stopping(stop_pending);
                out.push(Output::Stopped {
                    shard: shard.clone(),
                    id: id.clone(),
                });
                if slot.next_is_command() && (stop_pending || !handing_off) {
                    // One incarnation at a time: the one that ended held the entity.
                    debug_assert!(
                        slot.entity.is_none(),
                        "entity {id} started while one is live"
                    );
                    slot.entity = Some((self.factory)(&id));
                    out.push(Output::Started {
                        shard: shard.clone(),
                        id: id.clone(),
                    });
                } else {
                    // A remembered entity that failed (not one that was stopping: that was a
                    // passivation or a hand-off) is started again after the back-off, unless
                    // its shard is being handed off.
                    if let Some(backoff) = self.restart_backoff
                        && failed
                        && !was_stop
                        && !stop_done
                        && !unrecorded
                        && !handing_off
                    {
                        let due = now_ns.saturating_add(backoff.as_nanos() as u64);
                        self.restarts.schedule(&shard, &id, due);
                    }
                    if let Some(st) = self
                        .table
                        .shard_mut(&shard)
                        .and_then(|s| s.strategy.as_mut())
                    {
                        st.entity_terminated(&id);
                    }
                    let slot = self.table.remove(&shard, &id).expect("slot present");
                    self.drop_slot(slot, "the entity stopped before this command ran", out);
                    self.check_empty(&shard, runner, out);
                    return;
                }
            }
        }
        // Most commands find their entity idle and leave nothing queued: then there is no
        // need to look the slot up again in `advance`.
        let nothing_waits = !slot.has_queue();
        if passivate {
            self.stop_entity(&shard, &id, runner);
            return;
        }
        if !nothing_waits {
            self.advance(shard, id, runner);
        }
    }

    // ---- Shards ----

    /// Stops every entity of `shard` behind what each has queued (stop message first, if the
    /// kind has one). When none is left, [`Output::ShardEmpty`] is returned (at once if the
    /// shard has none).
    pub fn stop_shard(
        &mut self,
        now: Instant,
        shard: &ShardId,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) {
        self.draining.insert(shard.clone(), ());
        // Handed off: the shard's next home starts its remembered entities.
        self.restarts.cancel_shard(shard);
        for id in self.table.members(shard) {
            self.stop_entity(shard, &id, runner);
        }
        self.drain_finished(now, runner, out);
        self.check_empty(shard, runner, out);
    }

    /// Drops every entity of `shard` now. Running handlers finish, but their entities are not
    /// kept; waiting commands are answered with an error.
    pub fn force_stop_shard(
        &mut self,
        now: Instant,
        shard: &ShardId,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) {
        self.draining.remove(shard);
        self.timers.cancel_shard(shard);
        self.restarts.cancel_shard(shard);
        self.loading.remove(shard);
        if !self.table.has_shard(shard) {
            return;
        }
        for id in self.table.members(shard) {
            if let Some(slot) = self.table.remove(shard, &id) {
                out.push(Output::Stopped {
                    shard: shard.clone(),
                    id: id.clone(),
                });
                self.drop_slot(slot, "the shard was stopped before this command ran", out);
            }
        }
        self.table.remove_shard(shard);
        self.shards_changed(runner);
        self.drain_finished(now, runner, out);
    }

    /// The remembered set of `shard` is being loaded (its shard started here).
    pub fn load_started(&mut self, shard: &ShardId) {
        self.loading.insert(shard.clone(), HashSet::new());
    }

    /// The load of `shard`'s remembered set is over.
    pub fn load_ended(&mut self, shard: &ShardId) {
        self.loading.remove(shard);
    }

    /// Starts a step of `shard`'s loaded remembered set ([`start_remembered`]), except the
    /// entities passivated since the load began; `last` ends the load. Returns how many
    /// started.
    ///
    /// [`start_remembered`]: Self::start_remembered
    pub fn start_loaded(
        &mut self,
        now: Instant,
        shard: &ShardId,
        ids: &[EntityId],
        last: bool,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) -> usize {
        let ids: Vec<EntityId> = match self.loading.get(shard) {
            Some(passivated) if !passivated.is_empty() => ids
                .iter()
                .filter(|id| !passivated.contains(*id))
                .cloned()
                .collect(),
            _ => ids.to_vec(),
        };
        if last {
            self.load_ended(shard);
        }
        self.start_remembered(now, shard, &ids, runner, out)
    }

    /// Starts the remembered entities `ids` of `shard` that do not run yet, idle, without a
    /// command (they are already remembered: nothing is written). Returns how many started.
    pub fn start_remembered(
        &mut self,
        now: Instant,
        shard: &ShardId,
        ids: &[EntityId],
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) -> usize {
        self.ensure_shard(now, shard, runner);
        let now_s = secs(now);
        let mut started = 0;
        for id in ids {
            // One that runs already (even in another shard, by a message that named one) is
            // left as it is.
            if !self.table.contains(id) {
                self.restarts.cancel(shard, id);
                let factory = &self.factory;
                self.table
                    .insert_with(shard, id, || Slot::idle(factory(id), now_s));
                out.push(Output::Started {
                    shard: shard.clone(),
                    id: id.clone(),
                });
                started += 1;
            }
        }
        self.active += started;
        self.drain_finished(now, runner, out);
        started
    }

    /// Makes room for `shard`'s entities (with its own passivation strategy) if it has none yet.
    fn ensure_shard(&mut self, now: Instant, shard: &ShardId, runner: &mut impl Runner<L>) {
        let passivation = &self.passivation;
        if self.table.ensure_shard(shard, || {
            passivation.as_ref().map(|p| p.build::<EntityId>())
        }) {
            self.shards_changed(runner);
            self.schedule_strategy_tick(now);
        }
    }

    /// A shard appeared or disappeared: every strategy's per-shard limit changes.
    fn shards_changed(&mut self, runner: &mut impl Runner<L>) {
        if self.passivation.is_none() {
            return;
        }
        let active = self.table.shard_count().max(1);
        self.ask_strategies(|st, victims| st.shards_updated(active, victims), runner);
    }

    /// Runs `f` on every shard's strategy and stops the entities it names.
    fn ask_strategies(
        &mut self,
        mut f: impl FnMut(&mut Strategy<EntityId>, &mut Vec<EntityId>),
        runner: &mut impl Runner<L>,
    ) {
        for shard in self.table.shard_ids() {
            let mut victims = std::mem::take(&mut self.passivate_buf);
            if let Some(st) = self
                .table
                .shard_mut(&shard)
                .and_then(|s| s.strategy.as_mut())
            {
                f(st, &mut victims);
            }
            for id in victims.drain(..) {
                self.stop_entity(&shard, &id, runner);
            }
            self.passivate_buf = victims;
        }
    }

    fn check_empty(
        &mut self,
        shard: &ShardId,
        runner: &mut impl Runner<L>,
        out: &mut Vec<Output<L>>,
    ) {
        if self.table.shard_len(shard) == 0 {
            if self.table.remove_shard(shard) {
                self.shards_changed(runner);
            }
            if self.draining.remove(shard).is_some() {
                out.push(Output::ShardEmpty(shard.clone()));
                if self.draining.is_empty() {
                    // The hand-offs are over: idle entities no longer pay for member lists.
                    self.table.forget_members();
                }
            }
        }
    }

    // ---- Stopping one entity ----

    /// Queues a stop of `id` behind its waiting commands. True if a stop was queued.
    fn stop_entity(&mut self, shard: &ShardId, id: &EntityId, runner: &mut impl Runner<L>) -> bool {
        let Some(slot) = self.table.get_mut(shard, id) else {
            return false;
        };
        if slot.stopping() {
            // Already stopping (a passivation), with commands queued behind that stop for a
            // new incarnation: this stop (a hand-off's) goes behind them, so that they run
            // before the entity ends (found by the lifecycle sweep: they were answered with an
            // error when the hand-off began during a passivation).
            if slot.last_is_command() {
                slot.push(Item::Stop);
                return true;
            }
            return false;
        }
        slot.set_stopping(true);
        // Passivation, hand-off or stop: the incarnation's timers end here, so none of them
        // can deliver to (and so re-create) the entity after it stopped.
        self.timers.cancel_entity(shard, id);
        slot.push(Item::Stop);
        if slot.entity.is_some() {
            self.advance(shard.clone(), id.clone(), runner);
        }
        true
    }

    /// Passivates entities idle since before `cutoff_s`. Returns how many.
    fn passivate_idle(&mut self, cutoff_s: u32, runner: &mut impl Runner<L>) -> usize {
        let mut idle = Vec::new();
        for (shard, id, slot) in self.table.iter() {
            if slot.entity.is_some() && !slot.stopping() && slot.last_used() < cutoff_s {
                idle.push((shard.clone(), id.clone()));
            }
        }
        let n = idle.len();
        for (shard, id) in idle {
            self.stop_entity(&shard, &id, runner);
        }
        n
    }

    /// Forgets a removed entity: the commands still waiting for it are answered with `why`.
    fn drop_slot(&mut self, slot: Slot<L>, why: &str, out: &mut Vec<Output<L>>) {
        self.active -= 1;
        for job in slot.into_jobs() {
            self.queued -= 1;
            if job.reply.waits() {
                out.push(Output::Reply(job.reply, Err(why.to_string())));
            }
        }
    }

    // ---- Running ----

    /// Runs the handler [`start_or_queue`] took the entity for, or counts the queued job.
    fn started_or_queued(
        &mut self,
        shard: &ShardId,
        id: &EntityId,
        start: Option<(L::Entity, Job<L>)>,
        runner: &mut impl Runner<L>,
    ) {
        match start {
            Some((entity, job)) => {
                let run = Run {
                    shard: shard.clone(),
                    id: id.clone(),
                    entity,
                    job,
                    was_stop: false,
                    record_first: false,
                };
                if let Some(done) = runner.run(run) {
                    self.finished.push_back(done);
                }
            }
            None => self.queued += 1,
        }
    }

    /// Starts the next waiting item of an idle entity.
    fn advance(&mut self, shard: ShardId, id: EntityId, runner: &mut impl Runner<L>) {
        let Some(slot) = self.table.get_mut(&shard, &id) else {
            return;
        };
        // Only an idle entity is advanced: a busy one is advanced when its handler completes.
        debug_assert!(slot.entity.is_some(), "advanced a busy entity");
        if slot.entity.is_none() {
            return;
        }
        let Some(item) = slot.pop() else {
            return;
        };
        let entity = slot.entity.take().expect("checked above");
        let (job, was_stop) = match item {
            Item::Job(job) => {
                self.queued -= 1;
                (job, false)
            }
            Item::Stop => match &self.stop_message {
                Some(make) => (
                    Job {
                        cmd: make(),
                        reply: L::Asker::nobody(),
                        from_context: false,
                    },
                    true,
                ),
                None => {
                    // No stop message: the stop completes at once.
                    drop(entity);
                    self.finished.push_back(Done::stopped(shard, id));
                    return;
                }
            },
        };
        let run = Run {
            shard,
            id,
            entity,
            job,
            was_stop,
            record_first: false,
        };
        if let Some(done) = runner.run(run) {
            self.finished.push_back(done);
        }
    }

    // ---- What is here ----

    /// The id `text` as a shared string: the table's own copy when the entity lives here (no
    /// allocation, the common case for a message from another node), else a new one.
    pub fn entity_id(&self, text: &str) -> EntityId {
        match self.table.id_of(text) {
            Some(id) => EntityId::clone(id),
            None => EntityId::from(text),
        }
    }

    /// Entities alive (idle or busy).
    pub fn active_entities(&self) -> usize {
        self.active
    }

    /// Commands waiting behind busy entities.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Entity ids per shard, in order.
    pub fn entity_ids(&self) -> Vec<(ShardId, Vec<EntityId>)> {
        let mut by_shard: std::collections::BTreeMap<ShardId, Vec<EntityId>> = self
            .table
            .shards()
            .map(|s| (s.id.clone(), Vec::new()))
            .collect();
        for (shard, id, _) in self.table.iter() {
            by_shard.entry(shard.clone()).or_default().push(id.clone());
        }
        by_shard
            .into_iter()
            .map(|(shard, mut ids)| {
                ids.sort();
                (shard, ids)
            })
            .collect()
    }

    /// Live entities per shard that has any, in order.
    pub fn entity_counts(&self) -> Vec<(ShardId, usize)> {
        let mut v: Vec<(ShardId, usize)> = self
            .table
            .shards()
            .map(|s| (s.id.clone(), self.table.shard_len(&s.id)))
            .collect();
        v.sort();
        v
    }

    /// Whether entity `id` lives here (in any shard), busy or idle.
    pub fn contains(&self, id: &EntityId) -> bool {
        self.table.contains(id)
    }
}

/// The answer to a command that named a shard its entity does not live in here.
fn refused<L: Lifecycle>(
    job: Job<L>,
    shard: ShardId,
    entity: EntityId,
    home: ShardId,
) -> Output<L> {
    Output::Refused {
        id: entity,
        reply: job.reply,
        why: format!(
            "the command named shard {shard}, but its entity runs in shard {home} here (do all nodes use the same shard extractor?)"
        ),
    }
}
