//! Pruning a removed node's replica: folded into the owner once, never counted again.

use std::time::Duration;

use super::network::Net;
use crate::ddata::GCounter;
use crate::replicator::{
    DeliberateFaults, Key, ReplicaId, ReplicatorMessage, ReplicatorSettings, Stored,
    WriteConsistency,
};

fn settings(faults: DeliberateFaults) -> ReplicatorSettings {
    ReplicatorSettings {
        pruning_interval: Duration::from_secs(1),
        max_pruning_dissemination: Duration::from_secs(3),
        faults,
        ..ReplicatorSettings::default()
    }
}

fn key() -> Key<GCounter<ReplicaId>> {
    Key::new("hits")
}

/// Node 2 counts 5 and node 0 counts 2; node 2 is removed and pruned; then an old copy of
/// node 2's state reaches node 0 through node 1. Returns node 0's and node 1's values, and
/// whether either still names node 2's replica.
fn remove_prune_and_replay_an_old_copy(faults: DeliberateFaults) -> (u128, u128, bool) {
    let mut net = Net::new(3, settings(faults));
    for (node, n) in [(2, 5), (0, 2)] {
        net.call(node, |r, now, out| {
            r.update(
                now,
                &key(),
                WriteConsistency::All,
                Duration::from_secs(3),
                GCounter::new,
                |c, me| c.increment(&me, n),
                out,
            )
        });
    }
    let old_copy = net.nodes[2]
        .local("hits")
        .cloned()
        .expect("node 2 holds the counter");
    net.set_members(2);
    net.advance(Duration::from_secs(10));
    let removed = ReplicaId(net.nodes[2].node().uid);

    let mut out = Vec::new();
    let from = net.nodes[1].node().clone();
    let gossip = ReplicatorMessage::Gossip {
        buckets: Vec::new(),
        entries: vec![("hits".into(), old_copy)],
        send_back: false,
        more: false,
    };
    let now = net.now;
    net.nodes[0].handle_message(now, &from, gossip, &mut out);
    net.route(0, out);
    net.advance(Duration::from_secs(3));

    let value = |i: usize| {
        net.nodes[i]
            .local_value(&key())
            .map(GCounter::value)
            .unwrap()
    };
    let names = |i: usize| match net.nodes[i].local("hits") {
        Some(Stored::Value(envelope)) => envelope.data.needs_pruning_from(removed),
        _ => false,
    };
    (value(0), value(1), names(0) || names(1))
}

#[test]
fn a_removed_replica_is_folded_into_the_owner_once_and_an_old_copy_does_not_count_it_again() {
    let (on_0, on_1, names_removed) =
        remove_prune_and_replay_an_old_copy(DeliberateFaults::default());
    assert_eq!((on_0, on_1), (7, 7));
    assert!(
        !names_removed,
        "the removed replica's data is gone everywhere"
    );
}

#[test]
fn without_the_safety_rule_an_old_copy_counts_the_removed_replica_twice() {
    let faults = DeliberateFaults {
        skip_pruning_safety_rule: true,
        ..DeliberateFaults::default()
    };
    let (on_0, _, names_removed) = remove_prune_and_replay_an_old_copy(faults);
    assert_eq!(
        on_0, 12,
        "the fault is what the simulator's checker must catch"
    );
    assert!(names_removed);
}

#[test]
fn markers_merge_to_performed_or_the_lower_owner_whatever_the_order() {
    use crate::replicator::PruningState;
    use std::collections::BTreeSet;
    let a = super::network::address(1);
    let b = super::network::address(2);
    let init = |owner: &crate::address::UniqueAddress, seen: &[&crate::address::UniqueAddress]| {
        PruningState::Initialized {
            owner: owner.clone(),
            seen: seen.iter().map(|s| (*s).clone()).collect::<BTreeSet<_>>(),
        }
    };
    let states = [
        init(&a, &[&a]),
        init(&a, &[&b]),
        init(&b, &[&b]),
        PruningState::Performed { obsolete_at_ms: 10 },
        PruningState::Performed { obsolete_at_ms: 20 },
    ];
    for x in &states {
        for y in &states {
            for z in &states {
                let merged = |p: &PruningState, q: &PruningState| {
                    let mut m = p.clone();
                    m.merge(q);
                    m
                };
                assert_eq!(merged(x, y), merged(y, x), "commutative: {x:?} {y:?}");
                assert_eq!(
                    merged(&merged(x, y), z),
                    merged(x, &merged(y, z)),
                    "associative"
                );
                assert_eq!(merged(x, x), *x, "idempotent");
            }
        }
    }
    let mut m = init(&b, &[&b]);
    m.merge(&init(&a, &[&a]));
    assert_eq!(m, init(&a, &[&a]), "the lower owner wins");
}
