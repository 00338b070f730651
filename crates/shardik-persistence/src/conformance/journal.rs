//! The journal rules every store keeps: events come back in order; a taken sequence number
//! refuses the whole write; a batch answers each write on its own; deleted events keep their
//! numbers; tags and manifests round-trip; snapshots, durable state and remembered entities
//! keep what was last written.

use bytes::Bytes;

use super::fixtures::{event, fresh, payloads, write};
use crate::error::WriteRefused;
use crate::records::{NewEvent, PersistenceId, Snapshot, StoredState, persistence_id};
use crate::store::Store;
use crate::write::AtomicWrite;

/// Events come back in order, bounded by range and count; the highest number is known.
pub async fn journal_round_trip<S: Store + ?Sized>(store: &S) {
    let pid = persistence_id(&fresh("rt"), "a");
    assert_eq!(store.highest_seq(&pid).await.unwrap(), 0);
    let r = store
        .append(vec![write(
            &pid,
            vec![event(1, "one", &[]), event(2, "two", &[])],
        )])
        .await
        .unwrap();
    assert_eq!(r, vec![Ok(())]);
    let r = store
        .append(vec![write(&pid, vec![event(3, "three", &[])])])
        .await
        .unwrap();
    assert_eq!(r, vec![Ok(())]);
    assert_eq!(store.highest_seq(&pid).await.unwrap(), 3);
    let all = store
        .read_events(&pid, 1, u64::MAX, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        payloads(&all),
        vec![(1, "one".into()), (2, "two".into()), (3, "three".into())]
    );
    let middle = store.read_events(&pid, 2, 2, 10).await.unwrap();
    assert_eq!(payloads(&middle), vec![(2, "two".into())]);
    let first_two = store.read_events(&pid, 1, u64::MAX, 2).await.unwrap();
    assert_eq!(first_two.len(), 2);
}

/// A write that claims a taken number is refused as a whole: none of its events lands.
pub async fn taken_sequence_refuses_the_whole_write<S: Store + ?Sized>(store: &S) {
    let pid = persistence_id(&fresh("taken"), "a");
    store
        .append(vec![write(&pid, vec![event(1, "first", &[])])])
        .await
        .unwrap();
    let r = store
        .append(vec![write(
            &pid,
            vec![event(1, "rival", &[]), event(2, "rival-2", &[])],
        )])
        .await
        .unwrap();
    assert!(
        matches!(&r[..], [Err(WriteRefused::SequenceTaken { seq: 1, .. })]),
        "{r:?}"
    );
    let all = store.read_events(&pid, 1, u64::MAX, 100).await.unwrap();
    assert_eq!(payloads(&all), vec![(1, "first".into())]);
    assert_eq!(store.highest_seq(&pid).await.unwrap(), 1);
}

/// One batch, many writers: each write is answered on its own, refused ones change nothing.
pub async fn batch_answers_each_write<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("batch");
    let (a, b, c) = (
        persistence_id(&prefix, "a"),
        persistence_id(&prefix, "b"),
        persistence_id(&prefix, "c"),
    );
    store
        .append(vec![write(&b, vec![event(1, "b1", &[])])])
        .await
        .unwrap();
    let r = store
        .append(vec![
            write(&a, vec![event(1, "a1", &[])]),
            write(&b, vec![event(1, "b1-again", &[])]),
            write(&c, vec![event(1, "c1", &[]), event(2, "c2", &[])]),
            write(&a, vec![event(2, "a2", &[])]),
        ])
        .await
        .unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(r[0], Ok(()));
    assert!(matches!(r[1], Err(WriteRefused::SequenceTaken { .. })));
    assert_eq!(r[2], Ok(()));
    assert_eq!(r[3], Ok(()));
    let b_events = store.read_events(&b, 1, u64::MAX, 10).await.unwrap();
    assert_eq!(payloads(&b_events), vec![(1, "b1".into())]);
    assert_eq!(store.highest_seq(&a).await.unwrap(), 2);
    assert_eq!(store.highest_seq(&c).await.unwrap(), 2);
}

/// Writes of one batch that claim the same number: the earlier write that succeeds gets it,
/// as if the writes were applied one after the other.
pub async fn clashes_within_one_batch<S: Store + ?Sized>(store: &S) {
    let pid = persistence_id(&fresh("clash"), "a");
    store
        .append(vec![write(&pid, vec![event(3, "three", &[])])])
        .await
        .unwrap();
    let r = store
        .append(vec![
            // Refused: 3 is taken, so its 2 is not written either...
            write(&pid, vec![event(2, "two-a", &[]), event(3, "three-a", &[])]),
            // ...and this write gets 2...
            write(&pid, vec![event(2, "two-b", &[])]),
            // ...which this one then cannot have.
            write(&pid, vec![event(2, "two-c", &[])]),
            write(&pid, vec![event(1, "one", &[])]),
        ])
        .await
        .unwrap();
    assert!(
        matches!(r[0], Err(WriteRefused::SequenceTaken { seq: 3, .. })),
        "{r:?}"
    );
    assert_eq!(r[1], Ok(()));
    assert!(
        matches!(r[2], Err(WriteRefused::SequenceTaken { seq: 2, .. })),
        "{r:?}"
    );
    assert_eq!(r[3], Ok(()));
    let all = store.read_events(&pid, 1, u64::MAX, 10).await.unwrap();
    assert_eq!(
        payloads(&all),
        vec![(1, "one".into()), (2, "two-b".into()), (3, "three".into())]
    );
}

/// Tags come back in the order written (even a repeated one), empty payloads stay empty (not
/// deleted), and empty ranges read nothing.
pub async fn tags_and_empty_payloads_round_trip<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("roundtrip");
    let pid = persistence_id(&prefix, "a");
    let tag = format!("{prefix}-tag");
    let tags = vec![
        "zeta".to_string(),
        tag.clone(),
        "alpha".to_string(),
        tag.clone(),
    ];
    let first = NewEvent {
        seq: 1,
        payload: Bytes::new(),
        manifest: "".into(),
        tags: tags.clone(),
    };
    let second = NewEvent {
        seq: 2,
        payload: Bytes::from_static(&[0, 255, 0, 1]),
        manifest: "".into(),
        tags: Vec::new(),
    };
    let r = store
        .append(vec![write(&pid, vec![first, second])])
        .await
        .unwrap();
    assert_eq!(r, vec![Ok(())]);
    let all = store
        .read_events(&pid, 1, u64::MAX, usize::MAX)
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!((&all[0].payload[..], &all[0].tags), (&b""[..], &tags));
    assert_eq!(
        (&all[1].payload[..], all[1].tags.len()),
        (&[0, 255, 0, 1][..], 0)
    );
    assert!(store.read_events(&pid, 2, 1, 10).await.unwrap().is_empty());
    assert!(store.read_events(&pid, 1, 2, 0).await.unwrap().is_empty());
    let found = store.events_by_tag(&tag, 0, 10).await.unwrap();
    assert_eq!(
        found.len(),
        1,
        "an event is found once however often it has the tag"
    );
    assert_eq!((found[0].seq, &found[0].payload[..]), (1, &b""[..]));
}

/// Each event's manifest comes back as written, by journal and by tag, whatever it holds
/// (empty, or text a SQL string would need escaped), and events of one journal may differ in
/// it (a journal written by two versions of a program).
pub async fn manifests_round_trip<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("manifest");
    let pid = persistence_id(&prefix, "a");
    let tag = format!("{prefix}-tag");
    let manifests = ["cbor/1", "", "json/2; it's \"quoted\" ü", "cbor/2"];
    for (seq, manifest) in (1..).zip(manifests) {
        let new = NewEvent {
            seq,
            payload: Bytes::from(vec![seq as u8]),
            manifest: manifest.into(),
            tags: vec![tag.clone()],
        };
        let written = store.append(vec![write(&pid, vec![new])]).await.unwrap();
        assert_eq!(written, vec![Ok(())]);
    }
    let read = store.read_events(&pid, 1, u64::MAX, 10).await.unwrap();
    let read: Vec<&str> = read.iter().map(|e| &*e.manifest).collect();
    assert_eq!(read, manifests);
    let tagged = store.events_by_tag(&tag, 0, 10).await.unwrap();
    let tagged: Vec<&str> = tagged.iter().map(|e| &*e.manifest).collect();
    assert_eq!(tagged, manifests);
}

/// One batch carrying a write for each of `entities` journals: all written; the same batch
/// again: all refused, nothing changed; half new, half taken: each answered on its own.
pub async fn many_writes_in_one_batch<S: Store + ?Sized>(store: &S, entities: usize) {
    let prefix = fresh("many");
    let pids: Vec<PersistenceId> = (0..entities)
        .map(|i| persistence_id(&prefix, &i.to_string()))
        .collect();
    let batch = |seq: u64, text: &str| -> Vec<AtomicWrite> {
        pids.iter()
            .map(|pid| write(pid, vec![event(seq, text, &[])]))
            .collect()
    };
    let r = store.append(batch(1, "first")).await.unwrap();
    assert_eq!(r.len(), entities);
    assert!(
        r.iter().all(|r| r.is_ok()),
        "every write of the batch lands"
    );
    let r = store.append(batch(1, "again")).await.unwrap();
    assert_eq!(r.len(), entities);
    assert!(
        r.iter()
            .all(|r| matches!(r, Err(WriteRefused::SequenceTaken { seq: 1, .. }))),
        "every write is refused"
    );
    // Even journals get their second event now; then a batch of seq 2 for all: only the odd
    // ones land.
    let evens: Vec<AtomicWrite> = pids
        .iter()
        .step_by(2)
        .map(|pid| write(pid, vec![event(2, "early", &[])]))
        .collect();
    assert!(store.append(evens).await.unwrap().iter().all(|r| r.is_ok()));
    let r = store.append(batch(2, "late")).await.unwrap();
    for (i, answer) in r.iter().enumerate() {
        if i % 2 == 0 {
            assert!(matches!(
                answer,
                Err(WriteRefused::SequenceTaken { seq: 2, .. })
            ));
        } else {
            assert_eq!(answer, &Ok(()));
        }
    }
    for (i, pid) in pids.iter().enumerate().step_by(97) {
        let events = store.read_events(pid, 1, u64::MAX, 10).await.unwrap();
        let second = if i % 2 == 0 { "early" } else { "late" };
        assert_eq!(
            payloads(&events),
            vec![(1, "first".into()), (2, second.into())]
        );
    }
}

/// Deleted events are not read back, but their numbers stay taken.
pub async fn deleted_events_keep_their_numbers<S: Store + ?Sized>(store: &S) {
    let pid = persistence_id(&fresh("deleted"), "a");
    let events = (1..=4).map(|i| event(i, &format!("e{i}"), &[])).collect();
    store.append(vec![write(&pid, events)]).await.unwrap();
    store.delete_events_to(&pid, 4).await.unwrap();
    assert!(
        store
            .read_events(&pid, 1, u64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.highest_seq(&pid).await.unwrap(), 4);
    let r = store
        .append(vec![write(&pid, vec![event(3, "again", &[])])])
        .await
        .unwrap();
    assert!(matches!(r[0], Err(WriteRefused::SequenceTaken { .. })));
    let r = store
        .append(vec![write(&pid, vec![event(5, "e5", &[])])])
        .await
        .unwrap();
    assert_eq!(r, vec![Ok(())]);
    let left = store.read_events(&pid, 1, u64::MAX, 10).await.unwrap();
    assert_eq!(payloads(&left), vec![(5, "e5".into())]);
}

/// The latest snapshot is the one with the highest number; older ones can be deleted.
pub async fn snapshots_latest_and_deletion<S: Store + ?Sized>(store: &S) {
    let pid = persistence_id(&fresh("snap"), "a");
    assert_eq!(store.latest_snapshot(&pid).await.unwrap(), None);
    for seq in [10, 30, 20] {
        store
            .save_snapshot(
                &pid,
                Snapshot {
                    seq,
                    payload: Bytes::from(format!("s{seq}")),
                },
            )
            .await
            .unwrap();
    }
    let latest = store.latest_snapshot(&pid).await.unwrap().unwrap();
    assert_eq!((latest.seq, &latest.payload[..]), (30, &b"s30"[..]));
    store.delete_snapshots_below(&pid, 30).await.unwrap();
    let latest = store.latest_snapshot(&pid).await.unwrap().unwrap();
    assert_eq!(latest.seq, 30);
    store
        .save_snapshot(
            &pid,
            Snapshot {
                seq: 30,
                payload: Bytes::from_static(b"s30-replaced"),
            },
        )
        .await
        .unwrap();
    let latest = store.latest_snapshot(&pid).await.unwrap().unwrap();
    assert_eq!(&latest.payload[..], b"s30-replaced");
}

/// Durable state: revision 1 first, then each write exactly one more; a stale one is refused.
pub async fn durable_state_moves_one_revision_at_a_time<S: Store + ?Sized>(store: &S) {
    let pid = persistence_id(&fresh("state"), "a");
    let state = |revision, text: &'static str| StoredState {
        revision,
        payload: Bytes::from_static(text.as_bytes()),
    };
    assert_eq!(store.load_state(&pid).await.unwrap(), None);
    assert!(matches!(
        store
            .write_state(&pid, state(2, "skip"), None, Vec::new())
            .await
            .unwrap(),
        Err(WriteRefused::RevisionConflict { .. })
    ));
    assert_eq!(
        store
            .write_state(&pid, state(1, "v1"), None, Vec::new())
            .await
            .unwrap(),
        Ok(())
    );
    assert_eq!(
        store
            .write_state(&pid, state(2, "v2"), None, Vec::new())
            .await
            .unwrap(),
        Ok(())
    );
    assert!(matches!(
        store
            .write_state(&pid, state(2, "rival"), None, Vec::new())
            .await
            .unwrap(),
        Err(WriteRefused::RevisionConflict { .. })
    ));
    assert_eq!(store.load_state(&pid).await.unwrap(), Some(state(2, "v2")));
}

/// Remembered entities per shard: started ones are listed, stopped ones go, empty shards go.
pub async fn remembered_entities_per_shard<S: Store + ?Sized>(store: &S) {
    let kind = fresh("remember");
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    store
        .update_remembered(&kind, "7", &ids(&["b", "a", "c"]), &[])
        .await
        .unwrap();
    store
        .update_remembered(&kind, "3", &ids(&["x"]), &[])
        .await
        .unwrap();
    store
        .update_remembered(&kind, "7", &ids(&["d"]), &ids(&["b", "d"]))
        .await
        .unwrap();
    assert_eq!(
        store.remembered_shards(&kind).await.unwrap(),
        ids(&["3", "7"])
    );
    assert_eq!(
        store.remembered_entities(&kind, "7").await.unwrap(),
        ids(&["a", "c"])
    );
    store
        .update_remembered(&kind, "3", &[], &ids(&["x"]))
        .await
        .unwrap();
    assert_eq!(store.remembered_shards(&kind).await.unwrap(), ids(&["7"]));
    assert!(
        store
            .remembered_entities(&kind, "3")
            .await
            .unwrap()
            .is_empty()
    );
}

/// Tagged events come back in commit order, resumable after the last offset seen.
pub async fn events_by_tag_in_commit_order<S: Store + ?Sized>(store: &S) {
    let prefix = fresh("tags");
    let tag = format!("{prefix}-tag");
    let (a, b) = (persistence_id(&prefix, "a"), persistence_id(&prefix, "b"));
    store
        .append(vec![
            write(&a, vec![event(1, "a1", &[&tag]), event(2, "a2", &[])]),
            write(&b, vec![event(1, "b1", &[&tag, "other"])]),
        ])
        .await
        .unwrap();
    store
        .append(vec![write(&a, vec![event(3, "a3", &[&tag])])])
        .await
        .unwrap();
    let found = store.events_by_tag(&tag, 0, 100).await.unwrap();
    let seen: Vec<(String, u64)> = found
        .iter()
        .map(|e| (e.persistence_id.to_string(), e.seq))
        .collect();
    assert_eq!(
        seen,
        vec![(a.to_string(), 1), (b.to_string(), 1), (a.to_string(), 3)]
    );
    assert!(found.windows(2).all(|w| w[0].offset < w[1].offset));
    let rest = store
        .events_by_tag(&tag, found[0].offset, 100)
        .await
        .unwrap();
    assert_eq!(rest.len(), 2);
    let one = store.events_by_tag(&tag, 0, 1).await.unwrap();
    assert_eq!(one.len(), 1);
}

/// Two writers race for the same journal, each claiming the next number after what it last
/// saw: every number ends up written exactly once, and each writer's refused writes are the
/// ones the other won.
pub async fn racing_writers_never_interleave<S: Store + ?Sized>(
    first: &S,
    second: &S,
    rounds: u64,
) {
    let pid = persistence_id(&fresh("race"), "a");
    let (a, b) = futures_util::future::join(
        race_writer(first, &pid, "first", rounds),
        race_writer(second, &pid, "second", rounds),
    )
    .await;
    let events = first
        .read_events(&pid, 1, u64::MAX, usize::MAX)
        .await
        .unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=rounds).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    for e in &events {
        let winner = if a.contains(&e.seq) {
            "first"
        } else {
            "second"
        };
        assert!(
            a.contains(&e.seq) != b.contains(&e.seq),
            "seq {} claimed by both or neither",
            e.seq
        );
        assert_eq!(&e.payload[..], winner.as_bytes());
    }
}

/// One of the racing writers: the numbers it won.
async fn race_writer<S: Store + ?Sized>(
    store: &S,
    pid: &PersistenceId,
    name: &str,
    rounds: u64,
) -> Vec<u64> {
    let mut won = Vec::new();
    let mut next = 1;
    while next <= rounds {
        let r = store
            .append(vec![write(pid, vec![event(next, name, &[])])])
            .await
            .unwrap();
        match &r[..] {
            [Ok(())] => {
                won.push(next);
                next += 1;
            }
            [Err(WriteRefused::SequenceTaken { .. })] => {
                next = store.highest_seq(pid).await.unwrap() + 1;
            }
            other => panic!("unexpected answer {other:?}"),
        }
        // Let the other writer run between writes on a single-threaded runtime.
        tokio::task::yield_now().await;
    }
    won
}
