//! The reliable-delivery rules every store that keeps delivery data keeps: an entity's marks
//! change exactly when its write is accepted (with events or alone, in a batch or with durable
//! state), producer epochs count up once per start whoever starts them, producer queues
//! hold messages in stream order until confirmed, and removing a kind's data removes what
//! sharding kept for it and nothing else, and nothing at all while one of its leases is held.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::fixtures::{event, fresh, payloads, write};
use crate::delivery::{
    DeliveryMark, KindDataRemoved, LeaseStillHeld, MarkChange, QueueConfirmation, QueuedMessage,
};
use crate::error::{StoreError, WriteRefused, WriteResult};
use crate::fence::Fence;
use crate::lease::{LeaseAcquired, LeaseGrant};
use crate::records::{PersistenceId, StoredState, persistence_id};
use crate::store::Store;
use crate::write::AtomicWrite;

/// A time-to-live no check outlasts.
const LONG: Duration = Duration::from_secs(60);

/// A mark, its time made from its numbers so that every field is checked on the way back.
fn mark(producer: &str, epoch: u64, stream: u64, seq: u64) -> DeliveryMark {
    DeliveryMark {
        producer: producer.into(),
        epoch,
        stream,
        seq,
        written_at_ms: 1_700_000_000_000 + epoch * 1_000 + stream * 100 + seq,
    }
}

fn set(producer: &str, epoch: u64, stream: u64, seq: u64) -> MarkChange {
    MarkChange::Set(mark(producer, epoch, stream, seq))
}

fn remove(producer: &str) -> MarkChange {
    MarkChange::Remove(producer.into())
}

/// A write of marks alone.
fn marks_only(pid: &PersistenceId, marks: Vec<MarkChange>) -> AtomicWrite {
    write(pid, Vec::new()).with_marks(marks)
}

async fn one<S: Store + ?Sized>(store: &S, w: AtomicWrite) -> WriteResult {
    let mut answers = store.append(vec![w]).await.unwrap();
    assert_eq!(answers.len(), 1);
    answers.remove(0)
}

async fn marks_of<S: Store + ?Sized>(store: &S, pid: &str) -> Vec<DeliveryMark> {
    store.delivery_marks(pid).await.unwrap()
}

fn state(revision: u64, text: &str) -> StoredState {
    StoredState {
        revision,
        payload: Bytes::copy_from_slice(text.as_bytes()),
    }
}

fn assert_malformed(result: &WriteResult, what: &str) {
    assert!(
        matches!(result, Err(WriteRefused::Malformed { .. })),
        "{what}: expected Malformed, got {result:?}"
    );
}

fn assert_invalid<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::InvalidArgument(why)) => assert!(!why.is_empty()),
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

/// Marks written with events read back per entity, sorted by producer (by bytes, whatever
/// the database's locale); a later write's `Set` replaces a mark and its `Remove` removes one
/// (removing a mark never set is harmless); a write without marks leaves them; numbers up to
/// 2^63-1 round-trip.
pub async fn marks_round_trip<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("marks");
    let (a, b) = (persistence_id(&prefix, "a"), persistence_id(&prefix, "b"));
    assert!(marks_of(store, &a).await.is_empty(), "no marks yet");

    let first = write(&a, vec![event(1, "a1", &[])]).with_marks(vec![
        set("p-b", 1, 0, 3),
        set("P-c", 2, 1, 1),
        set("p-a", 1, 0, 7),
    ]);
    assert_eq!(one(store, first).await, Ok(()));
    assert_eq!(
        marks_of(store, &a).await,
        vec![
            mark("P-c", 2, 1, 1),
            mark("p-a", 1, 0, 7),
            mark("p-b", 1, 0, 3)
        ],
        "sorted by producer, byte by byte"
    );
    assert!(marks_of(store, &b).await.is_empty(), "marks are per entity");

    let second = write(&a, vec![event(2, "a2", &[])]).with_marks(vec![
        set("p-a", 2, 5, 1),
        remove("p-b"),
        remove("never-marked"),
    ]);
    assert_eq!(one(store, second).await, Ok(()));
    assert_eq!(
        marks_of(store, &a).await,
        vec![mark("P-c", 2, 1, 1), mark("p-a", 2, 5, 1)],
        "set replaces, remove removes, the rest stays"
    );
    assert_eq!(
        one(store, write(&a, vec![event(3, "a3", &[])])).await,
        Ok(())
    );
    assert_eq!(marks_of(store, &a).await.len(), 2, "a write without marks");

    let top = (1u64 << 63) - 1;
    let big = DeliveryMark {
        producer: "big".into(),
        epoch: top,
        stream: top,
        seq: top,
        written_at_ms: top,
    };
    let w = write(&b, vec![event(1, "b1", &[])]).with_marks(vec![MarkChange::Set(big.clone())]);
    assert_eq!(one(store, w).await, Ok(()));
    assert_eq!(marks_of(store, &b).await, vec![big]);
    assert_eq!(
        payloads(&store.read_events(&a, 1, u64::MAX, 10).await.unwrap()),
        vec![(1, "a1".into()), (2, "a2".into()), (3, "a3".into())],
        "the events went in with their marks"
    );
}

/// A write of marks alone records them and touches no journal: the highest sequence number
/// stays, of an entity with events and of one without; under a fence it is judged, and raises
/// its scope, as any write. A write with neither events nor marks is malformed.
pub async fn marks_only_writes<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("marks-only");
    let scope = format!("{prefix}|s");
    let (a, b) = (persistence_id(&prefix, "a"), persistence_id(&prefix, "b"));
    let w = write(&a, vec![event(1, "a1", &[]), event(2, "a2", &[])]);
    assert_eq!(one(store, w).await, Ok(()));

    assert_eq!(
        one(store, marks_only(&a, vec![set("p", 1, 0, 4)])).await,
        Ok(())
    );
    assert_eq!(marks_of(store, &a).await, vec![mark("p", 1, 0, 4)]);
    assert_eq!(store.highest_seq(&a).await.unwrap(), 2, "no number taken");
    assert_eq!(
        store.read_events(&a, 1, u64::MAX, 10).await.unwrap().len(),
        2
    );
    assert_eq!(
        one(store, write(&a, vec![event(3, "a3", &[])])).await,
        Ok(()),
        "the next number is still free"
    );

    assert_eq!(
        one(store, marks_only(&b, vec![set("p", 1, 0, 1)])).await,
        Ok(())
    );
    assert_eq!(
        store.highest_seq(&b).await.unwrap(),
        0,
        "no journal started"
    );
    assert!(
        store
            .read_events(&b, 1, u64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(marks_of(store, &b).await, vec![mark("p", 1, 0, 1)]);
    assert_eq!(one(store, marks_only(&b, vec![remove("p")])).await, Ok(()));
    assert!(marks_of(store, &b).await.is_empty());

    let fenced = marks_only(&b, vec![set("q", 1, 0, 1)]).fenced(Fence::new(scope.as_str(), 3));
    assert_eq!(one(store, fenced).await, Ok(()));
    let stale = marks_only(&b, vec![set("q", 1, 0, 2)]).fenced(Fence::new(scope.as_str(), 2));
    assert!(
        matches!(one(store, stale).await, Err(WriteRefused::Fenced { .. })),
        "a marks-only write raised its scope, and is judged by it"
    );
    assert_eq!(marks_of(store, &b).await, vec![mark("q", 1, 0, 1)]);

    assert_malformed(
        &one(store, write(&b, Vec::new())).await,
        "neither events nor marks",
    );
}

/// In a batch, a write refused for a taken number (taken before the batch or by an earlier
/// write of it) or by its fence changes no mark, with events or without, while the accepted
/// writes around it change theirs; two accepted writes of one entity change its marks one
/// after the other.
pub async fn refused_writes_change_no_marks<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("marks-refused");
    let scope = format!("{prefix}|s");
    let [a, b, c, d] = ["a", "b", "c", "d"].map(|id| persistence_id(&prefix, id));
    let fence = |token| Fence::new(scope.as_str(), token);
    let setup = store
        .append(vec![
            write(&a, vec![event(1, "a1", &[])]).with_marks(vec![set("p", 1, 0, 1)]),
            write(&c, vec![event(1, "c1", &[])]).fenced(fence(5)),
        ])
        .await
        .unwrap();
    assert_eq!(setup, vec![Ok(()), Ok(())]);

    let answers = store
        .append(vec![
            write(&a, vec![event(1, "taken", &[])])
                .with_marks(vec![set("p", 9, 9, 9), set("q", 9, 9, 9)]),
            write(&b, vec![event(1, "b1", &[])]).with_marks(vec![set("p", 1, 0, 9)]),
            write(&c, vec![event(2, "stale", &[])])
                .with_marks(vec![set("p", 1, 0, 1)])
                .fenced(fence(4)),
            marks_only(&d, vec![set("p", 1, 0, 1)]).fenced(fence(4)),
            write(&b, vec![event(2, "b2", &[])])
                .with_marks(vec![set("p", 1, 0, 10), set("r", 2, 0, 1)]),
            write(&b, vec![event(2, "clash", &[])]).with_marks(vec![remove("p")]),
            write(&a, vec![event(2, "a2", &[])]).with_marks(vec![set("q", 1, 0, 2)]),
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 7);
    assert!(
        matches!(answers[0], Err(WriteRefused::SequenceTaken { seq: 1, .. })),
        "{:?}",
        answers[0]
    );
    assert_eq!(answers[1], Ok(()));
    for i in [2, 3] {
        assert!(
            matches!(answers[i], Err(WriteRefused::Fenced { .. })),
            "write {i}: {:?}",
            answers[i]
        );
    }
    assert_eq!(answers[4], Ok(()));
    assert!(
        matches!(answers[5], Err(WriteRefused::SequenceTaken { seq: 2, .. })),
        "{:?}",
        answers[5]
    );
    assert_eq!(answers[6], Ok(()));

    assert_eq!(
        marks_of(store, &a).await,
        vec![mark("p", 1, 0, 1), mark("q", 1, 0, 2)],
        "the refused write changed nothing, the accepted one its own marks"
    );
    assert_eq!(
        marks_of(store, &b).await,
        vec![mark("p", 1, 0, 10), mark("r", 2, 0, 1)],
        "the later accepted write counts; the clashing one changed nothing"
    );
    assert!(marks_of(store, &c).await.is_empty(), "fenced with events");
    assert!(
        marks_of(store, &d).await.is_empty(),
        "fenced without events"
    );
    assert_eq!(store.highest_seq(&c).await.unwrap(), 1);
    assert_eq!(store.highest_seq(&d).await.unwrap(), 0);
}

/// Marks that change one producer twice, or name no producer, make their write malformed:
/// refused, changing nothing (neither its events nor its marks), beside an accepted write of
/// the same batch; so too with durable state.
pub async fn marks_changing_one_producer_twice_are_malformed<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("marks-twice");
    let (a, b) = (persistence_id(&prefix, "a"), persistence_id(&prefix, "b"));
    let answers = store
        .append(vec![
            write(&a, vec![event(1, "a1", &[])]).with_marks(vec![
                set("p", 1, 0, 1),
                set("q", 1, 0, 1),
                remove("p"),
            ]),
            write(&b, vec![event(1, "b1", &[])]).with_marks(vec![set("p", 1, 0, 1)]),
            marks_only(&a, vec![set("q", 1, 0, 1), set("q", 1, 0, 2)]),
            write(&a, vec![event(1, "a1", &[])]).with_marks(vec![set("", 1, 0, 1)]),
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 4);
    assert_malformed(&answers[0], "set then removed");
    assert_eq!(answers[1], Ok(()));
    assert_malformed(&answers[2], "set twice, without events");
    assert_malformed(&answers[3], "no producer");
    assert_eq!(store.highest_seq(&a).await.unwrap(), 0, "no event written");
    assert!(marks_of(store, &a).await.is_empty(), "no mark changed");
    assert_eq!(marks_of(store, &b).await, vec![mark("p", 1, 0, 1)]);

    let twice = vec![set("p", 1, 0, 1), set("p", 1, 0, 2)];
    let r = store.write_state(&a, state(1, "s1"), None, twice).await;
    assert_malformed(&r.unwrap(), "durable state, set twice");
    assert_eq!(
        store.load_state(&a).await.unwrap(),
        None,
        "no state written"
    );
    assert!(marks_of(store, &a).await.is_empty());
}

/// A durable-state write changes its marks when accepted, and none when refused for its
/// revision or its fence.
pub async fn marks_with_durable_state<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("marks-state");
    let scope = format!("{prefix}|s");
    let pid = persistence_id(&prefix, "a");
    let fence = |token| Some(Fence::new(scope.as_str(), token));
    let ws = |revision, fence, marks| store.write_state(&pid, state(revision, "s"), fence, marks);

    assert_eq!(ws(1, None, vec![set("p", 1, 0, 1)]).await.unwrap(), Ok(()));
    assert_eq!(marks_of(store, &pid).await, vec![mark("p", 1, 0, 1)]);

    let conflict = ws(1, None, vec![set("p", 1, 0, 2), set("q", 1, 0, 1)]).await;
    assert!(
        matches!(conflict, Ok(Err(WriteRefused::RevisionConflict { .. }))),
        "{conflict:?}"
    );
    assert_eq!(
        marks_of(store, &pid).await,
        vec![mark("p", 1, 0, 1)],
        "a revision conflict changes no mark"
    );

    let next = vec![remove("p"), set("q", 1, 0, 1)];
    assert_eq!(ws(2, None, next).await.unwrap(), Ok(()));
    assert_eq!(marks_of(store, &pid).await, vec![mark("q", 1, 0, 1)]);

    assert_eq!(
        ws(3, fence(5), vec![set("r", 1, 0, 1)]).await.unwrap(),
        Ok(())
    );
    let fenced = ws(4, fence(4), vec![remove("q")]).await;
    assert!(
        matches!(fenced, Ok(Err(WriteRefused::Fenced { .. }))),
        "{fenced:?}"
    );
    assert_eq!(
        marks_of(store, &pid).await,
        vec![mark("q", 1, 0, 1), mark("r", 1, 0, 1)],
        "a fenced write changes no mark"
    );
    assert_eq!(ws(4, None, Vec::new()).await.unwrap(), Ok(()));
    assert_eq!(
        marks_of(store, &pid).await.len(),
        2,
        "no marks: none change"
    );
    assert_eq!(store.load_state(&pid).await.unwrap().unwrap().revision, 4);
}

/// Each start of a producer gets the next epoch (1 first), producers count on their own, and
/// starts made at once all get different epochs, with none skipped. An empty producer id is
/// refused.
pub async fn producer_epochs_count_up<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("producer");
    let (p, q, racing) = (
        format!("{prefix}-p"),
        format!("{prefix}-q"),
        format!("{prefix}-racing"),
    );
    for expected in 1..=3 {
        assert_eq!(store.start_producer(&p).await.unwrap(), expected);
    }
    assert_eq!(store.start_producer(&q).await.unwrap(), 1, "its own count");
    assert_eq!(store.start_producer(&p).await.unwrap(), 4);

    let starts =
        futures_util::future::join_all((0..8).map(|_| store.start_producer(&racing))).await;
    let mut epochs: Vec<u64> = starts.into_iter().map(Result::unwrap).collect();
    epochs.sort_unstable();
    assert_eq!(epochs, (1..=8).collect::<Vec<u64>>(), "one epoch per start");
    assert_eq!(store.start_producer(&racing).await.unwrap(), 9);

    assert_invalid(store.start_producer("").await, "start without a producer");
}

fn message(kind: &str, entity: &str, key: (u64, u64, u64), payload: &[u8]) -> QueuedMessage {
    QueuedMessage {
        kind: kind.into(),
        entity: entity.into(),
        epoch: key.0,
        stream: key.1,
        seq: key.2,
        payload: Bytes::copy_from_slice(payload),
    }
}

fn keys(messages: &[QueuedMessage]) -> Vec<(u64, u64, u64)> {
    messages
        .iter()
        .map(|m| (m.epoch, m.stream, m.seq))
        .collect()
}

/// A producer's queue reads back whole in stream order (epoch, stream, sequence number);
/// enqueueing a message of a key held replaces it; a confirmation deletes exactly its
/// stream's messages up to its number; other producers' queues are untouched; an empty
/// producer id is refused.
pub async fn producer_queues_round_trip<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("queue");
    let (p, other) = (format!("{prefix}-p"), format!("{prefix}-other"));
    let kind = format!("{prefix}-kind");
    assert!(store.queued(&p).await.unwrap().is_empty());
    let first = vec![
        message(&kind, "e1", (2, 0, 1), b"m201"),
        message(&kind, "e2", (1, 1, 2), b""),
        message(&kind, "e1", (1, 0, 3), &[0, 255, 0]),
        message(&kind, "e1", (1, 0, 1), b"m101"),
        message(&kind, "e3", (1, 1, 1), b"m111"),
    ];
    store.enqueue(&p, first.clone()).await.unwrap();
    store
        .enqueue(&other, vec![message(&kind, "x", (1, 0, 1), b"other")])
        .await
        .unwrap();
    let mut sorted = first;
    sorted.sort_by_key(|m| (m.epoch, m.stream, m.seq));
    assert_eq!(store.queued(&p).await.unwrap(), sorted, "in stream order");

    let replacement = message("another-kind", "e9", (1, 0, 1), b"replaced");
    store.enqueue(&p, vec![replacement.clone()]).await.unwrap();
    let queued = store.queued(&p).await.unwrap();
    assert_eq!(queued.len(), 5, "replaced, not added");
    assert_eq!(queued[0], replacement);
    store.enqueue(&p, Vec::new()).await.unwrap();
    let twice = vec![
        message(&kind, "e1", (3, 0, 1), b"first"),
        message(&kind, "e1", (3, 0, 1), b"second"),
    ];
    store.enqueue(&p, twice).await.unwrap();
    let queued = store.queued(&p).await.unwrap();
    assert_eq!(
        &queued.last().unwrap().payload[..],
        b"second",
        "one call's messages are enqueued one after the other"
    );
    assert_eq!(queued.len(), 6);

    let confirm = |epoch, stream, up_to| QueueConfirmation {
        epoch,
        stream,
        up_to,
    };
    store
        .confirm_queued(&p, vec![confirm(1, 0, 1), confirm(1, 1, 5)])
        .await
        .unwrap();
    assert_eq!(
        keys(&store.queued(&p).await.unwrap()),
        vec![(1, 0, 3), (2, 0, 1), (3, 0, 1)],
        "each confirmation covers its own stream up to its number"
    );
    store
        .confirm_queued(
            &p,
            vec![confirm(2, 0, 0), confirm(9, 0, 9), confirm(1, 0, 2)],
        )
        .await
        .unwrap();
    assert_eq!(
        keys(&store.queued(&p).await.unwrap()),
        vec![(1, 0, 3), (2, 0, 1), (3, 0, 1)],
        "confirmations that cover nothing delete nothing"
    );
    store
        .confirm_queued(&format!("{prefix}-unknown"), vec![confirm(1, 0, 9)])
        .await
        .unwrap();
    store
        .confirm_queued(
            &p,
            vec![confirm(1, 0, u64::MAX), confirm(2, 0, 1), confirm(3, 0, 1)],
        )
        .await
        .unwrap();
    assert!(store.queued(&p).await.unwrap().is_empty(), "all confirmed");
    assert_eq!(
        store.queued(&other).await.unwrap(),
        vec![message(&kind, "x", (1, 0, 1), b"other")],
        "another producer's queue is its own"
    );

    assert_invalid(store.enqueue("", Vec::new()).await, "enqueue");
    assert_invalid(store.confirm_queued("", Vec::new()).await, "confirm");
    assert_invalid(store.queued("").await, "queued");
}

/// `lease_names` lists exactly the leases whose names start with the prefix, held or not,
/// sorted by bytes: not those differing in case, and `%` and `_` are plain characters.
pub async fn lease_names_by_prefix<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("names");
    let names: Vec<String> = [
        "kind/1", "kind/2", "KIND/3", "kind2/1", "k_nd%/1", "kxnd/1", "é/1",
    ]
    .iter()
    .map(|n| format!("{prefix}/{n}"))
    .collect();
    for name in &names {
        assert!(matches!(
            store.acquire_lease(name, "n", LONG).await.unwrap(),
            LeaseAcquired::Granted(_)
        ));
    }
    let released = &names[1];
    let token = store.read_lease(released).await.unwrap().unwrap().token;
    assert!(store.release_lease(released, "n", token).await.unwrap());

    let listed = |p: &str| {
        let p = format!("{prefix}/{p}");
        async move { store.lease_names(&p).await.unwrap() }
    };
    let named = |ns: &[usize]| ns.iter().map(|&i| names[i].clone()).collect::<Vec<_>>();
    assert_eq!(listed("kind/").await, named(&[0, 1]), "held or not");
    assert_eq!(listed("kind").await, named(&[0, 1, 3]));
    assert_eq!(listed("k_nd%").await, named(&[4]), "no wildcards");
    assert_eq!(listed("KIND").await, named(&[2]), "case counts");
    assert_eq!(listed("é").await, named(&[6]));
    assert!(listed("none").await.is_empty());
    let mut all = names.clone();
    all.sort();
    assert_eq!(listed("").await, all, "sorted by bytes");
}

async fn granted<S: Store + ?Sized>(store: &S, name: &str, owner: &str, ttl: Duration) -> u64 {
    match store.acquire_lease(name, owner, ttl).await.unwrap() {
        LeaseAcquired::Granted(LeaseGrant { token, .. }) => token,
        other => panic!("{owner} should get {name}: {other:?}"),
    }
}

/// Removing a kind's data: refused, changing nothing, while one of the named leases is held
/// (naming the first such); once none is (released, expired or never taken), it removes in
/// one go the kind's remembered entities, the named leases and their fences (so an old token
/// under such a scope is accepted again) and every producer's queued messages to the kind,
/// and counts them; removing again removes nothing. Another kind's data, and the kind's
/// journals and marks, stay.
pub async fn removing_a_kinds_data<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("remove");
    let (kind, other) = (format!("{prefix}-gone"), format!("{prefix}-kept"));
    let ids = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // A lease's fence scope is its name, as sharding names them.
    let [l1, l2, l3] = ["1", "2", "3"].map(|shard| format!("{kind}|{shard}"));
    let kept_lease = format!("{other}|1");
    let named = vec![l1.clone(), l2.clone(), l3.clone()];
    let (p, q) = (format!("{prefix}-p"), format!("{prefix}-q"));
    let (a, x) = (persistence_id(&kind, "a"), persistence_id(&other, "x"));

    store
        .update_remembered(&kind, "1", &ids(&["a", "b"]), &[])
        .await
        .unwrap();
    store
        .update_remembered(&kind, "2", &ids(&["c"]), &[])
        .await
        .unwrap();
    store
        .update_remembered(&other, "1", &ids(&["x"]), &[])
        .await
        .unwrap();
    let t1 = granted(store, &l1, "n1", LONG).await;
    let short = Duration::from_millis(300);
    granted(store, &l2, "n1", short).await;
    // The store granted it before now: it has expired by now plus its time-to-live.
    let l2_granted = Instant::now();
    granted(store, &kept_lease, "n2", LONG).await;
    let answers = store
        .append(vec![
            write(&a, vec![event(1, "a1", &[])])
                .with_marks(vec![set("p", 1, 0, 1)])
                .fenced(Fence::new(l1.as_str(), 5)),
            write(&x, vec![event(1, "x1", &[])]).fenced(Fence::new(kept_lease.as_str(), 5)),
        ])
        .await
        .unwrap();
    assert_eq!(answers, vec![Ok(()), Ok(())]);
    store
        .enqueue(
            &p,
            vec![
                message(&kind, "a", (1, 0, 1), b"p1"),
                message(&other, "x", (1, 0, 2), b"p2"),
                message(&kind, "b", (1, 1, 1), b"p3"),
            ],
        )
        .await
        .unwrap();
    store
        .enqueue(&q, vec![message(&kind, "c", (1, 0, 1), b"q1")])
        .await
        .unwrap();

    match store.remove_kind_data(&kind, &named).await.unwrap() {
        Err(LeaseStillHeld {
            lease,
            owner,
            time_left_ms,
        }) => {
            assert_eq!((lease.as_str(), owner.as_str()), (l1.as_str(), "n1"));
            assert!(time_left_ms > 0 && time_left_ms <= 60_000, "{time_left_ms}");
        }
        removed => panic!("removed while {l1} is held: {removed:?}"),
    }
    assert_eq!(
        store.remembered_shards(&kind).await.unwrap(),
        ids(&["1", "2"]),
        "a refused removal changes nothing"
    );
    assert_eq!(
        store.read_lease(&l1).await.unwrap().unwrap().holder(),
        Some("n1")
    );
    assert_eq!(store.queued(&p).await.unwrap().len(), 3);
    assert_eq!(store.queued(&q).await.unwrap().len(), 1);
    let stale = write(&a, vec![event(2, "stale", &[])]).fenced(Fence::new(l1.as_str(), 4));
    assert!(
        matches!(one(store, stale).await, Err(WriteRefused::Fenced { .. })),
        "the fence stays"
    );

    // l1 released, l2 expired, l3 never taken: nothing held.
    assert!(store.release_lease(&l1, "n1", t1).await.unwrap());
    tokio::time::sleep(
        (l2_granted + short + Duration::from_millis(50)).duration_since(Instant::now()),
    )
    .await;
    let removed = store.remove_kind_data(&kind, &named).await.unwrap();
    assert_eq!(
        removed,
        Ok(KindDataRemoved {
            remembered: 3,
            leases: 2,
            fences: 1,
            queued: 3,
        })
    );
    assert_eq!(
        store.remove_kind_data(&kind, &named).await.unwrap(),
        Ok(KindDataRemoved::default()),
        "nothing left to remove"
    );

    assert!(store.remembered_shards(&kind).await.unwrap().is_empty());
    assert_eq!(store.remembered_shards(&other).await.unwrap(), ids(&["1"]));
    assert_eq!(
        store.remembered_entities(&other, "1").await.unwrap(),
        ids(&["x"])
    );
    assert_eq!(store.read_lease(&l1).await.unwrap(), None);
    assert_eq!(store.read_lease(&l2).await.unwrap(), None);
    assert_eq!(
        store.lease_names(&prefix).await.unwrap(),
        vec![kept_lease.clone()]
    );
    let old_token = write(&a, vec![event(2, "a2", &[])]).fenced(Fence::new(l1.as_str(), 1));
    assert_eq!(
        one(store, old_token).await,
        Ok(()),
        "the removed lease's fence no longer refuses an old token"
    );
    let kept_stale = write(&x, vec![event(2, "stale", &[])]).fenced(Fence::new(&*kept_lease, 4));
    assert!(
        matches!(
            one(store, kept_stale).await,
            Err(WriteRefused::Fenced { .. })
        ),
        "another kind's fence stays"
    );
    assert_eq!(
        store.queued(&p).await.unwrap(),
        vec![message(&other, "x", (1, 0, 2), b"p2")],
        "another kind's messages stay"
    );
    assert!(store.queued(&q).await.unwrap().is_empty());
    assert_eq!(
        payloads(&store.read_events(&a, 1, u64::MAX, 10).await.unwrap()),
        vec![(1, "a1".into()), (2, "a2".into())],
        "the journal stays"
    );
    assert_eq!(
        marks_of(store, &a).await,
        vec![mark("p", 1, 0, 1)],
        "marks stay"
    );

    granted(store, &l1, "n3", LONG).await;
}

/// A store that keeps no delivery data says so by refusing every delivery call, rather than
/// answering as if it kept them.
pub async fn delivery_calls_are_refused<S: Store + ?Sized>(store: &S) {
    let p = fresh("refused");
    assert!(store.delivery_marks(&p).await.is_err());
    assert!(store.start_producer(&p).await.is_err());
    assert!(store.enqueue(&p, Vec::new()).await.is_err());
    assert!(store.confirm_queued(&p, Vec::new()).await.is_err());
    assert!(store.queued(&p).await.is_err());
    assert!(store.lease_names(&p).await.is_err());
    assert!(store.remove_kind_data(&p, &[]).await.is_err());
}
