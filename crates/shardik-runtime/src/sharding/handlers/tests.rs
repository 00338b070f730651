//! The runner under the core's lifecycle, driven the way the kind task drives them: real
//! entities (async and sync), their futures, replies to local askers, panics. The lifecycle's
//! own rules (queues, stops, passivation, timers, restarts) are tested in the core.

use std::sync::Arc;

use shardik_core::Instant;
use shardik_core::membership::{Address, UniqueAddress};
use shardik_core::sharding::entities::EntitySettings;

use super::*;
use crate::sharding::ReplyTo;
use crate::sharding::api::SyncEntity;
use crate::sharding::api::{EntityContext, ShardingError};
use crate::sharding::messages::AskHandle;

/// A number to add, and where the sum goes.
type Add = (u64, ReplyTo<u64>);

/// Adds what it is told; answers the sum. Told 0, it asks to be passivated.
struct Sum(u64);

impl Entity for Sum {
    type Command = Add;

    async fn handle(&mut self, (n, reply_to): Add, ctx: &mut EntityContext<Self>) {
        if n == 0 {
            ctx.passivate();
        }
        self.0 += n;
        reply_to.send(self.0);
    }
}

/// [`Sum`] as a [`SyncEntity`]; told `u64::MAX`, it panics.
struct SyncSum(u64);

impl SyncEntity for SyncSum {
    type Command = Add;

    fn handle(&mut self, (n, reply_to): Add, ctx: &mut EntityContext<Self>) {
        assert!(n != u64::MAX, "told to fail");
        if n == 0 {
            ctx.passivate();
        }
        self.0 += n;
        reply_to.send(self.0);
    }
}

/// One kind's entities and their handlers, as the kind task holds them.
struct Rig<E: Entity> {
    entities: Entities<E>,
    handlers: Handlers<E>,
    /// What the lifecycle asked for besides replies to local askers (which are sent).
    out: Vec<HostOutput<E>>,
}

fn rig<E: Entity>(make: fn() -> E) -> Rig<E> {
    let node = UniqueAddress::new(Address::new("127.0.0.1", 1), 7);
    Rig {
        entities: Entities::new(
            &EntitySettings::default(),
            Arc::new(move |_| make()),
            None,
            Instant::ZERO,
        ),
        handlers: Handlers::new(node, 0),
        out: Vec::new(),
    }
}

fn id(s: &str) -> Arc<str> {
    Arc::from(s)
}

impl<E: Entity<Command = Add>> Rig<E> {
    /// Delivers `n` as an ask and sends the reports the lifecycle hands out, as the kind task
    /// does; the answer (or the failure reported instead), if it came at once.
    fn ask(&mut self, shard: &str, e: &str, n: u64) -> Option<Result<u64, ShardingError>> {
        // Failures come to `rx` through the host's handle; answers through the ReplyTo.
        let (slot, mut rx) =
            crate::sharding::reply_to::answer_slot::<(), crate::sharding::Postcard>();
        let (reply_to, answer) = ReplyTo::detached();
        let job = Job::new((n, reply_to), Asker::Local(AskHandle::new(slot)));
        let mut out = Vec::new();
        self.entities.deliver(
            Instant::ZERO,
            id(shard),
            id(e),
            job,
            &mut self.handlers,
            &mut out,
        );
        self.send_replies(out);
        match rx.try_recv() {
            Ok(Err(failed)) => Some(Err(failed)),
            _ => answer.take().map(Ok),
        }
    }

    fn send_replies(&mut self, out: Vec<HostOutput<E>>) {
        for o in out {
            match o {
                HostOutput::Reply(Asker::Local(handle), r) => match r {
                    Ok(()) => handle.handled(),
                    Err(why) => handle.fail(ShardingError::EntityFailed(why)),
                },
                HostOutput::Reply(..) => panic!("a reply to a remote asker in a local test"),
                HostOutput::Started { .. } | HostOutput::Stopped { .. } => {}
                other => self.out.push(other),
            }
        }
    }
}

#[test]
fn an_async_entity_that_does_not_await_is_answered_at_once() {
    let mut r = rig(|| Sum(0));
    assert_eq!(r.ask("a", "e", 1).map(|r| r.ok()), Some(Some(1)));
    assert_eq!(r.ask("a", "e", 2).map(|r| r.ok()), Some(Some(3)));
    assert!(!r.handlers.has_running());
    // Its future went into a cell that is kept for the next command.
    assert!(r.handlers.has_spare_cell());
    assert_eq!(r.entities.entity_counts(), vec![(id("a"), 1)]);
}

#[test]
fn a_refused_command_is_handed_back_with_its_asker() {
    let mut r = rig(|| Sum(0));
    r.ask("a", "e", 5);
    assert!(r.ask("b", "e", 1).is_none());
    assert!(matches!(
        r.out.as_slice(),
        [HostOutput::Refused { reply: Asker::Local(_), why, .. }] if why.contains("shard a")
    ));
}

#[test]
fn a_sync_entity_is_handled_at_once_with_what_an_async_one_can_do() {
    let mut r = rig(|| SyncSum(0));
    assert_eq!(r.ask("a", "e", 2).map(|r| r.ok()), Some(Some(2)));
    assert_eq!(r.ask("a", "e", 3).map(|r| r.ok()), Some(Some(5)));
    // Nothing ever waits, and nothing ran as a future.
    assert!(!r.handlers.has_running());
    assert!(
        !r.handlers.has_spare_cell(),
        "a SyncEntity went through a future"
    );
    // Passivation asked from its context ends the incarnation.
    assert_eq!(r.ask("a", "e", 0).map(|r| r.ok()), Some(Some(5)));
    assert_eq!(r.entities.active_entities(), 0);
    assert_eq!(
        r.ask("a", "e", 1).map(|r| r.ok()),
        Some(Some(1)),
        "a new incarnation"
    );
    // A panic fails this incarnation only; the next command starts a new one.
    let failed = r.ask("a", "e", u64::MAX).expect("answered");
    assert!(
        matches!(&failed, Err(ShardingError::EntityFailed(why)) if why.contains("handler panicked: told to fail")),
        "{failed:?}"
    );
    assert!(matches!(r.out.as_slice(), [HostOutput::Failed { .. }]));
    assert_eq!(r.entities.active_entities(), 0);
    assert_eq!(r.ask("a", "e", 4).map(|r| r.ok()), Some(Some(4)));
}

/// A shard stopped at once (its lease lost) takes back its handlers that no lane has started:
/// they never run, however long the lanes' queue, and whoever waits on them is told; another
/// shard's still run. (On a current-thread runtime the lanes run only once the test awaits.)
#[tokio::test]
async fn a_force_stopped_shards_handlers_that_no_lane_started_never_run() {
    let mut r = rig(|| Sum(0));
    r.handlers.start_lanes(2, "sum");
    // As if the handlers took long: from the next turn they go to the lanes.
    if let Some(lanes) = r.handlers.lanes.as_mut() {
        lanes.sampled(std::time::Duration::from_micros(50));
    }
    r.handlers.send_to_lanes();
    let mut asks = Vec::new();
    for (shard, e) in [("a", "e"), ("b", "f")] {
        let (slot, rx) = crate::sharding::reply_to::answer_slot::<(), crate::sharding::Postcard>();
        let (reply_to, answer) = ReplyTo::detached();
        let job = Job::new((2, reply_to), Asker::Local(AskHandle::new(slot)));
        let mut out = Vec::new();
        r.entities.deliver(
            Instant::ZERO,
            id(shard),
            id(e),
            job,
            &mut r.handlers,
            &mut out,
        );
        r.send_replies(out);
        asks.push((rx, answer));
    }
    // Nothing ran in place: no handler cell was ever made here.
    assert!(!r.handlers.has_spare_cell(), "ran in place");
    r.handlers.send_to_lanes();
    let mut out = Vec::new();
    r.entities
        .force_stop_shard(Instant::ZERO, &id("a"), &mut r.handlers, &mut out);
    r.handlers.withdraw_shard(&id("a"), &mut out);
    r.send_replies(out);
    // Shard a's handler was taken back: only shard b's is still out.
    assert!(r.handlers.lanes_busy());
    let completions = r.handlers.lane_completions().expect("lanes");
    completions.ready().await;
    let mut done = Vec::new();
    r.handlers.take_lane_completions(&mut done);
    assert_eq!(done.len(), 1, "only shard b's handler ran");
    assert!(!r.handlers.lanes_busy(), "every handler sent came back");
    let mut out = Vec::new();
    for d in done {
        r.entities
            .completed(Instant::ZERO, d, &mut r.handlers, &mut out);
    }
    r.send_replies(out);
    let (_, answer_f) = asks.pop().expect("b's ask");
    let (mut rx_e, answer_e) = asks.pop().expect("a's ask");
    assert_eq!(
        answer_e.take(),
        None,
        "shard a's handler ran after its stop"
    );
    assert!(
        matches!(rx_e.try_recv(), Ok(Err(ShardingError::EntityFailed(why))) if why.contains("stopped before")),
        "shard a's asker was not told"
    );
    assert_eq!(answer_f.take(), Some(2));
    assert_eq!(r.entities.entity_counts(), vec![(id("b"), 1)]);
}

/// The kind's task stops taking in commands once two chunks a lane wait for a lane, and takes
/// them in again as the lanes take the chunks. (On a current-thread runtime the lanes run only
/// once the test awaits.)
#[tokio::test]
async fn the_lanes_are_full_while_two_chunks_a_lane_wait_for_them() {
    let mut r = rig(|| Sum(0));
    r.handlers.start_lanes(2, "sum");
    if let Some(lanes) = r.handlers.lanes.as_mut() {
        lanes.sampled(std::time::Duration::from_micros(50));
    }
    r.handlers.send_to_lanes();
    // Two lanes, two chunks of 32 each: 128 handlers fill them, 127 do not.
    let mut answers = Vec::new();
    for e in 0..128 {
        let (reply_to, answer) = ReplyTo::detached();
        let job = Job::new((1, reply_to), Asker::None);
        let mut out = Vec::new();
        r.entities.deliver(
            Instant::ZERO,
            id("a"),
            id(&format!("e{e}")),
            job,
            &mut r.handlers,
            &mut out,
        );
        r.send_replies(out);
        answers.push(answer);
        if e == 126 {
            r.handlers.send_to_lanes();
            assert!(!r.handlers.lanes_full(), "127 handlers filled the lanes");
        }
    }
    r.handlers.send_to_lanes();
    assert!(
        r.handlers.lanes_full(),
        "128 handlers waiting, and the lanes not full"
    );
    // The lanes take the chunks and run them: room again.
    let completions = r.handlers.lane_completions().expect("lanes");
    let mut done = Vec::new();
    while done.len() < 128 {
        completions.ready().await;
        r.handlers.take_lane_completions(&mut done);
        r.handlers.settle_lanes();
    }
    assert!(!r.handlers.lanes_full());
    assert!(
        answers.into_iter().all(|a| a.take() == Some(1)),
        "every handler ran"
    );
}
