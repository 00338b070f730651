//! The fence rules every store keeps: a write whose token is older than the newest accepted
//! in its scope is refused whole; an equal or newer one is accepted and raises the bar; a
//! refused write raises nothing; writes without a fence are not checked; journals and durable
//! state share the scopes.

use std::sync::Arc;

use bytes::Bytes;

use super::fixtures::{event, fresh, payloads, write};
use crate::error::{WriteRefused, WriteResult};
use crate::fence::Fence;
use crate::records::{PersistenceId, StoredState, persistence_id};
use crate::store::Store;
use crate::write::AtomicWrite;

fn fenced(pid: &PersistenceId, seq: u64, text: &str, scope: &str, token: u64) -> AtomicWrite {
    write(pid, vec![event(seq, text, &[])]).fenced(Fence::new(scope, token))
}

/// Asserts a refusal by fence, naming the scope, the write's token and the newest.
fn assert_fenced(result: &WriteResult, scope: &str, token: u64, newest: u64) {
    match result {
        Err(WriteRefused::Fenced {
            scope: s,
            token: t,
            newest: n,
            ..
        }) => assert_eq!((&**s, *t, *n), (scope, token, newest), "{result:?}"),
        other => panic!("expected Fenced({scope}, {token} < {newest}), got {other:?}"),
    }
}

async fn one<S: Store + ?Sized>(store: &S, w: AtomicWrite) -> WriteResult {
    let mut answers = store.append(vec![w]).await.unwrap();
    assert_eq!(answers.len(), 1);
    answers.remove(0)
}

/// Older tokens are refused whole, equal and newer ones accepted; scopes are independent;
/// unfenced writes are not checked; a refused write raises nothing; malformed fences are
/// refused.
pub async fn fences_refuse_older_tokens<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("fence");
    let (scope, other) = (format!("{prefix}|1"), format!("{prefix}|2"));
    let (a, b) = (persistence_id(&prefix, "a"), persistence_id(&prefix, "b"));

    assert_eq!(one(store, fenced(&a, 1, "a1", &scope, 5)).await, Ok(()));
    let r = one(store, fenced(&a, 2, "stale", &scope, 4)).await;
    assert_fenced(&r, &scope, 4, 5);
    assert_eq!(store.highest_seq(&a).await.unwrap(), 1, "nothing written");
    assert_eq!(one(store, fenced(&a, 2, "a2", &scope, 5)).await, Ok(()));
    assert_eq!(one(store, fenced(&a, 3, "a3", &scope, 7)).await, Ok(()));
    assert_fenced(
        &one(store, fenced(&a, 4, "x", &scope, 6)).await,
        &scope,
        6,
        7,
    );
    assert_eq!(
        one(store, write(&a, vec![event(4, "a4", &[])])).await,
        Ok(()),
        "a write without a fence is not checked"
    );
    assert_eq!(
        one(store, fenced(&b, 1, "b1", &other, 1)).await,
        Ok(()),
        "another scope has its own newest token"
    );

    // Refused for its number: its token (9) does not become the newest.
    let r = one(store, fenced(&a, 4, "taken", &scope, 9)).await;
    assert!(
        matches!(r, Err(WriteRefused::SequenceTaken { seq: 4, .. })),
        "{r:?}"
    );
    assert_eq!(one(store, fenced(&a, 5, "a5", &scope, 8)).await, Ok(()));
    assert_fenced(
        &one(store, fenced(&a, 6, "x", &scope, 7)).await,
        &scope,
        7,
        8,
    );

    let all = store.read_events(&a, 1, u64::MAX, 100).await.unwrap();
    assert_eq!(
        payloads(&all),
        vec![
            (1, "a1".into()),
            (2, "a2".into()),
            (3, "a3".into()),
            (4, "a4".into()),
            (5, "a5".into())
        ]
    );

    for (fence, what) in [
        (Fence::new("", 1), "an empty scope"),
        (Fence::new(scope.as_str(), u64::MAX), "a token above 2^63-1"),
    ] {
        let r = one(store, write(&a, vec![event(6, "x", &[])]).fenced(fence)).await;
        assert!(
            matches!(r, Err(WriteRefused::Malformed { .. })),
            "{what}: {r:?}"
        );
    }
    assert_eq!(store.highest_seq(&a).await.unwrap(), 5);
}

/// The writes of one batch are judged one after the other: an earlier accepted write raises
/// the bar for later ones, and an earlier refused one (by fence, by a number taken before the
/// batch, or by a number an earlier write of the batch took) raises nothing.
pub async fn fences_within_one_batch<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("fence-batch");
    let scope = format!("{prefix}|s");
    let (p, q, r) = (
        persistence_id(&prefix, "p"),
        persistence_id(&prefix, "q"),
        persistence_id(&prefix, "r"),
    );
    assert_eq!(
        one(store, write(&r, vec![event(1, "r1", &[])])).await,
        Ok(())
    );
    let answers = store
        .append(vec![
            fenced(&p, 1, "p1", &scope, 3),
            fenced(&q, 1, "stale", &scope, 2),
            fenced(&q, 1, "q1", &scope, 3),
            fenced(&p, 1, "clash", &scope, 4),
            fenced(&p, 2, "p2", &scope, 3),
            fenced(&q, 1, "clash", &scope, 5),
            fenced(&q, 2, "q2", &scope, 4),
            fenced(&p, 3, "stale", &scope, 3),
            fenced(&r, 1, "taken", &scope, 9),
            fenced(&r, 2, "r2", &scope, 4),
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 10);
    assert_eq!(answers[0], Ok(()));
    assert_fenced(&answers[1], &scope, 2, 3);
    assert_eq!(answers[2], Ok(()));
    assert!(
        matches!(answers[3], Err(WriteRefused::SequenceTaken { seq: 1, .. })),
        "{answers:?}"
    );
    assert_eq!(answers[4], Ok(()), "the clash raised nothing: {answers:?}");
    assert!(
        matches!(answers[5], Err(WriteRefused::SequenceTaken { seq: 1, .. })),
        "{answers:?}"
    );
    assert_eq!(answers[6], Ok(()));
    assert_fenced(&answers[7], &scope, 3, 4);
    assert!(
        matches!(answers[8], Err(WriteRefused::SequenceTaken { seq: 1, .. })),
        "{answers:?}"
    );
    assert_eq!(
        answers[9],
        Ok(()),
        "the taken write raised nothing: {answers:?}"
    );

    let read = |pid: &PersistenceId| {
        let pid = Arc::clone(pid);
        async move { payloads(&store.read_events(&pid, 1, u64::MAX, 10).await.unwrap()) }
    };
    assert_eq!(read(&p).await, vec![(1, "p1".into()), (2, "p2".into())]);
    assert_eq!(read(&q).await, vec![(1, "q1".into()), (2, "q2".into())]);
    assert_eq!(read(&r).await, vec![(1, "r1".into()), (2, "r2".into())]);
    // The batch left 4 as the newest.
    assert_fenced(
        &one(store, fenced(&p, 3, "x", &scope, 3)).await,
        &scope,
        3,
        4,
    );
    assert_eq!(one(store, fenced(&p, 3, "p3", &scope, 4)).await, Ok(()));
}

/// Durable-state writes are judged and raise bars as journal writes do, in the same scopes.
pub async fn fences_on_durable_state<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("fence-state");
    let scope = format!("{prefix}|s");
    let pid = persistence_id(&prefix, "a");
    let state = |revision, text: &'static str| StoredState {
        revision,
        payload: Bytes::from_static(text.as_bytes()),
    };
    let fence = |token| Some(Fence::new(scope.as_str(), token));
    assert_eq!(
        store
            .write_state(&pid, state(1, "v1"), fence(2), Vec::new())
            .await
            .unwrap(),
        Ok(())
    );
    let r = store
        .write_state(&pid, state(2, "stale"), fence(1), Vec::new())
        .await
        .unwrap();
    assert_fenced(&r, &scope, 1, 2);
    assert_eq!(store.load_state(&pid).await.unwrap(), Some(state(1, "v1")));
    assert_eq!(
        store
            .write_state(&pid, state(2, "v2"), fence(3), Vec::new())
            .await
            .unwrap(),
        Ok(())
    );
    let r = store
        .write_state(&pid, state(2, "late"), fence(9), Vec::new())
        .await
        .unwrap();
    assert!(
        matches!(r, Err(WriteRefused::RevisionConflict { .. })),
        "{r:?}"
    );
    assert_eq!(
        store
            .write_state(&pid, state(3, "v3"), fence(4), Vec::new())
            .await
            .unwrap(),
        Ok(()),
        "the conflicting write raised nothing"
    );
    let journal = persistence_id(&prefix, "j");
    assert_fenced(
        &one(store, fenced(&journal, 1, "x", &scope, 3)).await,
        &scope,
        3,
        4,
    );
    assert_eq!(
        store
            .write_state(&pid, state(4, "v4"), None, Vec::new())
            .await
            .unwrap(),
        Ok(())
    );
    let r = store
        .write_state(&pid, state(5, "x"), Some(Fence::new("", 5)), Vec::new())
        .await
        .unwrap();
    assert!(matches!(r, Err(WriteRefused::Malformed { .. })), "{r:?}");
    assert_eq!(store.load_state(&pid).await.unwrap(), Some(state(4, "v4")));
}

/// Two writers under one scope race, the second with a newer token: once the second's write
/// is committed, no write of the first commits any more (each writer uses journals of its own,
/// so only the fence can refuse them). Commit order shows in the events' global order.
pub async fn fenced_writers_racing<S: Store + ?Sized>(first: &S, second: &S) {
    let prefix = fresh("fence-race");
    let scope = format!("{prefix}|s");
    let (old_tag, new_tag) = (format!("{prefix}-old"), format!("{prefix}-new"));
    let started = tokio::sync::Notify::new();
    let stale = async {
        let mut written = 0;
        for i in 0..10_000 {
            let pid = persistence_id(&prefix, &format!("old-{i}"));
            let w = write(&pid, vec![event(1, "old", &[&old_tag])]).fenced(Fence::new(&*scope, 1));
            match one(first, w).await {
                Ok(()) => written += 1,
                Err(WriteRefused::Fenced { newest: 2, .. }) => return written,
                Err(other) => panic!("unexpected refusal {other:?}"),
            }
            if written == 5 {
                started.notify_one();
            }
            tokio::task::yield_now().await;
        }
        panic!("the stale writer was never fenced");
    };
    let fresh_writer = async {
        started.notified().await;
        for i in 0..20 {
            let pid = persistence_id(&prefix, &format!("new-{i}"));
            let w = write(&pid, vec![event(1, "new", &[&new_tag])]).fenced(Fence::new(&*scope, 2));
            assert_eq!(one(second, w).await, Ok(()));
            tokio::task::yield_now().await;
        }
    };
    let (old_written, ()) = futures_util::future::join(stale, fresh_writer).await;
    let old = first.events_by_tag(&old_tag, 0, usize::MAX).await.unwrap();
    let new = first.events_by_tag(&new_tag, 0, usize::MAX).await.unwrap();
    assert_eq!((old.len(), new.len()), (old_written, 20));
    let last_old = old.iter().map(|e| e.offset).max().unwrap();
    let first_new = new.iter().map(|e| e.offset).min().unwrap();
    assert!(
        last_old < first_new,
        "a stale write committed after a newer token's: offset {last_old} after {first_new}"
    );
}
