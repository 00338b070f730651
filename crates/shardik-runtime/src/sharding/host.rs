//! The entities of one kind on one node: created on their first command, run one command at a
//! time each, stopped on passivation or hand-off.
//!
//! An idle entity is its value in a map plus a few words of bookkeeping: no task, no mailbox.
//! A command to an idle entity moves the value into a future that runs the handler (polled by
//! the kind's task, concurrently with other entities' futures) and back when it completes;
//! commands arriving meanwhile wait in a queue that exists only while the entity is busy.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use futures_util::stream::FuturesUnordered;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{EntityId, ShardId};
use shardik_passivation::{PassivationStrategy, ResolvedStrategy, Strategy};
use shardik_persistence::Fence;

use super::api::{ContextRequest, Entity};
use super::remember::RememberWriter;
use super::restarts::RestartSchedule;
use super::timers::Timers;

use super::id_map::IdMap;

mod handlers;
mod table;
#[cfg(test)]
mod tests;

pub(crate) use handlers::Running;
use handlers::{Args, Handlers};
use table::{Found, Homed, Table};

/// Where a command's reply goes.
pub(crate) enum Asker<R> {
    /// Nowhere (a tell).
    None,
    /// A local asker.
    Local(tokio::sync::oneshot::Sender<Result<R, super::api::ShardingError>>),
    /// An asker on another node. Boxed: every command carries an `Asker`, and the local ones
    /// (the many) should not pay for moving the remote one's five words around.
    Remote(Box<RemoteAsker>),
}

/// Who asked from another node.
pub(crate) struct RemoteAsker {
    pub node: UniqueAddress,
    pub ask_id: std::num::NonZeroU64,
}

/// A command waiting for or being handled by its entity.
pub(crate) struct Job<E: Entity> {
    pub cmd: E::Command,
    pub reply: Asker<E::Reply>,
    /// Sent by the entity to itself (a message to self, a timer, the receive timeout). As in
    /// the reference, where these go straight to the actor and not through its shard, they do
    /// not count as use for passivation: an entity kept busy only by its own timers is still
    /// passivated when idle.
    pub from_context: bool,
}

enum Item<E: Entity> {
    Job(Job<E>),
    /// Stop after what is ahead in the queue (stop message first, if the kind has one).
    Stop,
}

/// One entity: every idle entity pays for this record, so it is kept to four words for a
/// one-word entity (its shard and the stop flag share what would otherwise be padding).
struct Slot<E: Entity> {
    /// The value while idle; `None` while a future holds it.
    entity: Option<E>,
    /// Waiting work; allocated only when something waits. Boxed so that an idle entity
    /// pays one pointer for it, not an empty deque's three words.
    #[allow(clippy::box_collection)]
    queue: Option<Box<VecDeque<Item<E>>>>,
    /// Seconds (of the host's clock) when the entity last finished a command, in the low 31
    /// bits (68 years); the top bit is set while a stop is queued or running (so idle scans
    /// and further stops do nothing).
    used_and_stopping: u32,
    /// Its shard's index in the [`Table`].
    shard: u32,
}

/// The top bit of [`Slot::used_and_stopping`].
const STOPPING: u32 = 1 << 31;

impl<E: Entity> Slot<E> {
    /// A new idle entity, last used at `now_s`.
    fn idle(entity: E, now_s: u32) -> Self {
        Slot {
            entity: Some(entity),
            queue: None,
            used_and_stopping: now_s & !STOPPING,
            // Set by the table when it adds the slot.
            shard: u32::MAX,
        }
    }

    fn last_used(&self) -> u32 {
        self.used_and_stopping & !STOPPING
    }

    fn set_last_used(&mut self, now_s: u32) {
        self.used_and_stopping = (self.used_and_stopping & STOPPING) | (now_s & !STOPPING);
    }

    fn stopping(&self) -> bool {
        self.used_and_stopping & STOPPING != 0
    }

    fn set_stopping(&mut self, stopping: bool) {
        if stopping {
            self.used_and_stopping |= STOPPING;
        } else {
            self.used_and_stopping &= !STOPPING;
        }
    }
}

impl<E: Entity> Homed for Slot<E> {
    fn shard(&self) -> u32 {
        self.shard
    }

    fn set_shard(&mut self, at: u32) {
        self.shard = at;
    }
}

/// What a finished future hands back.
pub(crate) struct Completed<E: Entity> {
    shard: ShardId,
    id: EntityId,
    entity: Option<E>,
    reply: Asker<E::Reply>,
    outcome: Result<Option<E::Reply>, String>,
    passivate: bool,
    was_stop: bool,
    /// The command came from the entity's own context (see [`Job::from_context`]).
    from_context: bool,
    /// What the handler asked of the runtime through its context, in order.
    requests: Vec<ContextRequest<E::Command>>,
    /// The incarnation ended because the store could not record it as started: it may not be
    /// remembered, so it is not restarted on a timer.
    unrecorded: bool,
}

/// What the host asks its owner to do after a step.
pub(crate) enum HostOutput<E: Entity> {
    /// Send this reply.
    Reply(Asker<E::Reply>, Result<E::Reply, String>),
    /// Every entity of the shard has stopped (after a hand-off request).
    ShardEmpty(ShardId),
}

/// A command the host did not take: it named shard `shard`, but its entity lives here in
/// another shard. The kind's shard extractor decides an entity's shard from its id, so this
/// only happens when nodes disagree about it (every node must use the same extractor); one
/// entity id is one entity on a node, and the command is answered with this error rather than
/// starting a second copy of it.
pub(crate) struct Refused<R> {
    /// The entity the command was for.
    pub entity: EntityId,
    /// Who waits for the command's reply.
    pub reply: Asker<R>,
    /// What went wrong, for the asker and the log.
    pub why: String,
}

impl<R> Refused<R> {
    fn new<E: Entity<Reply = R>>(
        job: Job<E>,
        shard: ShardId,
        entity: EntityId,
        home: ShardId,
    ) -> Self {
        Refused {
            entity,
            reply: job.reply,
            why: format!(
                "the command named shard {shard}, but its entity runs in shard {home} here (do all nodes use the same shard extractor?)"
            ),
        }
    }
}

/// The entities of one kind on one node.
pub(crate) struct EntityHost<E: Entity> {
    node: UniqueAddress,
    factory: Arc<dyn Fn(&str) -> E + Send + Sync>,
    stop_message: Option<Arc<dyn Fn() -> E::Command + Send + Sync>>,
    /// Automatic passivation by a limit-based strategy, one instance per shard, its
    /// per-region limit split over the active shards as in the reference.
    passivation: Option<ResolvedStrategy>,
    passivate_buf: Vec<EntityId>,
    /// The entities, by id, and their shards (with a limit-based passivation strategy, one per
    /// shard; the idle timeout alone is a scan over the slots' last use, which costs 4 bytes
    /// per entity instead of a recency list).
    table: Table<Slot<E>>,
    /// Shards whose entities are being stopped for a hand-off.
    draining: IdMap<()>,
    /// The handlers that run (or just finished and wait for their completion).
    handlers: Handlers<E>,
    active: usize,
    queued: usize,
    /// The entities' timers and receive timeouts (empty while none is set).
    timers: Timers<E::Command>,
    /// Where started and passivated entities are recorded, when the kind remembers them.
    remember: Option<RememberWriter>,
    /// How long after a failure a remembered entity is started again (`None`: never, the kind
    /// does not remember its entities).
    restart_backoff: Option<std::time::Duration>,
    /// Failed remembered entities waiting for their restart.
    restarts: RestartSchedule,
    /// Shards whose remembered set is being loaded, with the entities passivated since the
    /// load began: the load may have read them before their passivation was recorded, and
    /// must not start them again.
    loading: HashMap<ShardId, HashSet<EntityId>>,
    /// The fences of shards that run under a lease (`use-lease`): every handler of the
    /// shard's entities gets it in its context, and durable entities' writes carry it. Empty
    /// without leases.
    fences: HashMap<ShardId, Fence>,
}

impl<E: Entity> EntityHost<E> {
    pub fn new(
        node: UniqueAddress,
        factory: Arc<dyn Fn(&str) -> E + Send + Sync>,
        stop_message: Option<Arc<dyn Fn() -> E::Command + Send + Sync>>,
    ) -> Self {
        EntityHost {
            node,
            factory,
            stop_message,
            passivation: None,
            passivate_buf: Vec::new(),
            table: Table::default(),
            draining: IdMap::default(),
            handlers: Handlers::default(),
            active: 0,
            queued: 0,
            timers: Timers::default(),
            remember: None,
            restart_backoff: None,
            restarts: RestartSchedule::default(),
            loading: HashMap::new(),
            fences: HashMap::new(),
        }
    }

    /// Records started and passivated entities with `writer` (remember-entities). Must be set
    /// before the first delivery.
    pub fn set_remember(&mut self, writer: RememberWriter) {
        self.remember = Some(writer);
    }

    /// Starts failed remembered entities again `backoff` after their failure (Akka's
    /// `entity-restart-backoff`). Set for kinds that remember their entities.
    pub fn set_restart_backoff(&mut self, backoff: std::time::Duration) {
        self.restart_backoff = Some(backoff);
    }

    /// When the next failed entity is due to start again (nanoseconds of the owner's clock).
    pub fn next_restart(&self) -> Option<u64> {
        self.restarts.next_due()
    }

    /// Starts the failed entities due by `now_ns` whose shard still runs here (`runs_here`);
    /// an entity that runs again already (a message started it) was taken off the schedule
    /// then. Returns how many started.
    pub fn restart_due(&mut self, now_ns: u64, runs_here: impl Fn(&ShardId) -> bool) -> usize {
        let now_s = (now_ns / 1_000_000_000) as u32;
        let mut started = 0;
        while let Some((shard, id)) = self.restarts.pop_due(now_ns) {
            if !runs_here(&shard) || self.draining.contains_key(&shard) {
                continue;
            }
            let n = self.start_remembered(&shard, std::slice::from_ref(&id), now_s);
            if n > 0 {
                tracing::info!(entity = %id, %shard, "failed remembered entity started again after entity-restart-backoff");
            }
            started += n;
        }
        started
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
        shard: &ShardId,
        ids: &[EntityId],
        last: bool,
        now_s: u32,
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
        self.start_remembered(shard, &ids, now_s)
    }

    /// Makes room for `shard`'s entities (with its own passivation strategy) if it has none yet.
    fn ensure_shard(&mut self, shard: &ShardId) {
        let passivation = &self.passivation;
        if self.table.ensure_shard(shard, || {
            passivation.as_ref().map(|p| p.build::<EntityId>())
        }) {
            self.shards_changed();
        }
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

    /// Starts the remembered entities `ids` of `shard` that do not run yet, idle, without a
    /// command (they are already remembered: nothing is written). Returns how many started.
    pub fn start_remembered(&mut self, shard: &ShardId, ids: &[EntityId], now_s: u32) -> usize {
        self.ensure_shard(shard);
        let mut started = 0;
        for id in ids {
            // One that runs already (even in another shard, by a message that named one) is
            // left as it is.
            if !self.table.contains(id) {
                self.restarts.cancel(shard, id);
                let factory = &self.factory;
                self.table
                    .insert_with(shard, id, || Slot::idle(factory(id), now_s));
                started += 1;
            }
        }
        self.active += started;
        started
    }

    /// Passivates automatically with `strategy` (limit-based or composite; a plain idle timeout
    /// is better served by the idle scan). Must be set before the first delivery.
    pub fn set_passivation(&mut self, strategy: ResolvedStrategy) {
        self.passivation = match strategy {
            ResolvedStrategy::Disabled => None,
            other => Some(other),
        };
    }

    /// How often the strategies want [`interval_passed`](Self::interval_passed) (idle checks).
    pub fn passivation_interval(&self) -> Option<std::time::Duration> {
        self.table
            .shards()
            .find_map(|s| s.strategy.as_ref().and_then(|st| st.scheduled_interval()))
    }

    /// Runs the strategies' periodic idle checks.
    pub fn interval_passed(&mut self, now_ms: u64) {
        self.ask_strategies(|st, out| st.interval_passed(now_ms, out));
    }

    /// A shard appeared or disappeared: every strategy's per-shard limit changes.
    fn shards_changed(&mut self) {
        if self.passivation.is_none() {
            return;
        }
        let active = self.table.shard_count().max(1);
        self.ask_strategies(|st, out| st.shards_updated(active, out));
    }

    /// Runs `f` on every shard's strategy and stops the entities it names.
    fn ask_strategies(&mut self, mut f: impl FnMut(&mut Strategy<EntityId>, &mut Vec<EntityId>)) {
        for shard in self.table.shard_ids() {
            let mut out = std::mem::take(&mut self.passivate_buf);
            if let Some(st) = self
                .table
                .shard_mut(&shard)
                .and_then(|s| s.strategy.as_mut())
            {
                f(st, &mut out);
            }
            for id in out.drain(..) {
                self.stop_entity(&shard, &id);
            }
            self.passivate_buf = out;
        }
    }

    /// The id `text` as a shared string: the host's own copy when the entity lives here (no
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

    /// Entity ids per shard.
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

    /// Live entities per shard that has any.
    pub fn entity_counts(&self) -> Vec<(ShardId, usize)> {
        let mut v: Vec<(ShardId, usize)> = self
            .table
            .shards()
            .map(|s| (s.id.clone(), self.table.shard_len(&s.id)))
            .collect();
        v.sort();
        v
    }

    /// Delivers `job` to entity `id` of `shard`, creating the entity if needed. `now_ns` is
    /// the owner's clock. A command that names another shard than the one its entity lives in
    /// here is refused (see [`Refused`]).
    ///
    /// The ids are taken by value: the handler's context gets them without touching their
    /// reference counts (which the sender's thread touches too).
    pub fn deliver(
        &mut self,
        shard_id: ShardId,
        entity_id: EntityId,
        job: Job<E>,
        now_ns: u64,
    ) -> Result<(), Refused<E::Reply>> {
        let (shard, id) = (&shard_id, &entity_id);
        let now_s = (now_ns / 1_000_000_000) as u32;
        // The common case, with one lookup: an entity that exists, and no strategy to tell.
        // Its handler usually finishes when it starts, and is then completed here, while the
        // slot is at hand.
        if self.passivation.is_none() {
            let fence = self.fence_of(shard);
            let slot = match self.table.find(shard, id) {
                Found::Here(slot) => Some(slot),
                Found::Elsewhere(home) => return Err(Refused::new(job, shard_id, entity_id, home)),
                Found::Absent => None,
            };
            if let Some(slot) = slot {
                let Some(entity) = slot.entity.take() else {
                    slot.queue
                        .get_or_insert_with(Default::default)
                        .push_back(Item::Job(job));
                    self.queued += 1;
                    return Ok(());
                };
                let args = Args {
                    node: self.node.clone(),
                    fence,
                    shard: shard_id,
                    id: entity_id,
                    entity,
                    job,
                    was_stop: false,
                };
                if let Some(done) = self.handlers.start(args) {
                    match finish_at_once(slot, done, now_s) {
                        AtOnce::Finished { shard, id } => self.timers.activity(&shard, &id, now_ns),
                        AtOnce::Left(done) => self.handlers.finished.push_back(done),
                    }
                }
                return Ok(());
            }
        } else if let Found::Elsewhere(home) = self.table.find(shard, id) {
            return Err(Refused::new(job, shard_id, entity_id, home));
        }
        self.ensure_shard(shard);
        // The strategy may name the touched entity itself (an admission filter refusing a
        // newcomer, say): it still gets this command, and stops right after it.
        let mut stop_after_delivery = false;
        if self.passivation.is_some() {
            let now_ms = now_ns / 1_000_000;
            let mut out = std::mem::take(&mut self.passivate_buf);
            if let Some(st) = self
                .table
                .shard_mut(shard)
                .and_then(|s| s.strategy.as_mut())
            {
                st.entity_touched(id, now_ms, &mut out);
            }
            for victim in out.drain(..) {
                if victim == *id {
                    stop_after_delivery = true;
                } else {
                    self.stop_entity(shard, &victim);
                }
            }
            self.passivate_buf = out;
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
        }
        let start = start_or_queue(slot, job);
        match (created, &self.remember, start) {
            // A new incarnation of a remembering kind: its first command waits until the
            // store records it as started.
            (true, Some(writer), Some((entity, job))) => {
                let args = Args {
                    node: self.node.clone(),
                    fence: self.fence_of(shard),
                    shard: shard.clone(),
                    id: id.clone(),
                    entity,
                    job,
                    was_stop: false,
                };
                let fut = handlers::run_remembered(args, writer.clone());
                self.handlers.start_boxed(fut);
            }
            (_, _, start) => self.started_or_queued(shard, id, start),
        }
        if stop_after_delivery {
            self.stop_entity(shard, id);
        }
        Ok(())
    }

    /// Forgets a removed entity: the commands still waiting for it are answered with `why`.
    fn drop_slot(&mut self, slot: Slot<E>, why: &str, out: &mut Vec<HostOutput<E>>) {
        self.active -= 1;
        for item in slot.queue.into_iter().flat_map(|q| q.into_iter()) {
            if let Item::Job(job) = item {
                self.queued -= 1;
                out.push(HostOutput::Reply(job.reply, Err(why.to_string())));
            }
        }
    }

    /// Runs the handler [`start_or_queue`] took the entity for, or counts the queued job.
    fn started_or_queued(&mut self, shard: &ShardId, id: &EntityId, start: Option<(E, Job<E>)>) {
        match start {
            Some((entity, job)) => {
                let args = Args {
                    node: self.node.clone(),
                    fence: self.fence_of(shard),
                    shard: shard.clone(),
                    id: id.clone(),
                    entity,
                    job,
                    was_stop: false,
                };
                self.start(args);
            }
            None => self.queued += 1,
        }
    }

    /// Starts a handler. Most finish without waiting: one that finishes costs no place in the
    /// running set and no turn of the kind task's loop; it waits for
    /// [`completed`](Self::completed) in `finished`.
    fn start(&mut self, args: Args<E>) {
        if let Some(done) = self.handlers.start(args) {
            self.handlers.finished.push_back(done);
        }
    }

    /// A handler that finished when it started; the owner hands it to
    /// [`completed`](Self::completed) before waiting for anything else.
    pub fn next_finished(&mut self) -> Option<Completed<E>> {
        self.handlers.finished.pop_front()
    }

    /// Whether a handler finished when it started and waits for [`completed`](Self::completed).
    pub fn has_finished(&self) -> bool {
        !self.handlers.finished.is_empty()
    }

    /// Queues a stop of `id` behind its waiting commands. True if a stop was queued.
    fn stop_entity(&mut self, shard: &ShardId, id: &EntityId) -> bool {
        let Some(slot) = self.table.get_mut(shard, id) else {
            return false;
        };
        if slot.stopping() {
            return false;
        }
        slot.set_stopping(true);
        // Passivation, hand-off or stop: the incarnation's timers end here, so none of them
        // can deliver to (and so re-create) the entity after it stopped.
        self.timers.cancel_entity(shard, id);
        slot.queue
            .get_or_insert_with(Default::default)
            .push_back(Item::Stop);
        if slot.entity.is_some() {
            self.advance(shard.clone(), id.clone());
        }
        true
    }

    /// Stops every entity of `shard` (stop message first). When none is left,
    /// [`HostOutput::ShardEmpty`] is returned (at once if the shard has none).
    pub fn stop_shard(&mut self, shard: &ShardId, out: &mut Vec<HostOutput<E>>) {
        self.draining.insert(shard.clone(), ());
        // Handed off: the shard's next home starts its remembered entities.
        self.restarts.cancel_shard(shard);
        for id in self.table.members(shard) {
            self.stop_entity(shard, &id);
        }
        self.check_empty(shard, out);
    }

    /// Drops every entity of `shard` now. Running handlers finish, but their entities are not
    /// kept; waiting commands are answered with an error.
    pub fn force_stop_shard(&mut self, shard: &ShardId, out: &mut Vec<HostOutput<E>>) {
        self.draining.remove(shard);
        self.timers.cancel_shard(shard);
        self.restarts.cancel_shard(shard);
        if !self.table.has_shard(shard) {
            return;
        }
        for id in self.table.members(shard) {
            if let Some(slot) = self.table.remove(shard, &id) {
                self.drop_slot(slot, "the shard was stopped before this command ran", out);
            }
        }
        self.table.remove_shard(shard);
        self.shards_changed();
    }

    fn check_empty(&mut self, shard: &ShardId, out: &mut Vec<HostOutput<E>>) {
        if self.table.shard_len(shard) == 0 {
            if self.table.remove_shard(shard) {
                self.shards_changed();
            }
            if self.draining.remove(shard).is_some() {
                out.push(HostOutput::ShardEmpty(shard.clone()));
                if self.draining.is_empty() {
                    // The hand-offs are over: idle entities no longer pay for member lists.
                    self.table.forget_members();
                }
            }
        }
    }

    /// Passivates entities idle since before `cutoff_s`. Returns how many.
    pub fn passivate_idle(&mut self, cutoff_s: u32) -> usize {
        let mut idle = Vec::new();
        for (shard, id, slot) in self.table.iter() {
            if slot.entity.is_some() && !slot.stopping() && slot.last_used() < cutoff_s {
                idle.push((shard.clone(), id.clone()));
            }
        }
        let n = idle.len();
        for (shard, id) in idle {
            self.stop_entity(&shard, &id);
        }
        n
    }

    /// Whether any handler is running.
    pub fn has_running(&self) -> bool {
        !self.handlers.running.is_empty()
    }

    /// The running handlers, to poll for completions.
    pub fn running_mut(&mut self) -> &mut FuturesUnordered<Running<E>> {
        &mut self.handlers.running
    }

    /// Takes a finished handler back: the entity is idle again (or stopped), its next waiting
    /// item starts, and the reply is handed out.
    pub fn completed(&mut self, done: Completed<E>, now_ns: u64, out: &mut Vec<HostOutput<E>>) {
        let now_s = (now_ns / 1_000_000_000) as u32;
        let Completed {
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
        let answered = !matches!(reply, Asker::None);
        match outcome {
            Ok(Some(r)) if answered => out.push(HostOutput::Reply(reply, Ok(r))),
            Ok(_) => {}
            Err(why) => {
                tracing::error!(entity = %id, shard = %shard, %why, "entity failed; this incarnation is dropped");
                metrics::counter!(crate::metrics::ENTITY_FAILURES_TOTAL).increment(1);
                if answered {
                    out.push(HostOutput::Reply(reply, Err(why)));
                }
            }
        }
        let Some(slot) = self.table.get_mut(&shard, &id) else {
            // Force-stopped meanwhile: the entity is not kept.
            self.timers.cancel_entity(&shard, &id);
            return;
        };
        if !from_context {
            slot.set_last_used(now_s);
        }
        match entity {
            Some(e) if !was_stop => {
                slot.entity = Some(e);
                // A stopping entity's requests are dropped: its timers are already cancelled
                // and what it tells itself would reach a stopped incarnation.
                if !slot.stopping() {
                    for request in requests {
                        if let Some(cmd) = self.timers.apply(&shard, &id, request, now_ns) {
                            slot.queue
                                .get_or_insert_with(Default::default)
                                .push_back(Item::Job(Job {
                                    cmd,
                                    reply: Asker::None,
                                    from_context: true,
                                }));
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
                // A passivation (not a hand-off, not a failure) ends the entity's remembered
                // life; a handed-off or failed entity stays remembered.
                if was_stop && !self.draining.contains_key(&shard) {
                    if let Some(writer) = &self.remember {
                        writer.stopped(&shard, &id);
                        if let Some(passivated) = self.loading.get_mut(&shard) {
                            passivated.insert(id.clone());
                        }
                    }
                }
                slot.set_stopping(false);
                let waiting = slot.queue.as_ref().is_some_and(|q| !q.is_empty());
                if waiting && !self.draining.contains_key(&shard) {
                    slot.entity = Some((self.factory)(&id));
                } else {
                    // A remembered entity that failed (not one that was stopping: that was a
                    // passivation or a hand-off) is started again after the back-off, unless
                    // its shard is being handed off.
                    if let Some(backoff) = self.restart_backoff {
                        if failed && !was_stop && !unrecorded && !self.draining.contains_key(&shard)
                        {
                            let due = now_ns.saturating_add(backoff.as_nanos() as u64);
                            self.restarts.schedule(&shard, &id, due);
                        }
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
                    self.check_empty(&shard, out);
                    return;
                }
            }
        }
        // Most commands find their entity idle and leave nothing queued: then there is no
        // need to look the slot up again in `advance`.
        let nothing_waits = slot.queue.is_none();
        if passivate {
            self.stop_entity(&shard, &id);
            return;
        }
        if !nothing_waits {
            self.advance(shard, id);
        }
    }

    /// When the next timer or receive timeout is due (nanoseconds of the owner's clock).
    pub fn next_timer(&self) -> Option<u64> {
        self.timers.next_due()
    }

    /// Delivers the commands of the timers due by `now_ns` to their entities. A timer never
    /// creates an entity: one whose entity is gone or stopping is dropped.
    pub fn fire_timers(&mut self, now_ns: u64) {
        while let Some((shard, id, cmd)) = self.timers.pop_due(now_ns) {
            let Some(slot) = self.table.get_mut(&shard, &id) else {
                self.timers.cancel_entity(&shard, &id);
                continue;
            };
            if slot.stopping() {
                continue;
            }
            let job = Job {
                cmd,
                reply: Asker::None,
                from_context: true,
            };
            let start = start_or_queue(slot, job);
            self.started_or_queued(&shard, &id, start);
        }
    }

    /// Starts the next waiting item of an idle entity.
    fn advance(&mut self, shard: ShardId, id: EntityId) {
        let Some(slot) = self.table.get_mut(&shard, &id) else {
            return;
        };
        let Some(queue) = slot.queue.as_mut() else {
            return;
        };
        let Some(item) = queue.pop_front() else {
            slot.queue = None;
            return;
        };
        if queue.is_empty() {
            slot.queue = None;
        }
        let Some(entity) = slot.entity.take() else {
            return;
        };
        let (job, was_stop) = match item {
            Item::Job(job) => {
                self.queued -= 1;
                (job, false)
            }
            Item::Stop => match &self.stop_message {
                Some(make) => {
                    let job = Job {
                        cmd: make(),
                        reply: Asker::None,
                        from_context: false,
                    };
                    (job, true)
                }
                None => {
                    // No stop message: the stop completes at once.
                    let done = Completed {
                        shard,
                        id,
                        entity: None,
                        reply: Asker::None,
                        outcome: Ok(None),
                        passivate: false,
                        was_stop: true,
                        requests: Vec::new(),
                        from_context: false,
                        unrecorded: false,
                    };
                    self.handlers.finished.push_back(done);
                    return;
                }
            },
        };
        let fence = self.fence_of(&shard);
        self.start(Args {
            node: self.node.clone(),
            fence,
            shard,
            id,
            entity,
            job,
            was_stop,
        });
    }
}

/// Completes, in its slot, a handler that finished when it started and asks for nothing
/// beyond handing the entity back: a tell or a local ask, answered, no requests through its
/// context, no passivation, no failure, nothing queued behind it. That is almost every
/// command, and it then costs neither a second lookup of the slot nor a move of the
/// [`Completed`] through the finished queue. Anything else is handed back for
/// [`EntityHost::completed`]. The caller tells the timers about the activity.
fn finish_at_once<E: Entity>(slot: &mut Slot<E>, done: Completed<E>, now_s: u32) -> AtOnce<E> {
    let plain = done.entity.is_some()
        && !done.was_stop
        && !done.passivate
        && done.requests.is_empty()
        && !slot.stopping()
        && slot.queue.is_none()
        && matches!(done.reply, Asker::None | Asker::Local(_))
        && matches!(done.outcome, Ok(Some(_)));
    if !plain {
        return AtOnce::Left(done);
    }
    let Completed {
        shard,
        id,
        entity,
        reply,
        outcome,
        from_context,
        ..
    } = done;
    slot.entity = entity;
    if !from_context {
        slot.set_last_used(now_s);
    }
    if let Asker::Local(tx) = reply {
        if let Ok(Some(r)) = outcome {
            // The asker may have given up waiting; nothing is owed to it then.
            let _ = tx.send(Ok(r));
        }
    }
    AtOnce::Finished { shard, id }
}

/// What [`finish_at_once`] made of a handler that finished when it started.
enum AtOnce<E: Entity> {
    /// Completed in its slot; the ids come back for the timers' activity record.
    Finished { shard: ShardId, id: EntityId },
    /// Needs [`EntityHost::completed`].
    Left(Completed<E>),
}

/// Takes an idle entity out of its slot to handle `job`, or queues `job` behind the command
/// the entity is busy with (`None`). Split from the host's methods so that the caller can do
/// it while it holds the slot it looked up.
fn start_or_queue<E: Entity>(slot: &mut Slot<E>, job: Job<E>) -> Option<(E, Job<E>)> {
    match slot.entity.take() {
        Some(entity) => Some((entity, job)),
        None => {
            slot.queue
                .get_or_insert_with(Default::default)
                .push_back(Item::Job(job));
            None
        }
    }
}
