//! One kind's handlers spread over its lanes, one per worker thread, once they take long enough
//! to be worth it (issue 44): each sender's commands still reach each entity in the order it
//! sent them, and a handler that blocks through `EntityContext::blocking` holds up no other
//! entity.
//!
//! One node on loopback, on a runtime of two worker threads (so two lanes). Every wait is
//! bounded by an ask timeout, never a sleep: what is asserted is what was answered.

#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use common::{counter, free_port, metrics, wait_up};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shardik_runtime::metrics as m;
use shardik_runtime::sharding::{Entity, EntityContext, EntityKind, EntityTypeKey, ReplyTo};

const ASK: Duration = Duration::from_secs(10);

/// Burns `work` of CPU on this thread: a handler worth sending to a lane.
fn burn(work: Duration) {
    let start = Instant::now();
    while start.elapsed() < work {
        std::hint::spin_loop();
    }
}

#[derive(Serialize, Deserialize)]
enum Cmd {
    /// The `seq`-th command of `sender` to this entity.
    Seq { sender: u32, seq: u64 },
    /// Answers the last sequence number seen from each sender.
    Seen(ReplyTo<BTreeMap<u32, u64>>),
    /// Answers `n` after a little work.
    Echo(u64, ReplyTo<u64>),
    /// Blocks on the test's gate through `EntityContext::blocking`, then answers.
    Block(ReplyTo<()>),
}

/// Commands out of order, as `entity: what`.
type Violations = Arc<Mutex<Vec<String>>>;

struct Burner {
    id: String,
    last: BTreeMap<u32, u64>,
    violations: Violations,
    /// Opened by the test: what a blocked handler waits on.
    gate: Arc<Mutex<mpsc::Receiver<()>>>,
}

impl Entity for Burner {
    type Command = Cmd;

    async fn handle(&mut self, cmd: Cmd, ctx: &mut EntityContext<Self>) {
        match cmd {
            Cmd::Seq { sender, seq } => {
                burn(Duration::from_micros(10));
                let last = self.last.entry(sender).or_default();
                if seq != *last + 1 {
                    self.violations.lock().unwrap().push(format!(
                        "{}: sender {sender} sent {seq} after {last}",
                        self.id
                    ));
                }
                *last = seq;
            }
            Cmd::Seen(reply_to) => reply_to.send(self.last.clone()),
            Cmd::Echo(n, reply_to) => {
                burn(Duration::from_micros(10));
                reply_to.send(n);
            }
            Cmd::Block(reply_to) => {
                let gate = Arc::clone(&self.gate);
                // A closed gate (the test ended) ends the wait too.
                let _ = ctx.blocking(move || gate.lock().unwrap().recv()).await;
                reply_to.send(());
            }
        }
    }
}

/// One kind per test: the lane counter is the process's, and the tests run side by side.
const ORDERED: EntityTypeKey<Burner> = EntityTypeKey::new("burner-ordered");
const BLOCKING: EntityTypeKey<Burner> = EntityTypeKey::new("burner-blocking");
const ONE_LANE: EntityTypeKey<Burner> = EntityTypeKey::new("burner-one-lane");

/// One node with `kind` (on `lanes` lanes, when given); the log of order violations, and the
/// gate's opener.
async fn burner_node(
    kind: EntityTypeKey<Burner>,
    lanes: Option<usize>,
) -> (
    shardik_runtime::node::RunningNode,
    shardik_runtime::sharding::EntityRegion<Burner>,
    Violations,
    mpsc::Sender<()>,
) {
    let port = free_port();
    let (running, sharding) = common::start_sharding_node("lanes-test", port, port, &[]).await;
    wait_up(&[&running], 1).await;
    let violations: Violations = Arc::default();
    let (open, gate) = mpsc::channel();
    let gate = Arc::new(Mutex::new(gate));
    let for_factory = Arc::clone(&violations);
    let mut kind = EntityKind::for_key(kind, move |id| Burner {
        id: id.to_string(),
        last: BTreeMap::new(),
        violations: Arc::clone(&for_factory),
        gate: Arc::clone(&gate),
    });
    if let Some(lanes) = lanes {
        kind = kind.with_handler_lanes(lanes);
    }
    let region = sharding.init(kind).expect("kind registers");
    (running, region, violations, open)
}

/// Handlers run on the lanes of `kind` so far.
fn lane_handlers(kind: EntityTypeKey<Burner>) -> f64 {
    counter(
        &metrics(),
        m::SHARDING_LANE_HANDLERS_TOTAL,
        &format!("kind=\"{}\"", kind.name()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_senders_order_to_each_entity_holds_with_handlers_spread_over_lanes() {
    let _ = metrics();
    let (_node, region, violations, _open) = burner_node(ORDERED, None).await;
    const SENDERS: u32 = 4;
    const ENTITIES: usize = 40;
    const EACH: u64 = 200;
    let mut senders = Vec::new();
    for sender in 0..SENDERS {
        let region = region.clone();
        senders.push(tokio::spawn(async move {
            let refs: Vec<_> = (0..ENTITIES)
                .map(|e| region.entity_ref(&format!("e{e}")))
                .collect();
            for seq in 1..=EACH {
                for r in &refs {
                    r.tell(Cmd::Seq { sender, seq }).await.expect("told");
                }
            }
            // Asked after its own tells: each entity has seen all of them by then.
            let mut seen = Vec::new();
            for r in &refs {
                seen.push(r.ask(Cmd::Seen, ASK).await.expect("answered"));
            }
            (sender, seen)
        }));
    }
    for s in senders {
        let (sender, seen) = s.await.expect("sender task");
        for (e, last) in seen.iter().enumerate() {
            assert_eq!(
                last.get(&sender),
                Some(&EACH),
                "e{e} saw {last:?} when sender {sender} asked"
            );
        }
    }
    let violations = violations.lock().unwrap().clone();
    assert!(violations.is_empty(), "{violations:#?}");
    // The handlers took 10 µs each: most ran on the lanes, not in the kind's task.
    let on_lanes = lane_handlers(ORDERED);
    assert!(
        on_lanes > (SENDERS as u64 * EACH * ENTITIES as u64 / 2) as f64,
        "only {on_lanes} handlers ran on lanes"
    );
}

/// Twenty rounds of asks to 40 entities, each answered after 10 µs of work: enough for a
/// kind's handlers to go to its lanes, if it has any.
async fn echo_rounds(region: &shardik_runtime::sharding::EntityRegion<Burner>) {
    for round in 0..20u64 {
        for e in 0..40 {
            let n = round * 100 + e;
            let r = region.entity_ref(&format!("e{e}"));
            assert_eq!(r.ask(|to| Cmd::Echo(n, to), ASK).await, Ok(n));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_blocking_through_its_context_holds_up_no_other_entity() {
    let _ = metrics();
    let (_node, region, _violations, open) = burner_node(BLOCKING, None).await;
    echo_rounds(&region).await;
    assert!(
        lane_handlers(BLOCKING) > 0.0,
        "the handlers never went to the lanes"
    );
    let blocked = region.entity_ref("blocked");
    let waiting = tokio::spawn(async move { blocked.ask(Cmd::Block, ASK * 3).await });
    // While it blocks (the gate opens only below), every other entity answers, on every lane.
    for e in 0..40u64 {
        let r = region.entity_ref(&format!("e{e}"));
        assert_eq!(
            r.ask(|to| Cmd::Echo(e, to), ASK).await,
            Ok(e),
            "e{e} was held up by the blocked handler"
        );
    }
    assert!(!waiting.is_finished(), "the blocked handler did not wait");
    open.send(()).expect("the gate");
    assert_eq!(waiting.await.expect("asker task"), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_given_one_lane_runs_every_handler_in_its_own_task() {
    let _ = metrics();
    let (_node, region, _violations, _open) = burner_node(ONE_LANE, Some(1)).await;
    // The same work that goes to the lanes in the test above.
    echo_rounds(&region).await;
    assert_eq!(
        lane_handlers(ONE_LANE),
        0.0,
        "a kind given one lane sent handlers to lanes"
    );
}
