//! Replication between replicators: consistency levels, partitions, deltas, gossip,
//! deletion, subscriptions, and what is refused.

use std::time::Duration;

use super::network::{Net, address};
use crate::ddata::{GCounter, OrSet, PNCounter};
use crate::replicator::{
    DropReason, GetError, Key, Outcome, ReadConsistency, ReplicatorMessage, ReplicatorSettings,
    Stored, UpdateError, WriteConsistency,
};

const TIMEOUT: Duration = Duration::from_secs(3);

fn counter() -> Key<PNCounter<crate::replicator::ReplicaId>> {
    Key::new("counter")
}

fn increment(net: &mut Net, i: usize, write: WriteConsistency) -> u64 {
    net.call(i, |r, now, out| {
        r.update(
            now,
            &counter(),
            write,
            TIMEOUT,
            PNCounter::new,
            |c, me| c.increment(&me, 1),
            out,
        )
    })
}

fn value_on(net: &Net, i: usize) -> Option<i128> {
    net.nodes[i].local_value(&counter()).map(PNCounter::value)
}

fn read_value(stored: &Stored) -> i128 {
    match stored {
        Stored::Value(envelope) => envelope
            .data
            .as_any()
            .downcast_ref::<PNCounter<crate::replicator::ReplicaId>>()
            .expect("a counter")
            .value(),
        Stored::Deleted => panic!("deleted"),
    }
}

#[test]
fn local_writes_everywhere_converge_by_deltas_and_gossip() {
    let mut net = Net::new(3, ReplicatorSettings::default());
    for i in 0..3 {
        for _ in 0..=i {
            let op = increment(&mut net, i, WriteConsistency::Local);
            assert!(matches!(
                net.take_reply(i, op),
                Some(Outcome::Update(Ok(())))
            ));
        }
    }
    net.advance(Duration::from_secs(5));
    for i in 0..3 {
        assert_eq!(value_on(&net, i), Some(6), "node {i}");
    }
}

#[test]
fn a_majority_write_succeeds_on_the_majority_side_and_fails_typed_on_the_minority() {
    let mut net = Net::new(5, ReplicatorSettings::default());
    net.isolate(&[3, 4]);

    let op = increment(&mut net, 0, WriteConsistency::Majority { min_cap: 0 });
    assert!(matches!(
        net.take_reply(0, op),
        Some(Outcome::Update(Ok(())))
    ));

    let op = increment(&mut net, 3, WriteConsistency::Majority { min_cap: 0 });
    assert!(
        net.take_reply(3, op).is_none(),
        "waits for acknowledgements"
    );
    net.advance(TIMEOUT + Duration::from_millis(100));
    match net.take_reply(3, op) {
        Some(Outcome::Update(Err(UpdateError::NotReplicated(e)))) => {
            assert_eq!((e.required, e.reached, e.applied_locally), (3, 2, true));
        }
        other => panic!("expected the typed error, got {other:?}"),
    }
    assert_eq!(value_on(&net, 3), Some(1), "applied locally all the same");

    // A majority read on the majority side sees the acknowledged write; on the minority
    // side it fails.
    let op = net.call(1, |r, now, out| {
        r.get(
            now,
            "counter",
            ReadConsistency::Majority { min_cap: 0 },
            TIMEOUT,
            out,
        )
    });
    match net.take_reply(1, op) {
        Some(Outcome::Get(Ok(Some(stored)))) => assert_eq!(read_value(&stored), 1),
        other => panic!("expected the value, got {other:?}"),
    }
    let op = net.call(4, |r, now, out| {
        r.get(
            now,
            "counter",
            ReadConsistency::Majority { min_cap: 0 },
            TIMEOUT,
            out,
        )
    });
    net.advance(TIMEOUT + Duration::from_millis(100));
    assert!(matches!(
        net.take_reply(4, op),
        Some(Outcome::Get(Err(GetError::NotReplicated(_))))
    ));

    net.heal();
    net.advance(Duration::from_secs(6));
    for i in 0..5 {
        assert_eq!(value_on(&net, i), Some(2), "node {i} after the heal");
    }
}

#[test]
fn a_read_merges_what_the_replicas_answer_into_the_local_copy_before_it_returns() {
    let settings = ReplicatorSettings {
        delta_crdt_enabled: false,
        gossip_interval: Duration::from_secs(3600),
        ..ReplicatorSettings::default()
    };
    let mut net = Net::new(3, settings);
    increment(&mut net, 1, WriteConsistency::Local);
    increment(&mut net, 2, WriteConsistency::Local);
    assert_eq!(value_on(&net, 0), None);
    let op = net.call(0, |r, now, out| {
        r.get(now, "counter", ReadConsistency::All, TIMEOUT, out)
    });
    match net.take_reply(0, op) {
        Some(Outcome::Get(Ok(Some(stored)))) => assert_eq!(read_value(&stored), 2),
        other => panic!("expected the value, got {other:?}"),
    }
    assert_eq!(value_on(&net, 0), Some(2), "repaired here");
}

#[test]
fn too_few_replicas_for_an_exact_count_fail_at_once_and_levels_shrink_on_a_lone_node() {
    let mut net = Net::new(1, ReplicatorSettings::default());
    let op = increment(&mut net, 0, WriteConsistency::To(2));
    assert!(matches!(
        net.take_reply(0, op),
        Some(Outcome::Update(Err(UpdateError::NotReplicated(_))))
    ));
    let op = increment(&mut net, 0, WriteConsistency::All);
    assert!(matches!(
        net.take_reply(0, op),
        Some(Outcome::Update(Ok(())))
    ));
    assert_eq!(value_on(&net, 0), Some(2));
}

#[test]
fn deltas_alone_carry_set_changes_to_every_node() {
    let settings = ReplicatorSettings {
        gossip_interval: Duration::from_secs(3600),
        ..ReplicatorSettings::default()
    };
    let mut net = Net::new(5, settings);
    let key: Key<OrSet<crate::replicator::ReplicaId, String>> = Key::new("online");
    for i in 0..5 {
        net.call(i, |r, now, out| {
            r.update(
                now,
                &key,
                WriteConsistency::Local,
                TIMEOUT,
                OrSet::new,
                |s, me| s.add(&me, format!("user-{i}")),
                out,
            )
        });
    }
    net.call(0, |r, now, out| {
        r.update(
            now,
            &key,
            WriteConsistency::Local,
            TIMEOUT,
            OrSet::new,
            |s, _| {
                s.remove(&"user-0".to_string());
            },
            out,
        )
    });
    net.advance(Duration::from_secs(3));
    assert_eq!(net.delivered.get("status"), None, "no gossip ran");
    for i in 0..5 {
        let set = net.nodes[i].local_value(&key).expect("the set");
        assert_eq!(set.len(), 4, "node {i}: {set:?}");
        assert!(!set.contains(&"user-0".to_string()));
    }
}

#[test]
fn a_new_node_catches_up_on_many_keys_in_chunks_without_waiting_for_gossip_rounds() {
    let settings = ReplicatorSettings {
        max_gossip_bytes: 16 * 1024,
        delta_crdt_enabled: false,
        ..ReplicatorSettings::default()
    };
    let mut net = Net::new(3, settings);
    net.set_members(2);
    for k in 0..3_000 {
        let key: Key<GCounter<crate::replicator::ReplicaId>> = Key::new(format!("k{k}"));
        net.call(k % 2, |r, now, out| {
            r.update(
                now,
                &key,
                WriteConsistency::All,
                TIMEOUT,
                GCounter::new,
                |c, me| c.increment(&me, k as u64 + 1),
                out,
            )
        });
    }
    assert_eq!(net.nodes[0].len(), 3_000);
    assert!(net.nodes[2].is_empty());
    net.set_members(3);
    // One gossip round of the new node (or towards it) starts the exchange; the rest follows
    // message by message.
    net.advance(Duration::from_millis(2_100));
    assert_eq!(
        net.nodes[2].len(),
        3_000,
        "caught up within one gossip interval"
    );
    // About 75 KB of entries in chunks of at most 16 KiB (plus one bucket of a few keys),
    // whichever side asked.
    assert!(
        net.delivered["gossip"] >= 4,
        "in bounded chunks: {:?}",
        net.delivered
    );
    assert!(
        net.largest_gossip <= 17 * 1024,
        "a gossip message carried {} bytes",
        net.largest_gossip
    );
    let key: Key<GCounter<crate::replicator::ReplicaId>> = Key::new("k2999");
    assert_eq!(
        net.nodes[2].local_value(&key).map(GCounter::value),
        Some(3_000)
    );
}

#[test]
fn a_deleted_key_is_deleted_everywhere_and_never_used_again() {
    let mut net = Net::new(3, ReplicatorSettings::default());
    increment(&mut net, 0, WriteConsistency::All);
    let op = net.call(1, |r, now, out| {
        r.delete(now, "counter", WriteConsistency::All, TIMEOUT, out)
    });
    assert!(matches!(
        net.take_reply(1, op),
        Some(Outcome::Delete(Ok(())))
    ));
    for i in 0..3 {
        assert!(matches!(
            net.nodes[i].local("counter"),
            Some(Stored::Deleted)
        ));
    }
    let op = increment(&mut net, 2, WriteConsistency::Local);
    assert!(matches!(
        net.take_reply(2, op),
        Some(Outcome::Update(Err(UpdateError::KeyDeleted)))
    ));
    let op = net.call(0, |r, now, out| {
        r.get(now, "counter", ReadConsistency::Local, TIMEOUT, out)
    });
    assert!(matches!(
        net.take_reply(0, op),
        Some(Outcome::Get(Err(GetError::KeyDeleted)))
    ));
}

#[test]
fn subscribers_hear_the_current_value_and_remote_changes() {
    let mut net = Net::new(2, ReplicatorSettings::default());
    increment(&mut net, 0, WriteConsistency::All);
    net.nodes[1].subscribe("counter", 77);
    net.advance(Duration::from_millis(600));
    assert_eq!(net.changes.len(), 1);
    assert_eq!(read_value(&net.changes[0].3), 1);
    increment(&mut net, 0, WriteConsistency::All);
    net.advance(Duration::from_millis(600));
    assert_eq!(net.changes.len(), 2, "{:?}", net.changes);
    assert_eq!((net.changes[1].0, net.changes[1].1), (1, 77));
    assert_eq!(read_value(&net.changes[1].3), 2);
    net.advance(Duration::from_secs(3));
    assert_eq!(net.changes.len(), 2, "no change, no notification");
}

#[test]
fn a_key_of_another_type_is_refused_and_strangers_are_dropped() {
    let mut net = Net::new(2, ReplicatorSettings::default());
    increment(&mut net, 0, WriteConsistency::All);
    let wrong: Key<GCounter<crate::replicator::ReplicaId>> = Key::new("counter");
    let op = net.call(1, |r, now, out| {
        r.update(
            now,
            &wrong,
            WriteConsistency::Local,
            TIMEOUT,
            GCounter::new,
            |c, me| c.increment(&me, 1),
            out,
        )
    });
    match net.take_reply(1, op) {
        Some(Outcome::Update(Err(UpdateError::TypeMismatch(m)))) => {
            assert_eq!((m.held.as_str(), m.got.as_str()), ("PNCounter", "GCounter"));
        }
        other => panic!("expected a type mismatch, got {other:?}"),
    }

    let mut out = Vec::new();
    let stranger = address(9);
    net.nodes[0].handle_message(
        net.now,
        &stranger,
        ReplicatorMessage::Read {
            key: "counter".into(),
            op: 1,
        },
        &mut out,
    );
    assert_eq!(out.len(), 1);
    assert!(matches!(
        &out[0],
        crate::replicator::ReplicatorEffect::Dropped {
            reason: DropReason::UnknownSender,
            ..
        }
    ));
}

#[test]
fn a_deletion_spreads_by_gossip_and_subscribers_hear_of_it() {
    let mut net = Net::new(3, ReplicatorSettings::default());
    increment(&mut net, 0, WriteConsistency::All);
    net.nodes[2].subscribe("counter", 5);
    net.advance(Duration::from_millis(600));
    let op = net.call(0, |r, now, out| {
        r.delete(now, "counter", WriteConsistency::Local, TIMEOUT, out)
    });
    assert!(matches!(
        net.take_reply(0, op),
        Some(Outcome::Delete(Ok(())))
    ));
    net.advance(Duration::from_secs(8));
    for i in 0..3 {
        assert!(
            matches!(net.nodes[i].local("counter"), Some(Stored::Deleted)),
            "node {i}"
        );
    }
    let last = net.changes.last().expect("notified");
    assert_eq!((last.0, last.1), (2, 5));
    assert!(matches!(last.3, Stored::Deleted));
    let op = net.call(1, |r, now, out| {
        r.delete(now, "counter", WriteConsistency::Local, TIMEOUT, out)
    });
    assert!(matches!(
        net.take_reply(1, op),
        Some(Outcome::Delete(Err(
            crate::replicator::DeleteError::AlreadyDeleted
        )))
    ));
}

#[test]
fn joining_and_weakly_up_members_never_count_toward_a_quorum() {
    use crate::membership::MemberStatus;
    use crate::replicator::Peer;
    let mut net = Net::new(5, ReplicatorSettings::default());
    // Node 0 sees two Up peers, one Joining and one WeaklyUp: N = 3, a majority is 2.
    let statuses = [
        MemberStatus::Up,
        MemberStatus::Up,
        MemberStatus::Up,
        MemberStatus::Joining,
        MemberStatus::WeaklyUp,
    ];
    net.nodes[0].set_peers((0..5).map(|j| Peer {
        node: address(j),
        status: statuses[j],
        reachable: true,
    }));
    assert_eq!(net.nodes[0].quorum_members().count(), 2);
    net.isolate(&[0, 3, 4]);
    net.nodes[0].set_peers((0..5).map(|j| Peer {
        node: address(j),
        status: statuses[j],
        reachable: j == 0 || j >= 3,
    }));
    let op = increment(&mut net, 0, WriteConsistency::Majority { min_cap: 0 });
    net.advance(TIMEOUT + Duration::from_millis(100));
    match net.take_reply(0, op) {
        Some(Outcome::Update(Err(UpdateError::NotReplicated(e)))) => {
            assert_eq!(
                (e.required, e.reached),
                (2, 1),
                "the joining ones did not count"
            );
        }
        other => panic!("expected the typed error, got {other:?}"),
    }
}

#[test]
fn a_write_to_n_waits_for_n_replicas_and_no_more() {
    let settings = ReplicatorSettings {
        gossip_interval: Duration::from_secs(3600),
        delta_crdt_enabled: false,
        ..ReplicatorSettings::default()
    };
    let mut net = Net::new(5, settings);
    let op = increment(&mut net, 0, WriteConsistency::To(3));
    assert!(matches!(
        net.take_reply(0, op),
        Some(Outcome::Update(Ok(())))
    ));
    let holders = (0..5).filter(|&i| value_on(&net, i) == Some(1)).count();
    assert_eq!(holders, 3, "written to exactly two peers besides itself");
}

#[test]
fn only_the_first_answer_of_a_peer_that_was_asked_counts_toward_a_quorum() {
    let mut net = Net::new(5, ReplicatorSettings::default());
    let mut out = Vec::new();
    let now = net.now;
    let op = net.nodes[0].update(
        now,
        &counter(),
        WriteConsistency::To(3),
        TIMEOUT,
        PNCounter::new,
        |c, me| c.increment(&me, 1),
        &mut out,
    );
    let asked: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            crate::replicator::ReplicatorEffect::Send { to, .. } => Some(to.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 2, "two peers besides itself");
    let mut answer = |from: &crate::address::UniqueAddress| {
        let mut out = Vec::new();
        net.nodes[0].handle_message(now, from, ReplicatorMessage::WriteAck { op }, &mut out);
        out.iter()
            .any(|e| matches!(e, crate::replicator::ReplicatorEffect::Reply { .. }))
    };
    for j in 1..5 {
        let peer = address(j);
        if !asked.contains(&peer) {
            assert!(
                !answer(&peer),
                "an acknowledgement nobody asked for counts nothing"
            );
        }
    }
    assert!(!answer(&asked[0]));
    assert!(!answer(&asked[0]), "the same peer twice counts once");
    assert!(answer(&asked[1]), "two asked peers and itself make three");
}
