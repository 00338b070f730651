//! The composition's own decisions: loopback, who hosts the coordinator, deferred
//! allocation, and leaving (the region and coordinator rules are tested beside them).

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::membership::MemberStatus;
use crate::sharding::allocation::LeastShardAllocationStrategy;
use crate::sharding::region::HandOffMode;
use crate::sharding::testkit::{Net, node};

type Msg = u32;

fn up(n: &UniqueAddress, up_number: u32) -> Member {
    let mut m = Member::joining(n.clone(), BTreeSet::new(), "1.0");
    m.status = MemberStatus::Up;
    m.up_number = up_number;
    m
}

fn settings(proxy: bool) -> KindNodeSettings {
    KindNodeSettings {
        region: RegionSettings::default(),
        coordinator: CoordinatorSettings::default(),
        role: None,
        proxy,
        down_removal_margin: Duration::from_secs(5),
        shutdown_timeout: Duration::from_secs(30),
        coordinator_lease: None,
        self_fence_after: None,
    }
}

fn least() -> AllocationChoice {
    AllocationChoice::Immediate(Box::new(|| {
        Box::new(LeastShardAllocationStrategy::new(20, 0.1))
    }))
}

fn env(entity: &str, msg: Msg) -> Envelope<Msg> {
    Envelope {
        entity: entity.into(),
        shard: "7".into(),
        msg,
    }
}

fn lone(allocation: AllocationChoice) -> (KindNode<Msg>, Vec<KindEffect<Msg>>) {
    let me = node(1);
    let now = Instant::from_millis(1);
    let mut k = KindNode::new(me.clone(), settings(false), allocation, now);
    let mut out = Vec::new();
    k.handle(
        now,
        KindInput::Membership {
            members: vec![up(&me, 1)],
            unreachable: BTreeSet::new(),
        },
        &mut out,
    );
    (k, out)
}

#[test]
fn a_lone_node_runs_its_coordinator_and_talks_to_it_without_the_network() {
    let (mut k, out) = lone(least());
    assert_eq!(out.first(), Some(&KindEffect::CoordinatorRunning(true)));
    assert!(
        out.contains(&KindEffect::Coordinator(CoordinatorEvent::StateComplete)),
        "{out:?}"
    );
    assert!(!out.iter().any(|e| matches!(e, KindEffect::Send { .. })));
    assert_eq!(
        k.region().coordinator(),
        Some(k.me()),
        "registered by loopback"
    );
    let mut out = Vec::new();
    k.handle(
        Instant::from_millis(2),
        KindInput::Route {
            from: None,
            env: env("a", 1),
        },
        &mut out,
    );
    assert!(
        !out.iter().any(|e| matches!(e, KindEffect::Send { .. })),
        "nothing leaves the node: {out:?}"
    );
    assert!(out.contains(&KindEffect::ShardStarted("7".into())));
    assert!(out.contains(&KindEffect::Deliver(env("a", 1))));
    assert!(k.delivers_at_once(&"7".into()));
}

#[test]
fn a_wanted_home_starts_a_shard_without_any_message_and_a_proxy_never_asks() {
    let (mut k, _) = lone(least());
    let mut out = Vec::new();
    k.handle(
        Instant::from_millis(2),
        KindInput::WantHome("9".into()),
        &mut out,
    );
    assert!(
        out.contains(&KindEffect::ShardStarted("9".into())),
        "{out:?}"
    );
    assert!(
        !out.iter().any(|e| matches!(e, KindEffect::Deliver(_))),
        "nothing to deliver: {out:?}"
    );
    assert!(k.delivers_at_once(&"9".into()));
    // Asked again once known: nothing more happens.
    let mut again = Vec::new();
    k.handle(
        Instant::from_millis(3),
        KindInput::WantHome("9".into()),
        &mut again,
    );
    assert!(
        !again.contains(&KindEffect::ShardStarted("9".into())),
        "{again:?}"
    );

    let me = node(1);
    let mut proxy = KindNode::<Msg>::new(me.clone(), settings(true), least(), Instant::ZERO);
    let mut out = Vec::new();
    proxy.handle(
        Instant::from_millis(1),
        KindInput::Membership {
            members: vec![up(&me, 1)],
            unreachable: BTreeSet::new(),
        },
        &mut out,
    );
    out.clear();
    proxy.handle(
        Instant::from_millis(2),
        KindInput::WantHome("9".into()),
        &mut out,
    );
    assert!(
        out.is_empty(),
        "a proxy hosts nothing, so it wants no home: {out:?}"
    );
}

#[test]
fn a_home_wanted_before_the_region_registers_is_asked_for_when_it_registers() {
    // As after a restart of the whole cluster: the remembered shards are loaded (and their
    // homes wanted) while the node is still joining, before any coordinator runs.
    let me = node(1);
    let mut k = KindNode::<Msg>::new(me.clone(), settings(false), least(), Instant::ZERO);
    let mut out = Vec::new();
    k.handle(
        Instant::from_millis(1),
        KindInput::WantHome("9".into()),
        &mut out,
    );
    assert!(out.is_empty(), "no coordinator to ask yet: {out:?}");
    // Up: the coordinator starts here and the region registers with it, and at that same
    // instant (not at the region's next retry tick) the wanted shard starts.
    k.handle(
        Instant::from_millis(2),
        KindInput::Membership {
            members: vec![up(&me, 1)],
            unreachable: BTreeSet::new(),
        },
        &mut out,
    );
    assert!(
        out.contains(&KindEffect::ShardStarted("9".into())),
        "{out:?}"
    );
    assert!(k.delivers_at_once(&"9".into()));
}

#[test]
fn a_proxy_never_runs_the_coordinator_even_when_oldest() {
    let me = node(1);
    let now = Instant::from_millis(1);
    let mut k: KindNode<Msg> = KindNode::new(me.clone(), settings(true), least(), now);
    let mut out = Vec::new();
    k.handle(
        now,
        KindInput::Membership {
            members: vec![up(&me, 1)],
            unreachable: BTreeSet::new(),
        },
        &mut out,
    );
    assert!(k.coordinator().is_none());
    assert!(!out.contains(&KindEffect::CoordinatorRunning(true)));
}

#[test]
fn a_deferred_strategy_is_asked_once_and_its_answer_places_the_shard() {
    let (mut k, _) = lone(AllocationChoice::Deferred);
    let now = Instant::from_millis(2);
    let mut out = Vec::new();
    k.handle(
        now,
        KindInput::Route {
            from: None,
            env: env("a", 1),
        },
        &mut out,
    );
    let asked: Vec<_> = out
        .iter()
        .filter(|e| matches!(e, KindEffect::AllocationAsked { .. }))
        .collect();
    assert_eq!(asked.len(), 1, "{out:?}");
    assert!(!out.iter().any(|e| matches!(e, KindEffect::Deliver(_))));
    // A second message for the same shard while the question is open asks nothing new.
    out.clear();
    k.handle(
        now,
        KindInput::Route {
            from: None,
            env: env("b", 2),
        },
        &mut out,
    );
    k.handle_timeout(Instant::from_millis(2_500), &mut out);
    assert!(
        !out.iter()
            .any(|e| matches!(e, KindEffect::AllocationAsked { .. })),
        "{out:?}"
    );
    out.clear();
    k.handle(
        now,
        KindInput::AllocationAnswered {
            requester: k.me().clone(),
            shard: "7".into(),
            answer: Some(k.me().clone()),
        },
        &mut out,
    );
    let delivered: Vec<_> = out
        .iter()
        .filter_map(|e| match e {
            KindEffect::Deliver(env) => Some(env.msg),
            _ => None,
        })
        .collect();
    assert_eq!(
        delivered,
        vec![1, 2],
        "buffered messages delivered in order"
    );
}

/// Which node's client sends the first message to each entity.
enum Sender {
    A,
    B,
}

/// Two Up nodes (`a` the oldest, hosting the coordinator) and 40 entities that each got
/// message 1 from `sender`, settled.
fn two_nodes_with_entities(seed: u64, sender: Sender) -> (Net, UniqueAddress, UniqueAddress) {
    let mut net = Net::new(seed, HandOffMode::Forward);
    let a = net.add(1, false);
    let b = net.add(2, false);
    net.advance(Duration::from_secs(1));
    let via = match sender {
        Sender::A => a.clone(),
        Sender::B => b.clone(),
    };
    for i in 0..40 {
        net.tell(&via, &format!("e{i}"), 1);
    }
    net.advance(Duration::from_secs(1));
    (net, a, b)
}

#[test]
fn seeing_itself_leaving_hands_every_shard_off_without_being_asked() {
    for seed in 0..20 {
        let (mut net, a, b) = two_nodes_with_entities(seed, Sender::A);
        assert!(net.hosts().values().any(|h| h.contains(&b)), "b hosts some");
        // Only the membership status changes: no shutdown is asked of the region.
        net.set_status(&b, MemberStatus::Leaving);
        for i in 0..40 {
            net.tell(&a, &format!("e{i}"), 2);
        }
        net.advance(Duration::from_secs(20));
        assert!(
            net.region(&b).is_stopped(),
            "seed {seed}: b's region stopped"
        );
        assert!(
            net.hosts().values().all(|h| !h.contains(&b)),
            "seed {seed}: b hosts nothing"
        );
        assert_eq!(net.delivered.len(), 80, "seed {seed}: nothing lost");
        assert!(net.dropped.is_empty(), "seed {seed}: {:?}", net.dropped);
        assert!(net.violations.is_empty(), "{:?}", net.violations);
    }
}

#[test]
fn the_oldest_keeps_its_coordinator_through_exiting_until_it_is_removed() {
    let (mut net, a, b) = two_nodes_with_entities(3, Sender::B);
    assert!(net.hosts().values().any(|h| h.contains(&a)), "a hosts some");
    // The leader moves it on at once, before its hand-off could finish.
    net.set_status(&a, MemberStatus::Leaving);
    net.set_status(&a, MemberStatus::Exiting);
    assert!(net.coordinator(&a).is_some(), "kept while Exiting");
    assert!(net.coordinator(&b).is_none(), "nobody else starts one");
    net.advance(Duration::from_secs(20));
    assert!(net.region(&a).is_stopped(), "the hand-off completed");
    assert!(net.hosts().values().all(|h| !h.contains(&a)));
    net.set_status(&a, MemberStatus::Removed);
    net.advance(Duration::from_secs(1));
    assert!(
        net.coordinator(&b).is_some(),
        "b took over after the removal"
    );
    for i in 0..40 {
        net.tell(&b, &format!("e{i}"), 2);
    }
    net.advance(Duration::from_secs(5));
    assert_eq!(net.delivered.len(), 80);
    assert!(net.violations.is_empty(), "{:?}", net.violations);
}

#[test]
fn a_hand_off_that_cannot_finish_stops_the_region_after_the_shutdown_timeout() {
    let (mut net, a, b) = two_nodes_with_entities(4, Sender::B);
    assert!(net.hosts().values().any(|h| h.contains(&b)));
    // The coordinator's node dies unnoticed: b cannot hand anything off.
    net.crash(&a);
    net.set_status(&b, MemberStatus::Leaving);
    net.advance(Duration::from_secs(30));
    assert!(
        !net.region(&b).is_stopped(),
        "still trying before the timeout"
    );
    net.advance(Duration::from_secs(31));
    assert!(net.region(&b).is_stopped(), "gave up after the timeout");
    assert!(net.hosts().values().all(|h| !h.contains(&b)));
}

/// Node 1 (oldest) runs the coordinator; node 2 is Up but its node never started the kind.
fn coordinator_beside_a_node_without_the_kind() -> (KindNode<Msg>, Vec<KindEffect<Msg>>) {
    let me = node(1);
    let now = Instant::from_millis(1);
    let mut k = KindNode::new(me.clone(), settings(false), least(), now);
    let mut out = Vec::new();
    k.handle(
        now,
        KindInput::Membership {
            members: vec![up(&me, 1), up(&node(2), 2)],
            unreachable: BTreeSet::new(),
        },
        &mut out,
    );
    (k, out)
}

fn announced_epoch(out: &[KindEffect<Msg>], to: &UniqueAddress) -> Option<u64> {
    out.iter().find_map(|e| match e {
        KindEffect::Send {
            to: t,
            msg: Protocol::CoordinatorStarted { epoch },
        } if t == to => Some(*epoch),
        _ => None,
    })
}

#[test]
fn a_node_that_answers_kind_not_started_no_longer_holds_allocation_back() {
    let (mut k, out) = coordinator_beside_a_node_without_the_kind();
    let epoch = announced_epoch(&out, &node(2)).expect("node 2 is told the coordinator runs");
    assert_ne!(epoch, 0);
    assert!(!k.coordinator().unwrap().is_complete());
    let now = Instant::from_millis(2);
    let mut out = Vec::new();
    k.handle(
        now,
        KindInput::Route {
            from: None,
            env: env("a", 1),
        },
        &mut out,
    );
    assert!(
        !out.iter().any(|e| matches!(e, KindEffect::Deliver(_))),
        "held back while node 2 is silent"
    );
    k.handle(
        now,
        KindInput::Protocol {
            from: node(2),
            msg: Protocol::KindNotStarted { epoch },
        },
        &mut out,
    );
    assert!(k.coordinator().unwrap().is_complete());
    assert!(
        out.iter()
            .any(|e| matches!(e, KindEffect::Deliver(d) if d.msg == 1)),
        "the waiting message is delivered once allocation proceeds: {out:?}"
    );
}

#[test]
fn each_coordinator_incarnation_on_a_node_has_its_own_epoch() {
    let me = node(1);
    let mut k = KindNode::<Msg>::new(me.clone(), settings(false), least(), Instant::ZERO);
    let mut epochs = Vec::new();
    let members = |second: MemberStatus| {
        let mut m2 = up(&node(2), 2);
        m2.status = second;
        vec![up(&me, 1), m2]
    };
    for i in 0..3u64 {
        let mut out = Vec::new();
        let now = Instant::from_millis(10 * i + 1);
        // Node 1 is Up (runs the coordinator), then seen Joining-free but not a member:
        // leaving the view and coming back starts a new coordinator incarnation.
        k.handle(
            now,
            KindInput::Membership {
                members: members(MemberStatus::Up),
                unreachable: BTreeSet::new(),
            },
            &mut out,
        );
        epochs.push(announced_epoch(&out, &node(2)).expect("announced"));
        k.handle(
            now,
            KindInput::Membership {
                members: vec![up(&node(2), 2)],
                unreachable: BTreeSet::new(),
            },
            &mut out,
        );
        assert!(k.coordinator().is_none());
    }
    let distinct: BTreeSet<u64> = epochs.iter().copied().collect();
    assert_eq!(distinct.len(), 3, "{epochs:?}");
}

#[test]
fn a_registration_answered_by_the_coordinators_node_is_reported() {
    // Node 2's region registers with node 1, the oldest, whose node never started the kind.
    let me = node(2);
    let now = Instant::from_millis(1);
    let mut k = KindNode::<Msg>::new(me.clone(), settings(false), least(), now);
    let mut out = Vec::new();
    k.handle(
        now,
        KindInput::Membership {
            members: vec![up(&node(1), 1), up(&me, 2)],
            unreachable: BTreeSet::new(),
        },
        &mut out,
    );
    let answer = |from: u16| KindInput::Protocol {
        from: node(from),
        msg: Protocol::KindNotStarted { epoch: 0 },
    };
    out.clear();
    k.handle(now, answer(3), &mut out);
    assert!(out.is_empty(), "not from the coordinator's node: {out:?}");
    k.handle(now, answer(1), &mut out);
    assert_eq!(out, vec![KindEffect::CoordinatorNodeLacksKind(node(1))]);
}
