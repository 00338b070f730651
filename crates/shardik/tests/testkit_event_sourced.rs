//! The event-sourced test kit, used as an application uses it (only `shardik::` names): what
//! a command persisted, answered and asked for; values that do not survive their codec;
//! recovery from the journal; timers and passivation; a write another copy got in first.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik::persistence::store::{AtomicWrite, Bytes, NewEvent, persistence_id};
use shardik::persistence::{
    Effect, EventSourced, EventSourcedContext, EventSourcedEntity, EventSourcedKind, MemoryStore,
    Persistence, Retention, StorageCodec, Store,
};
use shardik::testkit::{EventSourcedTestKit, TestKitError};
use shardik::{EntityKind, EntityTypeKey, ReplyTo};

#[derive(Clone, Serialize, Deserialize)]
enum Cmd {
    Deposit(u64, ReplyTo<u64>),
    Withdraw(u64, ReplyTo<Result<u64, Refused>>),
    Balance(ReplyTo<u64>),
    Note(String),
    /// Persists a secret, which its event drops in encoding (see `Event::Secret`).
    Secret(String),
    RemindIn(Duration),
    Remind,
    Ping(u32),
    Close,
    BadReply(ReplyTo<Lossy>),
    BadCommand(Lossy),
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Refused {
    Insufficient { balance: u64 },
}

/// A value that postcard encodes without its second field and then cannot decode: what a
/// `#[serde(skip_serializing)]` added by mistake does.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Lossy {
    kept: u32,
    #[serde(skip_serializing)]
    #[allow(dead_code)]
    lost: u32,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Event {
    Deposited(u64),
    Withdrawn(u64),
    Noted(String),
    /// Encoded without its text: CBOR reads it back empty, postcard not at all.
    Secret {
        #[serde(skip_serializing, default)]
        text: String,
    },
    Reminded,
}

#[derive(Default, Serialize, Deserialize)]
struct Account {
    balance: u64,
    notes: usize,
    reminders: u32,
}

impl EventSourcedEntity for Account {
    type Command = Cmd;
    type Event = Event;

    fn handle_command(&self, cmd: Cmd, ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
        match cmd {
            Cmd::Deposit(n, reply_to) => {
                Self::persist(Event::Deposited(n)).then_reply(reply_to, |s| s.balance)
            }
            Cmd::Withdraw(n, reply_to) if n > self.balance => {
                let balance = self.balance;
                Effect::reply(reply_to, Err(Refused::Insufficient { balance }))
            }
            Cmd::Withdraw(n, reply_to) => {
                Self::persist(Event::Withdrawn(n)).then_reply(reply_to, |s| Ok(s.balance))
            }
            Cmd::Balance(reply_to) => Effect::reply(reply_to, self.balance),
            Cmd::Note(text) => Self::persist(Event::Noted(text)),
            Cmd::Secret(text) => Self::persist(Event::Secret { text }),
            Cmd::RemindIn(delay) => {
                ctx.start_single_timer("remind", Cmd::Remind, delay);
                ctx.set_receive_timeout(Duration::from_secs(60), Cmd::Close);
                Effect::none()
            }
            Cmd::Remind => Self::persist(Event::Reminded),
            Cmd::Ping(n) if n > 0 => {
                ctx.tell_self(Cmd::Ping(n - 1));
                Effect::none()
            }
            Cmd::Ping(_) => Effect::none(),
            Cmd::Close => {
                ctx.passivate();
                Effect::none()
            }
            Cmd::BadReply(reply_to) => Effect::reply(reply_to, Lossy { kept: 1, lost: 2 }),
            Cmd::BadCommand(_) => Effect::none(),
        }
    }

    fn apply_event(&mut self, event: &Event) {
        match event {
            Event::Deposited(n) => self.balance += n,
            Event::Withdrawn(n) => self.balance -= n,
            Event::Noted(_) | Event::Secret { .. } => self.notes += 1,
            Event::Reminded => self.reminders += 1,
        }
    }
}

const ACCOUNTS: EntityTypeKey<EventSourced<Account>> = EntityTypeKey::new("account");

/// The kind on a store of its own, and that store.
fn account_kind() -> (EntityKind<EventSourced<Account>>, Arc<dyn Store>) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let persistence = Persistence::new(Arc::clone(&store));
    let kind = EntityKind::event_sourced(ACCOUNTS, &persistence, |_| Account::default());
    (kind, store)
}

/// The kind with events stored as CBOR, on a store of its own.
fn cbor_account_kind() -> EntityKind<EventSourced<Account>> {
    let persistence = Persistence::new(Arc::new(MemoryStore::new()));
    EventSourcedKind::new(ACCOUNTS, &persistence, |_| Account::default())
        .with_storage_codec(StorageCodec::Cbor)
        .into_kind()
}

#[tokio::test]
async fn a_command_shows_its_events_its_state_and_its_reply() {
    let (kind, _store) = account_kind();
    let mut kit = EventSourcedTestKit::new(kind, "a-1");

    let deposited = kit.run_command(|r| Cmd::Deposit(30, r)).await.unwrap();
    assert_eq!(deposited.events(), [Event::Deposited(30)]);
    assert_eq!(deposited.state().balance, 30);
    assert_eq!(deposited.reply(), Some(&30));
    assert!(!deposited.passivated());

    let refused = kit.run_command(|r| Cmd::Withdraw(50, r)).await.unwrap();
    assert!(refused.events().is_empty(), "a refusal persists nothing");
    assert_eq!(
        refused.reply(),
        Some(&Err(Refused::Insufficient { balance: 30 }))
    );

    let withdrawn = kit.run_command(|r| Cmd::Withdraw(10, r)).await.unwrap();
    assert_eq!(withdrawn.events(), [Event::Withdrawn(10)]);
    assert_eq!(withdrawn.reply(), Some(&Ok(20)));
    assert_eq!(kit.last_seq(), 2);

    let told = kit.run(Cmd::Note("hello".into())).await.unwrap();
    assert_eq!(told.events().len(), 1);
    assert!(told.reply().is_none());
}

#[tokio::test]
async fn the_events_shown_are_the_ones_read_back_from_the_journal() {
    let mut kit = EventSourcedTestKit::new(cbor_account_kind(), "a-2");
    let noted = kit
        .run(Cmd::Secret("lost in encoding".into()))
        .await
        .unwrap();
    // The live state applied the event as handled; the test sees what the journal kept,
    // which is what every recovery will see.
    assert_eq!(
        noted.events(),
        [Event::Secret {
            text: String::new()
        }]
    );
}

#[tokio::test]
async fn an_event_that_does_not_survive_its_codec_fails_the_run() {
    let (kind, _store) = account_kind();
    let mut kit = EventSourcedTestKit::new(kind, "a-8");
    let unreadable = kit.run(Cmd::Secret("x".into())).await.unwrap_err();
    assert!(
        matches!(&unreadable, TestKitError::Codec { what: "event", .. }),
        "{unreadable}"
    );
    // It was written, and no recovery can read it: what a node would have hit later.
    let recovery = kit.restart().await.err().expect("recovery fails");
    assert!(matches!(recovery, TestKitError::Failed(_)), "{recovery}");
}

#[tokio::test]
async fn a_reply_or_a_command_that_does_not_survive_its_codec_fails_the_run() {
    let (kind, _store) = account_kind();
    let mut kit = EventSourcedTestKit::new(kind, "a-3");

    let reply = kit.run_command(Cmd::BadReply).await.unwrap_err();
    assert!(
        matches!(&reply, TestKitError::Codec { what: "reply", .. }),
        "{reply}"
    );
    let command = kit
        .run(Cmd::BadCommand(Lossy { kept: 1, lost: 2 }))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &command,
            TestKitError::Codec {
                what: "command",
                ..
            }
        ),
        "{command}"
    );
    assert!(
        command
            .to_string()
            .contains("the command does not survive its codec")
    );
}

#[tokio::test]
async fn restart_recovers_the_state_from_the_journal_and_the_snapshots() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let persistence = Persistence::new(Arc::clone(&store));
    let kind = EventSourcedKind::new(ACCOUNTS, &persistence, |_| Account::default())
        .with_storage_codec(StorageCodec::Cbor)
        .with_snapshots(Retention {
            every: 2,
            keep: 1,
            delete_events: true,
        })
        .into_kind();
    let mut kit = EventSourcedTestKit::new(kind, "a-4");
    for n in 1..=5 {
        kit.run_command(|r| Cmd::Deposit(n, r)).await.unwrap();
    }
    let recovered = kit.restart().await.unwrap();
    assert_eq!(recovered.balance, 15);
    assert_eq!(kit.last_seq(), 5);
    let after = kit.run_command(Cmd::Balance).await.unwrap();
    assert_eq!(after.reply(), Some(&15));
    // The store holds what the retention keeps: the newest snapshot, at 4. Snapshots are
    // written in the background, so wait (bounded) for it rather than read once.
    let pid = persistence_id("account", "a-4");
    let snapshot_at_4 = async {
        loop {
            if store.latest_snapshot(&pid).await.unwrap().map(|s| s.seq) == Some(4) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), snapshot_at_4)
        .await
        .expect("the snapshot at 4 is saved");
}

#[tokio::test]
async fn timers_fire_when_the_test_says_and_passivation_ends_the_incarnation() {
    let (kind, _store) = account_kind();
    let mut kit = EventSourcedTestKit::new(kind, "a-5");

    kit.run(Cmd::RemindIn(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(kit.timer("remind"), Some(Duration::from_secs(5)));
    assert_eq!(kit.timer_keys().collect::<Vec<_>>(), ["remind"]);
    assert_eq!(kit.receive_timeout(), Some(Duration::from_secs(60)));

    let fired = kit.fire_timer("remind").await.unwrap();
    assert_eq!(fired.events(), [Event::Reminded]);
    assert_eq!(kit.timer("remind"), None, "a single timer fires once");
    assert!(matches!(
        kit.fire_timer("remind").await,
        Err(TestKitError::NoTimer(_))
    ));

    kit.run(Cmd::RemindIn(Duration::from_secs(1)))
        .await
        .unwrap();
    let closed = kit.fire_receive_timeout().await.unwrap();
    assert!(closed.passivated());
    assert_eq!(kit.timer("remind"), None, "timers end with the incarnation");
    assert_eq!(kit.receive_timeout(), None);
    // The next incarnation recovers what the last one persisted.
    let balance = kit.run_command(Cmd::Balance).await.unwrap();
    assert_eq!(balance.state().reminders, 1);
}

#[tokio::test]
async fn messages_to_self_wait_for_the_test_to_run_them() {
    let (kind, _store) = account_kind();
    let mut kit = EventSourcedTestKit::new(kind, "a-6");
    kit.run(Cmd::Ping(2)).await.unwrap();
    let mut told = kit.take_told_self();
    assert_eq!(told.len(), 1);
    kit.run(told.remove(0)).await.unwrap();
    assert!(matches!(kit.take_told_self().as_slice(), [Cmd::Ping(0)]));
    assert!(kit.take_told_self().is_empty());
}

#[tokio::test]
async fn a_write_another_copy_got_in_first_fails_and_the_next_command_recovers() {
    let (kind, store) = account_kind();
    let mut kit = EventSourcedTestKit::new(kind, "a-7");
    kit.run_command(|r| Cmd::Deposit(10, r)).await.unwrap();

    // Another copy of the entity (on a node that believes it owns it) writes event 2.
    let manifest: Arc<str> = "postcard/1".into();
    let other = AtomicWrite {
        persistence_id: persistence_id("account", "a-7"),
        events: vec![NewEvent {
            seq: 2,
            payload: Bytes::from(postcard::to_allocvec(&Event::Deposited(5)).unwrap()),
            manifest,
            tags: Vec::new(),
        }],
        fence: None,
        marks: Vec::new(),
    };
    assert!(store.append(vec![other]).await.unwrap()[0].is_ok());

    let lost = kit.run_command(|r| Cmd::Deposit(1, r)).await.unwrap_err();
    assert!(matches!(lost, TestKitError::Failed(_)), "{lost}");
    // The failed incarnation is gone; the next one sees the other copy's event.
    let balance = kit.run_command(Cmd::Balance).await.unwrap();
    assert_eq!(balance.reply(), Some(&15));
}
