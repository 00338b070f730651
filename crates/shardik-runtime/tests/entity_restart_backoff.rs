//! `entity-restart-backoff` on a real node: a remembered entity whose incarnation ends by a
//! failure (an `Err` from its handler, or a panic) is started again by its shard after the
//! back-off, with no message sent to it; a passivated one, or one of a kind that does not
//! remember its entities, is not; and one that a message starts again before the back-off is
//! not started a second time (not even after it passivated).

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik_persistence::{MemoryStore, Store};
use shardik_runtime::sharding::{
    Entity, EntityContext, EntityFailure, EntityKind, EntityRecovery, EntityRegion, ReplyTo,
    Sharding, ShardingError,
};
use tokio::time::Instant;

use common::{free_port, start_sharding_node_with, wait_up};

const ASK: Duration = Duration::from_secs(10);
/// The back-off of these tests: short, but long enough to see an entity not running before it.
const BACKOFF: Duration = Duration::from_secs(2);
const REMEMBERING: &str = "restart-remembering";
const FORGETFUL: &str = "restart-forgetful";

#[derive(Debug, Serialize, Deserialize)]
enum Cmd {
    /// Answers which incarnation of the entity this is (1 for the first).
    Incarnation(ReplyTo<u64>),
    /// The handler fails: this incarnation is dropped.
    Fail(ReplyTo<u64>),
    /// The handler panics: this incarnation is dropped too.
    Panic(ReplyTo<u64>),
    /// Answers, then passivates.
    Stop(ReplyTo<u64>),
}

/// A command of [`Cmd`] without its `ReplyTo`, as `ask` takes it.
type MakeCmd = fn(ReplyTo<u64>) -> Cmd;

/// How many incarnations of each entity the kind's factory has made.
type Incarnations = Arc<Mutex<BTreeMap<String, u64>>>;

struct Probe {
    incarnation: u64,
}

impl Entity for Probe {
    type Command = Cmd;

    async fn handle(&mut self, cmd: Cmd, ctx: &mut EntityContext<Self>) {
        if let Err(e) = self.try_handle(cmd, ctx).await {
            panic!("{e}")
        }
    }

    async fn try_handle(
        &mut self,
        cmd: Cmd,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), EntityFailure> {
        match cmd {
            Cmd::Incarnation(reply_to) => reply_to.send(self.incarnation),
            Cmd::Fail(_) => return Err(EntityFailure("asked to fail".into())),
            Cmd::Panic(_) => panic!("asked to panic"),
            Cmd::Stop(reply_to) => {
                ctx.passivate();
                reply_to.send(self.incarnation);
            }
        }
        Ok(())
    }
}

fn kind(name: &str, incarnations: &Incarnations) -> EntityKind<Probe> {
    let incarnations = Arc::clone(incarnations);
    EntityKind::new(name, move |id| {
        let mut made = incarnations.lock().unwrap();
        let n = made.entry(id.to_string()).or_default();
        *n += 1;
        Probe { incarnation: *n }
    })
}

struct Setup {
    _node: shardik_runtime::node::RunningNode,
    sharding: Sharding,
    store: Arc<MemoryStore>,
    incarnations: Incarnations,
    remembering: EntityRegion<Probe>,
    forgetful: EntityRegion<Probe>,
}

/// One node with a back-off of [`BACKOFF`], a kind that remembers its entities and one that
/// does not.
async fn setup() -> Setup {
    let port = free_port();
    let (node, sharding) = start_sharding_node_with("restart-test", port, port, &[], |c| {
        c.entity_restart_backoff = BACKOFF;
    })
    .await;
    wait_up(&[&node], 1).await;
    let store = Arc::new(MemoryStore::new());
    let incarnations = Incarnations::default();
    let remembering = sharding
        .init(
            kind(REMEMBERING, &incarnations)
                .with_remember_entities(store.clone(), EntityRecovery::All),
        )
        .unwrap();
    let forgetful = sharding
        .init(kind(FORGETFUL, &incarnations).with_idle_timeout(None))
        .unwrap();
    Setup {
        _node: node,
        sharding,
        store,
        incarnations,
        remembering,
        forgetful,
    }
}

impl Setup {
    /// Whether entity `id` of `kind` runs on the node (asked of the region, not the entity).
    async fn running(&self, kind: &str, id: &str) -> bool {
        let state = self.sharding.region_state(kind, ASK).await.unwrap();
        state
            .shards
            .iter()
            .any(|(_, ids)| ids.iter().any(|e| &**e == id))
    }

    fn incarnations(&self, id: &str) -> u64 {
        self.incarnations
            .lock()
            .unwrap()
            .get(id)
            .copied()
            .unwrap_or(0)
    }

    /// Whether the store remembers `id` as running.
    async fn remembered(&self, region: &EntityRegion<Probe>, id: &str) -> bool {
        let shard = region.shard_of(id);
        self.store
            .remembered_entities(REMEMBERING, &shard)
            .await
            .unwrap()
            .iter()
            .any(|e| e == id)
    }

    /// Waits (at most 10 s) until entity `id` of the remembering kind runs again.
    async fn wait_running(&self, id: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.running(REMEMBERING, id).await {
            assert!(
                Instant::now() < deadline,
                "{id} was not started again after its failure"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn fails(region: &EntityRegion<Probe>, id: &str, cmd: MakeCmd) {
    match region.entity_ref(id).ask(cmd, ASK).await {
        Err(ShardingError::EntityFailed(_)) => {}
        other => panic!("{id}: expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_remembered_entity_runs_again_after_the_backoff_without_a_message() {
    let s = setup().await;
    let failures: [(&str, MakeCmd); 2] = [("failing", Cmd::Fail), ("panicking", Cmd::Panic)];
    for (id, failure) in failures {
        let entity = s.remembering.entity_ref(id);
        assert_eq!(entity.ask(Cmd::Incarnation, ASK).await.unwrap(), 1);
        let failed_at = Instant::now();
        fails(&s.remembering, id, failure).await;
        // The asker hears of the failure as the host drops the incarnation: wait for the drop.
        // Bounded generously, not by the back-off: a panic's hook may take seconds on a
        // loaded machine (symbolising a backtrace with RUST_BACKTRACE set) before the host
        // catches it, and a restart cannot come before the drop anyway. That the restart
        // waits for the back-off, and makes a new incarnation, is checked below.
        let heard_at = Instant::now();
        while s.running(REMEMBERING, id).await {
            assert!(
                heard_at.elapsed() < ASK,
                "{id}: the failed incarnation is not dropped"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert!(
            s.remembered(&s.remembering, id).await,
            "{id}: still remembered"
        );
        s.wait_running(id).await;
        assert!(
            failed_at.elapsed() >= BACKOFF,
            "{id}: started again after {:?}, before the back-off",
            failed_at.elapsed()
        );
        // Started by the shard alone: a new incarnation, made before anything asked it.
        assert_eq!(s.incarnations(id), 2, "{id}");
        assert_eq!(entity.ask(Cmd::Incarnation, ASK).await.unwrap(), 2, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passivated_forgetful_and_already_restarted_entities_are_not_started_again() {
    let s = setup().await;
    // Passivated: it stopped on purpose and is forgotten.
    let passivated = s.remembering.entity_ref("passivated");
    assert_eq!(passivated.ask(Cmd::Stop, ASK).await.unwrap(), 1);
    // A kind that does not remember its entities: a failure just drops the incarnation.
    let forgetful = s.forgetful.entity_ref("forgetful");
    assert_eq!(forgetful.ask(Cmd::Incarnation, ASK).await.unwrap(), 1);
    fails(&s.forgetful, "forgetful", Cmd::Fail).await;
    // Failed, then started again by its next message before the back-off, which also
    // passivates it: that incarnation was the restart, and its passivation is final.
    let eager = s.remembering.entity_ref("eager");
    assert_eq!(eager.ask(Cmd::Incarnation, ASK).await.unwrap(), 1);
    fails(&s.remembering, "eager", Cmd::Fail).await;
    assert_eq!(eager.ask(Cmd::Stop, ASK).await.unwrap(), 2);
    // A failed entity that the shard restarts, as a witness that the back-off has passed.
    let witness = s.remembering.entity_ref("witness");
    assert_eq!(witness.ask(Cmd::Incarnation, ASK).await.unwrap(), 1);
    fails(&s.remembering, "witness", Cmd::Fail).await;
    s.wait_running("witness").await;
    // And a little longer, for any restart scheduled after the witness's.
    tokio::time::sleep(BACKOFF).await;

    assert!(!s.running(REMEMBERING, "passivated").await);
    assert_eq!(s.incarnations("passivated"), 1);
    assert!(!s.remembered(&s.remembering, "passivated").await);
    assert!(!s.running(FORGETFUL, "forgetful").await);
    assert_eq!(s.incarnations("forgetful"), 1);
    assert!(!s.running(REMEMBERING, "eager").await);
    assert_eq!(s.incarnations("eager"), 2, "no restart after the message's");
    assert!(!s.remembered(&s.remembering, "eager").await);
}
