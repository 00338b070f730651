//! What an entity can do from its context, on real nodes in one process: messages to itself,
//! timers, a receive timeout, passivation ending all of them; entity references carried
//! inside messages from one node to another; and typed reply handles (`ask`), answered
//! on the asker's node, from another node, and after being passed on to a third entity.
//!
//! The nodes talk over loopback TCP, so the clock is real; the delays are chosen so that the
//! assertions hold with wide margins on a loaded machine.

mod common;

use common::{free_port, wait_up};

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik_runtime::node::RunningNode;
use shardik_runtime::sharding::{
    Entity, EntityContext, EntityKind, EntityRef, EntityTypeKey, ReplyTo, Sharding, ShardingError,
};

const ASK: Duration = Duration::from_secs(10);

/// A command to the probe entity, and, when asked, where to say it was handled.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Msg(Cmd, Option<ReplyTo<()>>);

/// `cmd` as an ask: answered `()` once handled.
fn asked(cmd: Cmd) -> impl FnOnce(ReplyTo<()>) -> Msg {
    move |reply_to| Msg(cmd, Some(reply_to))
}

/// What the probe entity is told.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
enum Cmd {
    /// Record `tag`.
    Note(String),
    /// Sleep, then tell itself `Note(tag)`.
    BusyThenTellSelf {
        ms: u64,
        tag: String,
    },
    /// Deliver `Note(tag)` once after `ms` under `key`.
    Single {
        key: String,
        ms: u64,
        tag: String,
    },
    /// Deliver `Note(tag)` every `ms` under `key`.
    Repeat {
        key: String,
        ms: u64,
        tag: String,
    },
    Cancel(String),
    CancelAll,
    /// Deliver `Note(tag)` after `ms` of silence.
    ReceiveTimeout {
        ms: u64,
        tag: String,
    },
    ClearReceiveTimeout,
    Passivate,
    /// The kind's stop message.
    Stop,
}

/// Every entity of a test appends what happens to it here, as `id:event`.
type Log = Arc<Mutex<Vec<String>>>;

struct Probe {
    id: String,
    log: Log,
}

impl Probe {
    fn record(&self, event: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}:{event}", self.id));
    }
}

impl Entity for Probe {
    type Command = Msg;

    async fn handle(&mut self, Msg(cmd, done): Msg, ctx: &mut EntityContext<Self>) {
        let ms = Duration::from_millis;
        let note = |tag| Msg(Cmd::Note(tag), None);
        match cmd {
            Cmd::Note(tag) => self.record(&tag),
            Cmd::BusyThenTellSelf { ms: busy, tag } => {
                tokio::time::sleep(ms(busy)).await;
                ctx.tell_self(note(tag));
            }
            Cmd::Single { key, ms: d, tag } => ctx.start_single_timer(&key, note(tag), ms(d)),
            Cmd::Repeat { key, ms: d, tag } => {
                ctx.start_timer_with_fixed_delay(&key, note(tag), ms(d))
            }
            Cmd::Cancel(key) => ctx.cancel_timer(&key),
            Cmd::CancelAll => ctx.cancel_all_timers(),
            Cmd::ReceiveTimeout { ms: d, tag } => ctx.set_receive_timeout(ms(d), note(tag)),
            Cmd::ClearReceiveTimeout => ctx.cancel_receive_timeout(),
            Cmd::Passivate => ctx.passivate(),
            Cmd::Stop => self.record("stop"),
        }
        if let Some(done) = done {
            done.send(());
        }
    }
}

const PROBE: EntityTypeKey<Probe> = EntityTypeKey::new("probe");

async fn start(port: u16, seed: u16, roles: &[&str]) -> (RunningNode, Sharding) {
    common::start_sharding_node("context-test", port, seed, roles).await
}

/// One node with the probe kind, and the log its probes write to.
async fn probe_node() -> (RunningNode, EntityRef<Probe>, Log) {
    probe_node_idle(None).await
}

/// As [`probe_node`], the kind passivating entities idle for `idle`.
async fn probe_node_idle(idle: Option<Duration>) -> (RunningNode, EntityRef<Probe>, Log) {
    let p = free_port();
    let (running, sharding) = start(p, p, &[]).await;
    wait_up(&[&running], 1).await;
    let log: Log = Arc::default();
    let for_factory = Arc::clone(&log);
    let region = sharding
        .init(
            EntityKind::for_key(PROBE, move |id| {
                let probe = Probe {
                    id: id.to_string(),
                    log: Arc::clone(&for_factory),
                };
                probe.record("created");
                probe
            })
            .with_stop_message(|| Msg(Cmd::Stop, None))
            .with_idle_timeout(idle),
        )
        .expect("kind registers");
    let probe = region.entity_ref("p");
    // The first ask waits for the shard's home; after it, the entity exists.
    probe
        .ask(asked(Cmd::Note("ready".into())), ASK)
        .await
        .expect("answered");
    (running, probe, log)
}

fn events(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

fn count(log: &Log, event: &str) -> usize {
    events(log).iter().filter(|e| *e == event).count()
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_self_comes_after_the_commands_already_queued() {
    let (_node, probe, log) = probe_node().await;
    probe
        .tell(Msg(
            Cmd::BusyThenTellSelf {
                ms: 200,
                tag: "self".into(),
            },
            None,
        ))
        .await
        .unwrap();
    // These wait behind the busy handler; the message to self is queued when it returns.
    probe.tell(Msg(Cmd::Note("a".into()), None)).await.unwrap();
    probe.tell(Msg(Cmd::Note("b".into()), None)).await.unwrap();
    probe.ask(asked(Cmd::Note("c".into())), ASK).await.unwrap();
    sleep_ms(100).await;
    assert_eq!(
        events(&log),
        ["p:created", "p:ready", "p:a", "p:b", "p:c", "p:self"],
        "a, b and c were queued before the handler told itself"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_fire_once_repeat_until_cancelled_and_restart_by_key() {
    let (_node, probe, log) = probe_node().await;
    let single = |key: &str, ms, tag: &str| Cmd::Single {
        key: key.into(),
        ms,
        tag: tag.into(),
    };
    probe
        .ask(asked(single("once", 100, "once")), ASK)
        .await
        .unwrap();
    // Restarting a key replaces its timer: "first" never fires.
    probe
        .ask(asked(single("again", 150, "first")), ASK)
        .await
        .unwrap();
    probe
        .ask(asked(single("again", 300, "second")), ASK)
        .await
        .unwrap();
    probe
        .ask(
            asked(Cmd::Repeat {
                key: "tick".into(),
                ms: 50,
                tag: "tick".into(),
            }),
            ASK,
        )
        .await
        .unwrap();
    sleep_ms(700).await;
    assert_eq!(count(&log, "p:once"), 1, "a single timer fires once");
    assert_eq!(count(&log, "p:first"), 0, "the replaced timer did not fire");
    assert_eq!(count(&log, "p:second"), 1, "the replacing timer fired");
    let ticks = count(&log, "p:tick");
    assert!(ticks >= 4, "a fixed-delay timer repeats ({ticks} ticks)");

    probe
        .ask(asked(Cmd::Cancel("tick".into())), ASK)
        .await
        .unwrap();
    let after_cancel = count(&log, "p:tick");
    sleep_ms(400).await;
    assert_eq!(count(&log, "p:tick"), after_cancel, "no tick after cancel");

    // Cancelling all stops every timer, whatever its key.
    probe.ask(asked(single("x", 200, "x")), ASK).await.unwrap();
    probe
        .ask(
            asked(Cmd::Repeat {
                key: "y".into(),
                ms: 50,
                tag: "y".into(),
            }),
            ASK,
        )
        .await
        .unwrap();
    probe.ask(asked(Cmd::CancelAll), ASK).await.unwrap();
    let y = count(&log, "p:y");
    sleep_ms(400).await;
    assert_eq!(count(&log, "p:x"), 0);
    assert_eq!(count(&log, "p:y"), y);
    assert_eq!(count(&log, "p:created"), 1, "one incarnation throughout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_timeout_fires_after_silence_only() {
    let (_node, probe, log) = probe_node().await;
    probe
        .ask(
            asked(Cmd::ReceiveTimeout {
                ms: 300,
                tag: "idle".into(),
            }),
            ASK,
        )
        .await
        .unwrap();
    // Commands every 50 ms for a second: never 300 ms of silence.
    for i in 0..20 {
        probe
            .tell(Msg(Cmd::Note(format!("busy{i}")), None))
            .await
            .unwrap();
        sleep_ms(50).await;
    }
    assert_eq!(count(&log, "p:idle"), 0, "no timeout while commands arrive");
    sleep_ms(500).await;
    assert!(
        count(&log, "p:idle") >= 1,
        "the timeout fired after silence"
    );
    probe
        .ask(asked(Cmd::ClearReceiveTimeout), ASK)
        .await
        .unwrap();
    let idle = count(&log, "p:idle");
    sleep_ms(800).await;
    assert_eq!(count(&log, "p:idle"), idle, "cleared: no more timeouts");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passivation_cancels_timers_and_they_never_recreate_the_entity() {
    let (_node, probe, log) = probe_node().await;
    for (key, ms, repeat) in [("tick", 50, true), ("late", 400, false)] {
        let cmd = if repeat {
            Cmd::Repeat {
                key: key.into(),
                ms,
                tag: key.into(),
            }
        } else {
            Cmd::Single {
                key: key.into(),
                ms,
                tag: key.into(),
            }
        };
        probe.ask(asked(cmd), ASK).await.unwrap();
    }
    probe
        .ask(
            asked(Cmd::ReceiveTimeout {
                ms: 200,
                tag: "idle".into(),
            }),
            ASK,
        )
        .await
        .unwrap();
    sleep_ms(180).await;
    probe.ask(asked(Cmd::Passivate), ASK).await.unwrap();
    sleep_ms(900).await;
    let log_now = events(&log);
    let stop = log_now
        .iter()
        .position(|e| e == "p:stop")
        .expect("the entity was stopped");
    assert_eq!(
        &log_now[stop + 1..],
        &[] as &[String],
        "nothing reached the entity after it stopped"
    );
    assert_eq!(count(&log, "p:late"), 0, "the pending timer was cancelled");
    assert_eq!(
        count(&log, "p:idle"),
        0,
        "the receive timeout was cancelled"
    );
    assert!(
        count(&log, "p:tick") >= 1,
        "the timer ran before passivation"
    );
    assert_eq!(
        count(&log, "p:created"),
        1,
        "no timer re-created the entity"
    );

    // The next command starts a new incarnation, without the old one's timers.
    probe
        .ask(asked(Cmd::Note("back".into())), ASK)
        .await
        .unwrap();
    let ticks = count(&log, "p:tick");
    sleep_ms(300).await;
    assert_eq!(count(&log, "p:created"), 2);
    assert_eq!(
        count(&log, "p:tick"),
        ticks,
        "timers belong to an incarnation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_busy_only_with_its_own_timers_is_still_idle() {
    let (_node, probe, log) = probe_node_idle(Some(Duration::from_secs(1))).await;
    probe
        .ask(
            asked(Cmd::Repeat {
                key: "tick".into(),
                ms: 100,
                tag: "tick".into(),
            }),
            ASK,
        )
        .await
        .unwrap();
    sleep_ms(4000).await;
    let log_now = events(&log);
    let stop = log_now
        .iter()
        .position(|e| e == "p:stop")
        .expect("passivated although its timer kept it busy");
    assert!(stop > 5, "the timer ticked before: {log_now:?}");
    assert_eq!(&log_now[stop + 1..], &[] as &[String]);
    assert_eq!(count(&log, "p:created"), 1);
}

// --- entity references inside messages, across nodes ---

/// Asks a ponger to answer, handing it a reference to itself.
#[derive(Debug, Serialize, Deserialize)]
enum PingerCmd {
    /// Ping the ponger `id` with this pinger's own reference, and ask it for its reference.
    Start {
        ponger: String,
        reply_to: ReplyTo<()>,
    },
    /// The ponger's answer, through the reference it was given.
    Pong { node: String },
    /// Where the pongs came from, and this pinger's node.
    Get(ReplyTo<(Vec<String>, String)>),
}

#[derive(Debug, Serialize, Deserialize)]
enum PongerCmd {
    /// Answer `Pong` through `reply_to`.
    Ping { reply_to: EntityRef<Pinger> },
    /// Answer with a reference to yourself.
    WhoAreYou(ReplyTo<EntityRef<Ponger>>),
}

struct Pinger {
    sharding: Sharding,
    pongs: Vec<String>,
}

const PINGER: EntityTypeKey<Pinger> = EntityTypeKey::new("pinger");
const PONGER: EntityTypeKey<Ponger> = EntityTypeKey::new("ponger");

impl Entity for Pinger {
    type Command = PingerCmd;

    async fn handle(&mut self, cmd: PingerCmd, ctx: &mut EntityContext<Self>) {
        match cmd {
            PingerCmd::Start { ponger, reply_to } => {
                let me = self
                    .sharding
                    .entity_ref_for(PINGER, ctx.entity_id())
                    .expect("pinger registered");
                let ponger = self
                    .sharding
                    .entity_ref_for(PONGER, &ponger)
                    .expect("ponger registered");
                ponger
                    .tell(PongerCmd::Ping { reply_to: me })
                    .await
                    .expect("ping sent");
                // A reference in a reply, decoded on this node, used at once.
                let again = ponger
                    .ask(PongerCmd::WhoAreYou, ASK)
                    .await
                    .expect("the ponger answers with its reference");
                let me = self
                    .sharding
                    .entity_ref_for(PINGER, ctx.entity_id())
                    .expect("pinger registered");
                again
                    .tell(PongerCmd::Ping { reply_to: me })
                    .await
                    .expect("second ping sent");
                reply_to.send(());
            }
            PingerCmd::Pong { node } => self.pongs.push(node),
            PingerCmd::Get(reply_to) => {
                reply_to.send((self.pongs.clone(), ctx.node().address.to_string()))
            }
        }
    }
}

struct Ponger {
    sharding: Sharding,
}

impl Entity for Ponger {
    type Command = PongerCmd;

    async fn handle(&mut self, cmd: PongerCmd, ctx: &mut EntityContext<Self>) {
        match cmd {
            PongerCmd::Ping { reply_to } => {
                assert_eq!(reply_to.kind(), "pinger");
                let node = ctx.node().address.to_string();
                reply_to
                    .tell(PingerCmd::Pong { node })
                    .await
                    .expect("pong sent");
            }
            PongerCmd::WhoAreYou(reply_to) => reply_to.send(
                self.sharding
                    .entity_ref_for(PONGER, ctx.entity_id())
                    .expect("ponger registered"),
            ),
        }
    }
}

/// Registers both kinds on a node: pingers live on nodes with role "ping", pongers on nodes
/// with role "pong"; elsewhere each kind is a proxy.
fn register(sharding: &Sharding) {
    let s = sharding.clone();
    sharding
        .init(
            EntityKind::for_key(PINGER, move |_| Pinger {
                sharding: s.clone(),
                pongs: Vec::new(),
            })
            .with_role("ping"),
        )
        .expect("pinger registers");
    let s = sharding.clone();
    sharding
        .init(
            EntityKind::for_key(PONGER, move |_| Ponger {
                sharding: s.clone(),
            })
            .with_role("pong"),
        )
        .expect("ponger registers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_ref_travels_to_another_node_and_the_reply_comes_back_through_it() {
    let (pa, pb) = (free_port(), free_port());
    let (a, sharding_a) = start(pa, pa, &["ping"]).await;
    let (b, sharding_b) = start(pb, pa, &["pong"]).await;
    wait_up(&[&a, &b], 2).await;
    register(&sharding_a);
    register(&sharding_b);

    // Started from b, which only proxies pingers: the pinger runs on a.
    let pinger = sharding_b.entity_ref_for(PINGER, "pinger-1").unwrap();
    pinger
        .ask(
            |reply_to| PingerCmd::Start {
                ponger: "ponger-1".into(),
                reply_to,
            },
            ASK,
        )
        .await
        .expect("started");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (pongs, pinger_node) = loop {
        let (pongs, node) = pinger.ask(PingerCmd::Get, ASK).await.expect("answered");
        if pongs.len() >= 2 || tokio::time::Instant::now() > deadline {
            break (pongs, node);
        }
        sleep_ms(50).await;
    };
    let (a_addr, b_addr) = (
        a.self_node.address.to_string(),
        b.self_node.address.to_string(),
    );
    assert_eq!(pinger_node, a_addr, "the pinger runs on a");
    assert_eq!(
        pongs,
        vec![b_addr.clone(), b_addr],
        "both pongs came from b: through the pinger's reference sent in a command, and \
         through the ponger's reference received in a reply"
    );
    let kinds: BTreeSet<String> = sharding_a.kinds().into_iter().collect();
    assert!(kinds.contains("pinger") && kinds.contains("ponger"));
}

#[test]
fn an_entity_ref_decoded_outside_a_node_is_a_clear_error() {
    let err = serde_json::from_str::<EntityRef<Ponger>>(r#"["ponger","x"]"#).unwrap_err();
    assert!(
        err.to_string()
            .contains("can only be decoded by a node's sharding"),
        "{err}"
    );
}

// Typed replies per command: accounts live on nodes with role "ledger", auditors on nodes with
// role "audit"; each command of an account has its own reply type.

#[derive(Debug, Serialize, Deserialize)]
enum AccountCmd {
    /// Adds `amount`; answers the new balance.
    Deposit { amount: u64, reply_to: ReplyTo<u64> },
    /// Answers every deposit so far.
    History(ReplyTo<Vec<u64>>),
    /// Passes the reply handle on to this account's auditor, which answers it.
    Audit(ReplyTo<String>),
    /// Never answers.
    Ignore(ReplyTo<u64>),
    /// Fails before answering: the handler panics.
    Fail(ReplyTo<u64>),
}

#[derive(Debug, Serialize, Deserialize)]
enum AuditorCmd {
    Check {
        account: String,
        deposits: usize,
        reply_to: ReplyTo<String>,
    },
}

struct Account {
    sharding: Sharding,
    deposits: Vec<u64>,
}

struct Auditor;

const ACCOUNT: EntityTypeKey<Account> = EntityTypeKey::new("account");
const AUDITOR: EntityTypeKey<Auditor> = EntityTypeKey::new("auditor");

impl Entity for Account {
    type Command = AccountCmd;

    async fn handle(&mut self, cmd: AccountCmd, ctx: &mut EntityContext<Self>) {
        match cmd {
            AccountCmd::Deposit { amount, reply_to } => {
                self.deposits.push(amount);
                reply_to.send(self.deposits.iter().sum());
            }
            AccountCmd::History(reply_to) => reply_to.send(self.deposits.clone()),
            AccountCmd::Audit(reply_to) => {
                let auditor = self
                    .sharding
                    .entity_ref_for(AUDITOR, ctx.entity_id())
                    .expect("auditor registered");
                auditor
                    .tell(AuditorCmd::Check {
                        account: ctx.entity_id().to_string(),
                        deposits: self.deposits.len(),
                        reply_to,
                    })
                    .await
                    .expect("check sent");
            }
            AccountCmd::Ignore(_) => {}
            AccountCmd::Fail(_) => panic!("asked to fail"),
        }
    }
}

impl Entity for Auditor {
    type Command = AuditorCmd;

    async fn handle(&mut self, cmd: AuditorCmd, ctx: &mut EntityContext<Self>) {
        let AuditorCmd::Check {
            account,
            deposits,
            reply_to,
        } = cmd;
        reply_to.send(format!(
            "{account}: {deposits} deposits, audited on {}",
            ctx.node().address
        ));
    }
}

fn register_ledger(sharding: &Sharding) {
    let s = sharding.clone();
    sharding
        .init(
            EntityKind::for_key(ACCOUNT, move |_| Account {
                sharding: s.clone(),
                deposits: Vec::new(),
            })
            .with_role("ledger"),
        )
        .expect("account registers");
    sharding
        .init(EntityKind::for_key(AUDITOR, |_| Auditor).with_role("audit"))
        .expect("auditor registers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_command_has_its_own_reply_type_answered_wherever_the_entity_runs() {
    let (pa, pb) = (free_port(), free_port());
    let (a, sharding_a) = start(pa, pa, &["ledger"]).await;
    let (b, sharding_b) = start(pb, pa, &["audit"]).await;
    wait_up(&[&a, &b], 2).await;
    register_ledger(&sharding_a);
    register_ledger(&sharding_b);

    // Asked on the account's own node: the answer is handed over without encoding.
    let on_a = sharding_a.entity_ref_for(ACCOUNT, "acc-1").unwrap();
    let balance = on_a
        .ask(
            |reply_to| AccountCmd::Deposit {
                amount: 5,
                reply_to,
            },
            ASK,
        )
        .await
        .expect("deposit answered locally");
    assert_eq!(balance, 5);

    // Asked from b, which only proxies accounts: the handle travels to a, is decoded there,
    // and the answer comes back in a reply frame.
    let from_b = sharding_b.entity_ref_for(ACCOUNT, "acc-1").unwrap();
    let balance = from_b
        .ask(
            |reply_to| AccountCmd::Deposit {
                amount: 7,
                reply_to,
            },
            ASK,
        )
        .await
        .expect("deposit answered remotely");
    assert_eq!(balance, 12);
    let history: Vec<u64> = from_b
        .ask(AccountCmd::History, ASK)
        .await
        .expect("history answered remotely");
    assert_eq!(history, vec![5, 7], "another reply type on the same entity");

    // Passed on: b asks the account on a, which hands the handle to the auditor on b; the
    // auditor answers its asker's own node. And from a: the auditor answers across the wire.
    let b_addr = b.self_node.address.to_string();
    let audit = from_b
        .ask(AccountCmd::Audit, ASK)
        .await
        .expect("audit answered after two hops");
    assert_eq!(audit, format!("acc-1: 2 deposits, audited on {b_addr}"));
    let audit = on_a
        .ask(AccountCmd::Audit, ASK)
        .await
        .expect("audit answered from b to a");
    assert_eq!(audit, format!("acc-1: 2 deposits, audited on {b_addr}"));

    // An entity that never answers makes the ask time out, locally and remotely.
    let short = Duration::from_millis(300);
    for account in [&on_a, &from_b] {
        assert_eq!(
            account.ask(AccountCmd::Ignore, short).await,
            Err(ShardingError::Timeout(short))
        );
    }
    assert_eq!(
        on_a.ask(AccountCmd::History, Duration::ZERO).await,
        Err(ShardingError::InvalidTimeout)
    );

    // One that fails before answering is reported at once, locally and from the other node
    // (by the ask's id, in a reply frame): not a timeout.
    for account in [&on_a, &from_b] {
        let asked = tokio::time::Instant::now();
        let failed = account.ask(AccountCmd::Fail, ASK).await;
        assert!(
            matches!(&failed, Err(ShardingError::EntityFailed(why)) if why.contains("asked to fail")),
            "{failed:?}"
        );
        assert!(
            asked.elapsed() < ASK / 2,
            "the failure waited for the timeout"
        );
    }
}

#[test]
fn a_reply_handle_decoded_outside_a_node_is_a_clear_error() {
    let err = serde_json::from_str::<ReplyTo<u64>>(
        r#"["account",{"address":{"host":"127.0.0.1","port":1},"uid":7},3]"#,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("can only be decoded by a node's sharding"),
        "{err}"
    );
}
