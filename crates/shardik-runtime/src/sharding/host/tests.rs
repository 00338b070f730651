//! The host on its own, driven the way the kind task drives it: deliveries, the completions
//! it hands back, and shard stops.

use std::sync::Arc;

use shardik_core::membership::{Address, UniqueAddress};
use tokio::sync::oneshot;

use super::*;
use crate::sharding::api::{EntityContext, ShardingError};

/// Adds what it is told; answers the sum. Told 0, it asks to be passivated.
struct Sum(u64);

impl Entity for Sum {
    type Command = u64;
    type Reply = u64;

    async fn handle(&mut self, n: u64, ctx: &mut EntityContext<Self>) -> u64 {
        if n == 0 {
            ctx.passivate();
        }
        self.0 += n;
        self.0
    }
}

fn host() -> EntityHost<Sum> {
    let node = UniqueAddress::new(Address::new("127.0.0.1", 1), 7);
    EntityHost::new(node, Arc::new(|_| Sum(0)), None)
}

fn id(s: &str) -> Arc<str> {
    Arc::from(s)
}

fn tell(n: u64) -> Job<Sum> {
    Job {
        cmd: n,
        reply: Asker::None,
        from_context: false,
    }
}

type AskReply = oneshot::Receiver<Result<u64, ShardingError>>;

fn ask(n: u64) -> (Job<Sum>, AskReply) {
    let (tx, rx) = oneshot::channel();
    let job = Job {
        cmd: n,
        reply: Asker::Local(tx),
        from_context: false,
    };
    (job, rx)
}

/// Delivers `job`, which must not be refused, and settles what finished, as the kind task
/// does; the outputs other than replies are returned.
fn put(h: &mut EntityHost<Sum>, shard: &ShardId, e: &EntityId, job: Job<Sum>) {
    assert!(
        h.deliver(shard.clone(), e.clone(), job, 0).is_ok(),
        "refused"
    );
    let mut out = Vec::new();
    settle(h, &mut out);
    assert!(out.is_empty(), "{} unexpected outputs", out.len());
}

/// What the kind task does after each input: completes what finished and sends the replies
/// (kept in `out`: what else the host asks for).
fn settle(host: &mut EntityHost<Sum>, out: &mut Vec<HostOutput<Sum>>) {
    let mut all = Vec::new();
    while let Some(done) = host.next_finished() {
        host.completed(done, 0, &mut all);
    }
    for o in all {
        match o {
            HostOutput::Reply(Asker::Local(tx), r) => {
                let _ = tx.send(r.map_err(ShardingError::EntityFailed));
            }
            HostOutput::Reply(..) => panic!("a reply to nobody was handed out"),
            other => out.push(other),
        }
    }
}

#[test]
fn tells_and_asks_are_handled_in_order_and_answered() {
    let mut h = host();
    let (a, e) = (id("a"), id("e1"));
    for n in [1, 2, 3] {
        put(&mut h, &a, &e, tell(n));
    }
    let (job, mut rx) = ask(4);
    // Answered at once, in the host: nothing is left for the owner to complete.
    assert!(h.deliver(a.clone(), e.clone(), job, 0).is_ok());
    assert!(!h.has_finished());
    assert_eq!(rx.try_recv().expect("answered").ok(), Some(10));
    assert_eq!(h.active_entities(), 1);
    assert_eq!(h.entity_counts(), vec![(a, 1)]);
}

#[test]
fn a_command_naming_another_shard_than_its_entity_s_is_refused() {
    let mut h = host();
    let (a, b, e) = (id("a"), id("b"), id("e1"));
    put(&mut h, &a, &e, tell(5));
    let (job, _rx) = ask(1);
    let Err(refused) = h.deliver(b.clone(), e.clone(), job, 0) else {
        panic!("a second copy of e1 was started in shard b");
    };
    assert!(matches!(refused.reply, Asker::Local(_)));
    assert!(refused.why.contains("shard b"), "{}", refused.why);
    assert!(refused.why.contains("shard a"), "{}", refused.why);
    assert_eq!(refused.entity, e);
    // The entity in its own shard is untouched.
    let (job, mut rx) = ask(1);
    put(&mut h, &a, &e, job);
    assert_eq!(rx.try_recv().expect("answered").ok(), Some(6));
    assert_eq!(h.entity_counts(), vec![(a, 1)]);
}

#[test]
fn stopping_a_shard_stops_its_entities_only_and_reports_it_empty() {
    let mut h = host();
    let (a, b) = (id("a"), id("b"));
    for e in ["a1", "a2", "a3"] {
        put(&mut h, &a, &id(e), tell(1));
    }
    for e in ["b1", "b2"] {
        put(&mut h, &b, &id(e), tell(1));
    }
    let mut out = Vec::new();
    h.stop_shard(&a, &mut out);
    settle(&mut h, &mut out);
    assert!(
        matches!(out.as_slice(), [HostOutput::ShardEmpty(s)] if *s == a),
        "{} outputs",
        out.len()
    );
    assert_eq!(h.entity_counts(), vec![(b.clone(), 2)]);
    assert_eq!(h.active_entities(), 2);
    // An entity created after the stop, in a shard stopped next, is stopped with it.
    put(&mut h, &b, &id("b3"), tell(1));
    let mut out = Vec::new();
    h.stop_shard(&b, &mut out);
    settle(&mut h, &mut out);
    assert!(matches!(out.as_slice(), [HostOutput::ShardEmpty(s)] if *s == b));
    assert_eq!(h.active_entities(), 0);
    assert!(h.entity_counts().is_empty());
    // The shard may come back, and its entities start fresh.
    let (job, mut rx) = ask(2);
    put(&mut h, &a, &id("a1"), job);
    assert_eq!(rx.try_recv().expect("answered").ok(), Some(2));
}

#[test]
fn forcing_a_shard_to_stop_drops_its_entities_at_once() {
    let mut h = host();
    let (a, b) = (id("a"), id("b"));
    put(&mut h, &a, &id("a1"), tell(1));
    put(&mut h, &b, &id("b1"), tell(1));
    let mut out = Vec::new();
    h.force_stop_shard(&a, &mut out);
    assert!(out.is_empty());
    assert_eq!(h.entity_counts(), vec![(b, 1)]);
    assert_eq!(h.active_entities(), 1);
    let (job, mut rx) = ask(3);
    put(&mut h, &a, &id("a1"), job);
    assert_eq!(rx.try_recv().expect("answered").ok(), Some(3));
}

#[test]
fn a_passivating_handler_goes_through_the_full_completion() {
    let mut h = host();
    let (a, e) = (id("a"), id("e1"));
    put(&mut h, &a, &e, tell(4));
    // Told 0, it asks to be passivated: that is not completed in the slot.
    assert!(h.deliver(a.clone(), e.clone(), tell(0), 0).is_ok());
    assert!(h.has_finished());
    let mut out = Vec::new();
    settle(&mut h, &mut out);
    assert_eq!(h.active_entities(), 0);
    assert!(h.entity_counts().is_empty());
    // A new incarnation starts from scratch.
    let (job, mut rx) = ask(1);
    put(&mut h, &a, &e, job);
    assert_eq!(rx.try_recv().expect("answered").ok(), Some(1));
}

#[test]
fn an_idle_entity_s_record_stays_four_words() {
    // Memory per idle entity is a headline number: the shard index and the stop flag must
    // not grow the record of a one-word entity.
    assert_eq!(std::mem::size_of::<Slot<Sum>>(), 32);
}

/// [`Sum`] as a [`SyncEntity`](crate::sharding::api::SyncEntity); told `u64::MAX`, it panics.
struct SyncSum(u64);

impl crate::sharding::api::SyncEntity for SyncSum {
    type Command = u64;
    type Reply = u64;

    fn handle(&mut self, n: u64, ctx: &mut EntityContext<Self>) -> u64 {
        assert!(n != u64::MAX, "told to fail");
        if n == 0 {
            ctx.passivate();
        }
        self.0 += n;
        self.0
    }
}

fn sync_host() -> EntityHost<SyncSum> {
    let node = UniqueAddress::new(Address::new("127.0.0.1", 1), 7);
    EntityHost::new(node, Arc::new(|_| SyncSum(0)), None)
}

/// Delivers `n` to `e` of `shard` as an ask and settles what finished; the answer.
fn sync_ask(
    h: &mut EntityHost<SyncSum>,
    shard: &ShardId,
    e: &EntityId,
    n: u64,
) -> Result<u64, String> {
    let (tx, mut rx) = oneshot::channel();
    let job = Job {
        cmd: n,
        reply: Asker::Local(tx),
        from_context: false,
    };
    assert!(
        h.deliver(shard.clone(), e.clone(), job, 0).is_ok(),
        "refused"
    );
    let mut outputs = Vec::new();
    while let Some(done) = h.next_finished() {
        h.completed(done, 0, &mut outputs);
    }
    for o in outputs {
        if let HostOutput::Reply(Asker::Local(tx), r) = o {
            let _ = tx.send(r.map_err(ShardingError::EntityFailed));
        }
    }
    match rx.try_recv().expect("answered at once") {
        Ok(r) => Ok(r),
        Err(ShardingError::EntityFailed(why)) => Err(why),
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn a_sync_entity_is_handled_at_once_with_what_an_async_one_can_do() {
    let mut h = sync_host();
    let (a, e) = (id("a"), id("e1"));
    assert_eq!(sync_ask(&mut h, &a, &e, 2), Ok(2));
    assert_eq!(sync_ask(&mut h, &a, &e, 3), Ok(5));
    // Nothing ever waits: no handler is left running, and none was run as a future (an
    // async entity's first command leaves a cell for the next one).
    assert!(!h.has_running());
    assert!(
        !h.handlers.has_spare_cell(),
        "a SyncEntity went through a future"
    );
    let mut async_host = host();
    put(&mut async_host, &a, &e, tell(1));
    assert!(async_host.handlers.has_spare_cell());
    // Passivation asked from its context goes through the full completion.
    assert_eq!(sync_ask(&mut h, &a, &e, 0), Ok(5));
    assert_eq!(h.active_entities(), 0);
    assert_eq!(sync_ask(&mut h, &a, &e, 1), Ok(1), "a new incarnation");
    // A panic fails this incarnation only; the next command starts a new one.
    let failed = sync_ask(&mut h, &a, &e, u64::MAX).unwrap_err();
    assert!(
        failed.contains("handler panicked: told to fail"),
        "{failed}"
    );
    assert_eq!(h.active_entities(), 0);
    assert_eq!(sync_ask(&mut h, &a, &e, 4), Ok(4));
    // And it is refused in another shard than its own, like any entity.
    let (tx, _rx) = oneshot::channel();
    let job = Job {
        cmd: 1,
        reply: Asker::Local(tx),
        from_context: false,
    };
    assert!(h.deliver(id("b"), e.clone(), job, 0).is_err());
}
