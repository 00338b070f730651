//! Tests of the membership node through its inputs and effects. The longer concerns have files
//! of their own in `tests/`: join compatibility (`compat.rs`), preparing for a full cluster
//! shutdown (`full_shutdown.rs`) and lease-majority's lease holder (`sbr_lease.rs`).

use std::sync::Arc;

use super::*;
use crate::membership::address::Address;
use crate::membership::events::ClusterEvent;
use crate::membership::member::NOT_YET_UP;
use crate::membership::messages::{ConfigCheck, JoinConfig};
use crate::membership::vclock::VectorClock;
pub(super) fn addr(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) * 1000 + 7)
}

pub(super) fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// A node that formed a cluster of itself and `other` (both Up), seen by both.
fn member_of_two(other: &UniqueAddress) -> Membership {
    member_of_two_with(MembershipConfig::default(), other)
}

/// [`member_of_two`] with these settings.
pub(super) fn member_of_two_with(cfg: MembershipConfig, other: &UniqueAddress) -> Membership {
    let me = addr(1);
    let mut node = Membership::new(cfg, me.clone(), 1, t(0));
    let mut g = Gossip::default();
    for (i, a) in [&me, other].into_iter().enumerate() {
        let mut m = Member::joining(a.clone(), Default::default(), "1");
        m.status = MemberStatus::Up;
        m.up_number = i as u32 + 1;
        Arc::make_mut(&mut g.members).insert(a.clone(), m);
    }
    g.version.increment(&me);
    g.seen = g.members.keys().cloned().collect();
    node.start_as_member(t(0), Arc::new(g));
    node
}

fn dropped(out: &[Effect]) -> Vec<DropReason> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Dropped { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

fn envelope(from: &UniqueAddress, to: &UniqueAddress, g: Gossip) -> Message {
    Message::GossipEnvelope {
        from: from.clone(),
        to: to.clone(),
        gossip: Arc::new(g),
    }
}

#[test]
fn stale_wrong_incarnation_and_unknown_gossip_is_dropped_and_reported() {
    let other = addr(2);
    let mut node = member_of_two(&other);
    let g = Gossip::clone(node.gossip());
    let me = node.self_node().clone();
    let mut out = Vec::new();

    // Waited 3 s in a queue: older than gossip-time-to-live (2 s).
    let msg = envelope(&other, &me, g.clone());
    node.handle(
        t(5000),
        Input::Message {
            from: msg.sender().expect("names its sender").clone(),
            msg,
            received_at: t(2000),
        },
        &mut out,
    );
    assert_eq!(dropped(&out), vec![DropReason::StaleGossip]);

    out.clear();
    let other_incarnation = UniqueAddress::new(me.address.clone(), me.uid + 1);
    let msg = envelope(&other, &other_incarnation, g.clone());
    node.handle(
        t(5000),
        Input::Message {
            from: msg.sender().expect("names its sender").clone(),
            msg,
            received_at: t(5000),
        },
        &mut out,
    );
    assert_eq!(dropped(&out), vec![DropReason::WrongIncarnation]);

    out.clear();
    let stranger = addr(9);
    let msg = envelope(&stranger, &me, g);
    node.handle(
        t(5000),
        Input::Message {
            from: msg.sender().expect("names its sender").clone(),
            msg,
            received_at: t(5000),
        },
        &mut out,
    );
    assert_eq!(dropped(&out), vec![DropReason::UnknownSender]);
    assert_eq!(node.stats().dropped, 3);
    assert_eq!(
        node.self_status(),
        Some(MemberStatus::Up),
        "nothing changed"
    );
}

#[test]
fn a_removed_incarnation_is_told_it_is_quarantined_and_a_told_node_stops() {
    let other = addr(2);
    let mut node = member_of_two(&other);
    let mut out = Vec::new();
    node.handle(
        t(10),
        Input::Command(Command::Down(other.address.clone())),
        &mut out,
    );
    // The leader removes the Down member once it is unreachable; simulate the removal.
    let mut g = Gossip::clone(node.gossip());
    g.remove(&other, 10);
    let mut out = Vec::new();
    node.set_gossip(t(10), g, &mut out);
    out.clear();
    let hb = Message::Heartbeat {
        from: other.clone(),
        seq: 1,
    };
    node.handle(
        t(20),
        Input::Message {
            from: hb.sender().expect("names its sender").clone(),
            msg: hb,
            received_at: t(20),
        },
        &mut out,
    );
    assert_eq!(dropped(&out), vec![DropReason::Quarantined]);
    assert!(out.iter().any(|e| matches!(e,
        Effect::Send { msg: Message::Quarantined { to, .. }, .. } if *to == other)));

    // The other side of it: a node told by a current member that it was removed stops.
    let mut victim = member_of_two(&addr(3));
    let me = victim.self_node().clone();
    let mut out = Vec::new();
    let msg = Message::Quarantined {
        from: addr(3),
        to: me,
    };
    victim.handle(
        t(30),
        Input::Message {
            from: msg.sender().expect("names its sender").clone(),
            msg,
            received_at: t(30),
        },
        &mut out,
    );
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::Shutdown(ShutdownReason::Removed)))
    );
    assert!(victim.is_stopped());
}

#[test]
fn commands_about_unknown_members_fail_without_changing_anything() {
    let other = addr(2);
    let mut node = member_of_two(&other);
    let before = Gossip::clone(node.gossip());
    let mut out = Vec::new();
    let nobody = Address::new("10.9.9.9", 1);
    node.handle(
        t(1),
        Input::Command(Command::Down(nobody.clone())),
        &mut out,
    );
    node.handle(
        t(1),
        Input::Command(Command::Leave(nobody.clone())),
        &mut out,
    );
    assert_eq!(
        out.iter().filter(|e| matches!(e, Effect::CommandFailed(CommandError::UnknownMember(a)) if *a == nobody)).count(),
        2
    );
    assert_eq!(*node.gossip().as_ref(), before);
}

fn deliver(node: &mut Membership, at: u64, msg: Message) -> Vec<Effect> {
    let mut out = Vec::new();
    node.handle(
        t(at),
        Input::Message {
            from: msg.sender().expect("names its sender").clone(),
            msg,
            received_at: t(at),
        },
        &mut out,
    );
    out
}

/// The messages `out` sends, with their destinations.
fn sent(out: &[Effect]) -> Vec<(Address, Message)> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Send { to, msg } => Some((to.clone(), msg.clone())),
            _ => None,
        })
        .collect()
}

fn not_known(from: &UniqueAddress, to: &UniqueAddress) -> Message {
    Message::NotKnown {
        from: from.clone(),
        to: to.clone(),
    }
}

#[test]
fn a_member_tells_a_gossiping_stranger_it_does_not_know_it_and_a_removed_one_it_is_quarantined() {
    let other = addr(2);
    let mut node = member_of_two(&other);
    let me = node.self_node().clone();
    let stranger = addr(9);
    let status = Message::GossipStatus {
        from: stranger.clone(),
        version: node.gossip().version.clone(),
        seen_digest: 0,
    };
    let out = deliver(&mut node, 100, status);
    assert_eq!(dropped(&out), vec![DropReason::UnknownSender]);
    assert_eq!(
        sent(&out),
        vec![(stranger.address.clone(), not_known(&me, &stranger))]
    );
    let state = Gossip::clone(node.gossip());
    let out = deliver(&mut node, 200, envelope(&stranger, &me, state.clone()));
    assert_eq!(
        sent(&out),
        vec![(stranger.address.clone(), not_known(&me, &stranger))]
    );

    // Gossip meant for another incarnation of this address gets no answer: it is not about us.
    let elsewhere = UniqueAddress::new(me.address.clone(), me.uid + 1);
    let out = deliver(&mut node, 300, envelope(&stranger, &elsewhere, state));
    assert_eq!(dropped(&out), vec![DropReason::WrongIncarnation]);
    assert!(sent(&out).is_empty());

    // A tombstoned incarnation is told it was removed, never that it is unknown.
    let mut g = Gossip::clone(node.gossip());
    g.remove(&other, 10);
    let mut out = Vec::new();
    node.set_gossip(t(400), g, &mut out);
    let status = Message::GossipStatus {
        from: other.clone(),
        version: VectorClock::new(),
        seen_digest: 0,
    };
    let out = deliver(&mut node, 500, status);
    assert_eq!(dropped(&out), vec![DropReason::Quarantined]);
    assert!(matches!(&sent(&out)[..], [(_, Message::Quarantined { to, .. })] if *to == other));

    // A node that is no member itself cannot welcome anyone, so it does not answer.
    let mut idle = Membership::new(MembershipConfig::default(), addr(5), 1, t(0));
    let status = Message::GossipStatus {
        from: stranger.clone(),
        version: VectorClock::new(),
        seen_digest: 0,
    };
    let out = deliver(&mut idle, 600, status);
    assert_eq!(dropped(&out), vec![DropReason::NotAMember]);
    assert!(sent(&out).is_empty());
}

/// Node 1, Joining, welcomed by node 2 (Up), in a cluster with node 3 (Up) and another
/// joiner, node 4; node 2's entry is the only one in the clock (it added both joiners).
fn orphan_joiner(now: u64) -> Membership {
    let me = addr(1);
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(now));
    let mut g = Gossip::default();
    for (port, status, up) in [
        (1, MemberStatus::Joining, NOT_YET_UP),
        (2, MemberStatus::Up, 1),
        (3, MemberStatus::Up, 2),
        (4, MemberStatus::Joining, NOT_YET_UP),
    ] {
        let mut m = Member::joining(addr(port), Default::default(), "0.0.0");
        m.status = status;
        m.up_number = up;
        Arc::make_mut(&mut g.members).insert(m.addr.clone(), m);
    }
    g.version.increment(&addr(2));
    g.seen = [me.clone(), addr(2)].into_iter().collect();
    node.start_as_member(t(now), Arc::new(g));
    node
}

fn is_join_of(msg: &Message, node: &UniqueAddress) -> bool {
    matches!(msg, Message::Join { node: n, .. } if n == node)
}

#[test]
fn a_joiner_told_not_known_joins_again_through_that_member_at_a_bounded_rate() {
    let mut node = orphan_joiner(0);
    let me = node.self_node().clone();
    let (up, peer) = (addr(3), addr(4));

    // Right after the welcome the others may just not have heard yet: not counted.
    let out = deliver(&mut node, 2_000, not_known(&up, &me));
    assert_eq!(dropped(&out), vec![DropReason::Unexpected]);
    assert!(sent(&out).is_empty());

    // Once retry-unsuccessful-join-after has passed: a Join to the member that said so.
    let out = deliver(&mut node, 10_000, not_known(&up, &me));
    let s = sent(&out);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].0, up.address);
    assert!(is_join_of(&s[0].1, &me));
    assert_eq!(node.stats().rejoins, 1);

    // At most one per retry-unsuccessful-join-after.
    let out = deliver(&mut node, 15_000, not_known(&up, &me));
    assert!(sent(&out).is_empty());
    let out = deliver(&mut node, 20_000, not_known(&up, &me));
    assert!(sent(&out).iter().any(|(_, m)| is_join_of(m, &me)));
    assert_eq!(node.stats().rejoins, 2);

    // Another joiner not knowing us proves nothing; nor does a message for another incarnation.
    let out = deliver(&mut node, 40_000, not_known(&peer, &me));
    assert_eq!(dropped(&out), vec![DropReason::Unexpected]);
    let elsewhere = UniqueAddress::new(me.address.clone(), me.uid + 1);
    let out = deliver(&mut node, 40_000, not_known(&up, &elsewhere));
    assert_eq!(dropped(&out), vec![DropReason::Unexpected]);
    assert_eq!(node.stats().rejoins, 2);

    // A node we do not know at all may be a newer incarnation of a member: worth asking.
    let newer = UniqueAddress::new(up.address.clone(), up.uid + 1);
    let out = deliver(&mut node, 40_000, not_known(&newer, &me));
    assert!(
        sent(&out)
            .iter()
            .any(|(to, m)| *to == newer.address && is_join_of(m, &me))
    );

    // An Up member never acts on it.
    let mut settled = member_of_two(&addr(2));
    let me = settled.self_node().clone();
    let out = deliver(&mut settled, 60_000, not_known(&addr(2), &me));
    assert_eq!(dropped(&out), vec![DropReason::Unexpected]);
    assert!(sent(&out).is_empty());
}

#[test]
fn the_welcome_of_a_join_sent_again_is_merged_so_nothing_known_is_lost() {
    let mut node = orphan_joiner(0);
    let me = node.self_node().clone();
    let (welcomer, up, peer) = (addr(2), addr(3), addr(4));
    let out = deliver(&mut node, 10_000, not_known(&up, &me));
    assert!(sent(&out).iter().any(|(_, m)| is_join_of(m, &me)));

    // Node 3's cluster removed the crashed welcomer and never heard of node 4; it adds us.
    let mut theirs = Gossip::clone(node.gossip());
    Arc::make_mut(&mut theirs.members).remove(&me);
    Arc::make_mut(&mut theirs.members).remove(&peer);
    theirs.version = VectorClock::new();
    theirs.version.increment(&up);
    theirs.remove(&welcomer, 9_000);
    theirs.update_member(Member::joining(me.clone(), Default::default(), "0.0.0"));
    theirs.version.increment(&up);
    theirs.only_seen_by(&up);

    // A welcome from anyone else is not the answer we wait for.
    let stray = Message::Welcome {
        from: welcomer.clone(),
        gossip: Arc::new(theirs.clone()),
    };
    let out = deliver(&mut node, 10_010, stray);
    assert_eq!(dropped(&out), vec![DropReason::Unexpected]);

    let welcome = Message::Welcome {
        from: up.clone(),
        gossip: Arc::new(theirs),
    };
    let out = deliver(&mut node, 10_020, welcome);
    let g = node.gossip();
    assert!(!g.has_member(&welcomer), "the tombstone wins");
    assert!(g.tombstones.contains_key(&welcomer));
    assert_eq!(
        g.member(&peer).map(|m| m.status),
        Some(MemberStatus::Joining)
    );
    assert_eq!(node.self_status(), Some(MemberStatus::Joining));
    assert!(g.seen_by(&me));
    assert!(
        !out.iter()
            .any(|e| matches!(e, Effect::Event(ClusterEvent::MemberRemoved { member, .. }) if member.addr == peer)),
        "another joiner does not vanish from our view"
    );
    // Talked back, so node 3 learns of node 4 too.
    assert!(sent(&out).iter().any(|(to, m)| *to == up.address
        && matches!(m, Message::GossipEnvelope { gossip, .. } if gossip.has_member(&peer))));

    // The answer was taken once; a duplicate is unexpected.
    let again = Message::Welcome {
        from: up.clone(),
        gossip: Arc::clone(node.gossip()),
    };
    let out = deliver(&mut node, 10_030, again);
    assert_eq!(dropped(&out), vec![DropReason::Unexpected]);
}

/// Simulator seed 2386 (leased sweep), reduced: a member frozen until the cluster removed
/// it wakes up to find its peers replaced by newer incarnations it never heard of. Their
/// `Quarantined` names this very incarnation, which only a holder of its tombstone sends:
/// it stops (it used to ignore them and lead a cluster of its own).
#[test]
fn a_member_told_it_was_removed_by_an_incarnation_it_does_not_know_stops() {
    let mut node = member_of_two(&addr(2));
    let me = node.self_node().clone();
    let newer = UniqueAddress::new(addr(2).address, addr(2).uid + 1);
    assert!(!node.gossip().has_member(&newer));

    // About another incarnation at this address: not this node's business.
    let elsewhere = UniqueAddress::new(me.address.clone(), me.uid + 1);
    let about_other = Message::Quarantined {
        from: newer.clone(),
        to: elsewhere,
    };
    let out = deliver(&mut node, 5_000, about_other);
    assert_eq!(dropped(&out), vec![DropReason::Unexpected]);
    assert!(!node.is_stopped());

    let quarantined = Message::Quarantined {
        from: newer,
        to: me,
    };
    let out = deliver(&mut node, 5_010, quarantined);
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::Shutdown(ShutdownReason::Removed)))
    );
    assert!(node.is_stopped());
}

/// A joiner that asked a member it had not heard of to take it back, and is told it was
/// removed, stops.
#[test]
fn a_joiner_that_asks_a_member_holding_its_tombstone_is_quarantined_and_stops() {
    let mut node = orphan_joiner(0);
    let me = node.self_node().clone();
    let newer = UniqueAddress::new(addr(3).address, addr(3).uid + 1);
    let out = deliver(&mut node, 10_000, not_known(&newer, &me));
    assert!(sent(&out).iter().any(|(_, m)| is_join_of(m, &me)));
    let quarantined = Message::Quarantined {
        from: newer,
        to: me,
    };
    let out = deliver(&mut node, 10_010, quarantined);
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::Shutdown(ShutdownReason::Removed)))
    );
    assert!(node.is_stopped());
}

/// Delivers `msg` as sent by the peer `from` (whatever the message names).
fn deliver_from(node: &mut Membership, at: u64, from: &UniqueAddress, msg: Message) -> Vec<Effect> {
    let mut out = Vec::new();
    node.handle(
        t(at),
        Input::Message {
            msg,
            from: from.clone(),
            received_at: t(at),
        },
        &mut out,
    );
    out
}

#[test]
fn a_stranger_cannot_down_leave_or_quarantine_a_member() {
    let other = addr(2);
    let mut node = member_of_two(&other);
    let me = node.self_node().clone();
    let before = Gossip::clone(node.gossip());
    let stranger = UniqueAddress::new(Address::new("10.6.6.6", 2552), 66);
    let attacks = [
        Message::Down {
            address: other.address.clone(),
        },
        Message::Down {
            address: me.address.clone(),
        },
        Message::Leave {
            address: other.address.clone(),
        },
        Message::Quarantined {
            from: stranger.clone(),
            to: me.clone(),
        },
        Message::ExitingConfirmed {
            node: stranger.clone(),
        },
    ];
    for (i, msg) in attacks.into_iter().enumerate() {
        let out = deliver_from(&mut node, 10 + i as u64, &stranger, msg);
        assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
        assert!(sent(&out).is_empty(), "nothing answered to the stranger");
    }
    assert!(!node.is_stopped());
    assert_eq!(*node.gossip().as_ref(), before, "nothing changed");

    // A stranger that names a member as the sender of a message is caught by the name.
    let out = deliver_from(
        &mut node,
        20,
        &stranger,
        Message::Quarantined {
            from: other.clone(),
            to: me.clone(),
        },
    );
    assert_eq!(dropped(&out), vec![DropReason::SenderMismatch]);
    assert!(!node.is_stopped());

    // Its heartbeats are answered (that changes nothing here), its answers to heartbeats
    // are not taken.
    let out = deliver_from(
        &mut node,
        30,
        &stranger,
        Message::HeartbeatRsp {
            from: stranger.clone(),
            seq: 1,
        },
    );
    assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
    assert_eq!(*node.gossip().as_ref(), before, "nothing changed");
}

#[test]
fn a_member_may_down_another_and_its_heartbeats_are_answered() {
    let other = addr(2);
    let third = addr(3);
    let mut node = member_of_two(&other);
    // Add a third Up member for `other` to down.
    let mut g = Gossip::clone(node.gossip());
    let mut m = Member::joining(third.clone(), Default::default(), "1");
    m.status = MemberStatus::Up;
    m.up_number = 3;
    Arc::make_mut(&mut g.members).insert(third.clone(), m);
    let mut out = Vec::new();
    node.set_gossip(t(1), g, &mut out);

    let out = deliver_from(
        &mut node,
        10,
        &other,
        Message::Heartbeat {
            from: other.clone(),
            seq: 7,
        },
    );
    assert!(dropped(&out).is_empty());
    assert!(sent(&out).iter().any(
        |(to, msg)| *to == other.address && matches!(msg, Message::HeartbeatRsp { seq: 7, .. })
    ));

    let out = deliver_from(
        &mut node,
        20,
        &other,
        Message::Down {
            address: third.address.clone(),
        },
    );
    assert!(dropped(&out).is_empty(), "{out:?}");
    assert_eq!(
        node.gossip().member(&third).map(|m| m.status),
        Some(MemberStatus::Down)
    );

    // A member that is itself Down has no say any more.
    let out = deliver_from(
        &mut node,
        30,
        &third,
        Message::Leave {
            address: other.address.clone(),
        },
    );
    assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
    assert_eq!(
        node.gossip().member(&other).map(|m| m.status),
        Some(MemberStatus::Up)
    );
}

#[test]
fn only_the_seeds_asked_may_answer_a_join_and_only_the_node_joined_may_welcome() {
    let me = addr(1);
    let seed = addr(2);
    let stranger = UniqueAddress::new(Address::new("10.6.6.6", 2552), 66);
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    let mut out = Vec::new();
    node.handle(
        t(0),
        Input::Command(Command::JoinSeedNodes(vec![seed.address.clone()])),
        &mut out,
    );

    // A stranger's "incompatible" answer would stop the node; its "compatible" one would
    // make it join the stranger; its nack would count toward forming a cluster alone.
    for (i, msg) in [
        Message::InitJoinAck {
            from: stranger.clone(),
            check: ConfigCheck::Incompatible("forged".into()),
        },
        Message::InitJoinAck {
            from: stranger.clone(),
            check: ConfigCheck::Compatible,
        },
        Message::InitJoinNack {
            from: stranger.clone(),
        },
    ]
    .into_iter()
    .enumerate()
    {
        let out = deliver_from(&mut node, 10 + i as u64, &stranger, msg);
        assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
        assert!(sent(&out).is_empty());
    }
    assert!(!node.is_stopped());

    // A stranger's welcome does not make it a member of the stranger's cluster.
    let mut fake = Gossip::default();
    for n in [&me, &stranger] {
        Arc::make_mut(&mut fake.members).insert(
            n.clone(),
            Member::joining(n.clone(), Default::default(), "1"),
        );
    }
    let fake = Arc::new(fake);
    let out = deliver_from(
        &mut node,
        20,
        &stranger,
        Message::Welcome {
            from: stranger.clone(),
            gossip: Arc::clone(&fake),
        },
    );
    assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
    assert!(!node.is_member());

    // The seed's answer is taken: the node joins the seed.
    let out = deliver_from(
        &mut node,
        30,
        &seed,
        Message::InitJoinAck {
            from: seed.clone(),
            check: ConfigCheck::Compatible,
        },
    );
    assert!(dropped(&out).is_empty());
    assert!(
        sent(&out)
            .iter()
            .any(|(to, msg)| *to == seed.address && is_join_of(msg, &me))
    );
    // While joining, the stranger's welcome is still refused.
    let out = deliver_from(
        &mut node,
        40,
        &stranger,
        Message::Welcome {
            from: stranger.clone(),
            gossip: fake,
        },
    );
    assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
    assert!(!node.is_member());
}

/// A node dialled under `name` (a DNS alias of the seed, say).
fn alias(name: &str) -> Address {
    Address::new(name, 2552)
}

fn identified(
    node: &mut Membership,
    at: u64,
    dialled: &Address,
    who: &UniqueAddress,
) -> Vec<Effect> {
    let mut out = Vec::new();
    node.handle(
        t(at),
        Input::PeerIdentified {
            dialled: dialled.clone(),
            node: who.clone(),
        },
        &mut out,
    );
    out
}

#[test]
fn a_seed_named_by_an_alias_is_joined_under_its_identity_once_the_runtime_says_who_answered() {
    let me = addr(1);
    let seed = UniqueAddress::new(Address::new("pod-0.svc", 2552), 5);
    let seeds = alias("seeds.svc");
    let other = UniqueAddress::new(Address::new("pod-9.svc", 2552), 9);
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    let mut out = Vec::new();
    node.handle(
        t(0),
        Input::Command(Command::JoinSeedNodes(vec![seeds.clone()])),
        &mut out,
    );
    // Asked under the configured name.
    assert!(
        sent(&out)
            .iter()
            .any(|(to, m)| *to == seeds && matches!(m, Message::InitJoin { .. }))
    );
    // Before the runtime says who answers there, the seed's identity is a stranger.
    let ack = Message::InitJoinAck {
        from: seed.clone(),
        check: ConfigCheck::Compatible,
    };
    let out = deliver_from(&mut node, 10, &seed, ack.clone());
    assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
    // Who answers at an address that is not a seed changes nothing.
    let out = identified(&mut node, 15, &alias("elsewhere.svc"), &other);
    assert!(out.is_empty());
    let out = deliver_from(
        &mut node,
        16,
        &other,
        Message::InitJoinAck {
            from: other.clone(),
            check: ConfigCheck::Compatible,
        },
    );
    assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);

    // The runtime dialled `seeds.svc` and `pod-0.svc` answered: its answer counts, and the
    // Join goes to the identity, never to the alias.
    assert!(identified(&mut node, 20, &seeds, &seed).is_empty());
    let out = deliver_from(&mut node, 30, &seed, ack);
    assert!(dropped(&out).is_empty());
    let joins: Vec<Address> = sent(&out)
        .into_iter()
        .filter(|(_, m)| is_join_of(m, &me))
        .map(|(to, _)| to)
        .collect();
    assert_eq!(joins, vec![seed.address.clone()]);

    // Its welcome makes this node a member of a cluster whose members are identities only.
    let mut g = Gossip::default();
    for n in [&seed, &me] {
        Arc::make_mut(&mut g.members).insert(
            n.clone(),
            Member::joining(n.clone(), Default::default(), "1"),
        );
    }
    let out = deliver_from(
        &mut node,
        40,
        &seed,
        Message::Welcome {
            from: seed.clone(),
            gossip: Arc::new(g),
        },
    );
    assert!(dropped(&out).is_empty(), "{out:?}");
    assert!(node.is_member());
    assert!(
        node.gossip().members.keys().all(|m| m.address != seeds),
        "the alias is never a member"
    );
}

#[test]
fn a_seed_alias_that_turns_out_to_be_this_node_forms_the_cluster() {
    // The only seed is this node under another name: it forms the cluster at once.
    let me = UniqueAddress::new(Address::new("pod-0.svc", 2552), 5);
    let seeds = alias("seeds.svc");
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    let mut out = Vec::new();
    node.handle(
        t(0),
        Input::Command(Command::JoinSeedNodes(vec![seeds.clone()])),
        &mut out,
    );
    assert!(!node.is_member());
    identified(&mut node, 5, &seeds, &me);
    assert!(node.is_member());
    assert_eq!(node.gossip().members.len(), 1);

    // First of several seeds: it forms the cluster `seed-node-timeout` after seeding began,
    // when no other seed takes it; its own nack does not count as another seed's.
    let other_seed = UniqueAddress::new(Address::new("pod-1.svc", 2552), 6);
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    let mut out = Vec::new();
    node.handle(
        t(0),
        Input::Command(Command::JoinSeedNodes(vec![
            seeds.clone(),
            other_seed.address.clone(),
        ])),
        &mut out,
    );
    identified(&mut node, 5, &seeds, &me);
    let out = deliver_from(
        &mut node,
        6,
        &me,
        Message::InitJoinNack { from: me.clone() },
    );
    assert!(dropped(&out).is_empty());
    assert!(!node.is_member(), "its own nack is not the other seed's");
    // Not asked any more under the alias that is itself.
    let mut out = Vec::new();
    node.handle_timeout(t(1000), &mut out);
    let asked: Vec<Address> = sent(&out).into_iter().map(|(to, _)| to).collect();
    assert_eq!(asked, vec![other_seed.address.clone()]);
    let timeout = MembershipConfig::default().seed_node_timeout;
    assert_eq!(
        node.poll_timeout(),
        Some(t(timeout.as_millis() as u64).min(t(2000)))
    );
    let mut out = Vec::new();
    node.handle_timeout(t(timeout.as_millis() as u64), &mut out);
    assert!(
        node.is_member(),
        "formed the cluster at the first seed's deadline"
    );

    // The other seed's nack alone forms it before then.
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    let mut out = Vec::new();
    node.handle(
        t(0),
        Input::Command(Command::JoinSeedNodes(vec![
            seeds.clone(),
            other_seed.address.clone(),
        ])),
        &mut out,
    );
    identified(&mut node, 5, &seeds, &me);
    deliver_from(
        &mut node,
        20,
        &other_seed,
        Message::InitJoinNack {
            from: other_seed.clone(),
        },
    );
    assert!(node.is_member());
}

#[test]
fn a_join_target_named_by_an_alias_welcomes_under_its_identity() {
    let me = addr(1);
    let target = UniqueAddress::new(Address::new("pod-3.svc", 2552), 3);
    let name = alias("shop.example");
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    let mut out = Vec::new();
    node.handle(t(0), Input::Command(Command::Join(name.clone())), &mut out);
    assert!(
        sent(&out)
            .iter()
            .any(|(to, m)| *to == name && is_join_of(m, &me))
    );
    identified(&mut node, 5, &name, &target);
    let mut g = Gossip::default();
    for n in [&target, &me] {
        Arc::make_mut(&mut g.members).insert(
            n.clone(),
            Member::joining(n.clone(), Default::default(), "1"),
        );
    }
    let out = deliver_from(
        &mut node,
        10,
        &target,
        Message::Welcome {
            from: target.clone(),
            gossip: Arc::new(g),
        },
    );
    assert!(dropped(&out).is_empty(), "{out:?}");
    assert!(node.is_member());
}

/// The `SeedsUnanswered` reports among `out`, as (seeds, attempts, waited).
fn seed_reports(out: &[Effect]) -> Vec<(Vec<Address>, u32, std::time::Duration)> {
    out.iter()
        .filter_map(|e| match e {
            Effect::SeedsUnanswered {
                seeds,
                attempts,
                waited,
            } => Some((seeds.clone(), *attempts, *waited)),
            _ => None,
        })
        .collect()
}

/// Runs `node`'s timers until `until_ms`, collecting every effect with the instant it came.
fn run_timers(node: &mut Membership, until_ms: u64) -> Vec<(u64, Effect)> {
    let mut all = Vec::new();
    while let Some(at) = node.poll_timeout() {
        let ms = at.as_millis();
        if ms > until_ms {
            break;
        }
        let mut out = Vec::new();
        node.handle_timeout(at, &mut out);
        all.extend(out.into_iter().map(|e| (ms, e)));
    }
    all
}

#[test]
fn seeds_that_never_answer_are_reported_after_the_seed_node_timeout_then_with_back_off() {
    let me = addr(1);
    let seeds = vec![addr(2).address, addr(3).address];
    let cfg = MembershipConfig::default();
    assert_eq!(cfg.seed_node_timeout, std::time::Duration::from_secs(5));
    let mut node = Membership::new(cfg, me, 1, t(0));
    let mut out = Vec::new();
    node.handle(
        t(0),
        Input::Command(Command::JoinSeedNodes(seeds.clone())),
        &mut out,
    );
    assert!(seed_reports(&out).is_empty(), "nothing to say at once");
    let effects = run_timers(&mut node, 200_000);
    let reports: Vec<(u64, u32)> = effects
        .iter()
        .filter_map(|(at, e)| {
            let r = seed_reports(std::slice::from_ref(e));
            r.first().map(|(s, attempts, waited)| {
                assert_eq!(*s, seeds, "the seeds as configured");
                assert_eq!(
                    waited.as_millis() as u64,
                    *at,
                    "waited since the first attempt"
                );
                (*at, *attempts)
            })
        })
        .collect();
    // After 5 s, then 10 s, 20 s, 40 s, 80 s later; one round of asking per second.
    assert_eq!(
        reports,
        vec![
            (5_000, 6),
            (15_000, 16),
            (35_000, 36),
            (75_000, 76),
            (155_000, 156)
        ]
    );
}

#[test]
fn the_reports_stop_once_the_node_is_a_member_and_a_first_seed_forming_a_cluster_reports_nothing() {
    // A first seed that nobody answers forms the cluster at the timeout: no report.
    let me = addr(1);
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    let mut out = Vec::new();
    node.handle(
        t(0),
        Input::Command(Command::JoinSeedNodes(vec![
            me.address.clone(),
            addr(2).address,
        ])),
        &mut out,
    );
    let effects = run_timers(&mut node, 60_000);
    assert!(node.is_member());
    assert!(
        effects
            .iter()
            .all(|(_, e)| seed_reports(std::slice::from_ref(e)).is_empty())
    );

    // A joiner reported once, then welcomed: no more reports.
    let seed = addr(2);
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    node.handle(
        t(0),
        Input::Command(Command::JoinSeedNodes(vec![seed.address.clone()])),
        &mut out,
    );
    let effects = run_timers(&mut node, 6_000);
    assert_eq!(
        effects
            .iter()
            .filter(|(_, e)| !seed_reports(std::slice::from_ref(e)).is_empty())
            .count(),
        1
    );
    let ack = Message::InitJoinAck {
        from: seed.clone(),
        check: ConfigCheck::Compatible,
    };
    deliver_from(&mut node, 6_500, &seed, ack);
    let mut g = Gossip::with_members([
        Member::joining(seed.clone(), Default::default(), "1"),
        Member::joining(me.clone(), Default::default(), "1"),
    ]);
    g.version.increment(&seed);
    let welcome = Message::Welcome {
        from: seed.clone(),
        gossip: Arc::new(g),
    };
    deliver_from(&mut node, 6_600, &seed, welcome);
    assert!(node.is_member());
    let effects = run_timers(&mut node, 400_000);
    assert!(
        effects
            .iter()
            .all(|(_, e)| seed_reports(std::slice::from_ref(e)).is_empty())
    );
}

#[test]
fn a_join_to_a_given_node_that_never_welcomes_is_reported_naming_that_node() {
    let me = addr(1);
    let target = addr(2).address;
    let mut node = Membership::new(MembershipConfig::default(), me, 1, t(0));
    let mut out = Vec::new();
    node.handle(
        t(0),
        Input::Command(Command::Join(target.clone())),
        &mut out,
    );
    let effects = run_timers(&mut node, 16_000);
    let reports: Vec<_> = effects
        .iter()
        .flat_map(|(at, e)| {
            seed_reports(std::slice::from_ref(e))
                .into_iter()
                .map(move |r| (*at, r))
        })
        .collect();
    // The Join is sent again every retry-unsuccessful-join-after (10 s): two attempts by 15 s.
    assert_eq!(
        reports,
        vec![
            (
                5_000,
                (vec![target.clone()], 1, std::time::Duration::from_secs(5))
            ),
            (
                15_000,
                (vec![target], 2, std::time::Duration::from_secs(15))
            ),
        ]
    );
}

/// A member whose port refuses a connection is unreachable from this node at once, stays so
/// while the failure detector (which has heard nothing amiss) would still call it available,
/// and becomes reachable again once it answers a heartbeat. A refusal at an address no member
/// has, or from a member that is leaving, changes nothing.
#[test]
fn a_refused_connection_marks_the_member_unreachable_until_it_answers_a_heartbeat() {
    let me = addr(1);
    let other = addr(2);
    let mut node = member_of_two(&other);
    let reachable = |node: &Membership| node.gossip().reachability.is_reachable_from(&me, &other);
    let mut out = Vec::new();
    node.handle(
        t(100),
        Input::PeerRefused {
            address: Address::new("127.0.0.1", 9),
        },
        &mut out,
    );
    assert!(reachable(&node), "no member there");
    assert_eq!(node.stats().peers_refused, 0);

    node.handle(
        t(100),
        Input::PeerRefused {
            address: other.address.clone(),
        },
        &mut out,
    );
    assert!(!reachable(&node), "unreachable at once");
    assert_eq!(node.stats().peers_refused, 1);
    run_timers(&mut node, 1_100);
    assert!(!reachable(&node), "the reaper keeps it unreachable");

    deliver_from(
        &mut node,
        1_200,
        &other,
        Message::HeartbeatRsp {
            from: other.clone(),
            seq: 1,
        },
    );
    run_timers(&mut node, 2_500);
    assert!(reachable(&node), "it answered a heartbeat: reachable again");

    let mut g = Gossip::clone(node.gossip());
    if let Some(m) = Arc::make_mut(&mut g.members).get_mut(&other) {
        m.status = MemberStatus::Leaving;
    }
    let mut out = Vec::new();
    node.set_gossip(t(2_600), g, &mut out);
    node.handle(
        t(2_600),
        Input::PeerRefused {
            address: other.address.clone(),
        },
        &mut out,
    );
    assert!(
        reachable(&node),
        "a leaving member closes its port once it exits"
    );
    assert_eq!(node.stats().peers_refused, 1);
}

/// Simulator seed 1344, reduced: a member frozen long enough to have been removed must not
/// welcome a joiner into the view it still holds when it wakes, only once the members it
/// heartbeats have answered a heartbeat sent after the freeze (a member that removed it would
/// have answered `Quarantined` instead, which stops it).
#[test]
fn after_a_freeze_a_member_welcomes_only_once_the_members_it_heartbeats_answer_again() {
    let other = addr(2);
    let joiner = addr(5);
    let mut node = member_of_two(&other);
    let init_join = || Message::InitJoin {
        from: joiner.clone(),
        config: JoinConfig {
            cluster_name: "shardik".into(),
            must_match: Default::default(),
        },
    };
    let acked = |out: &[Effect]| {
        sent(out)
            .iter()
            .any(|(_, m)| matches!(m, Message::InitJoinAck { .. }))
    };
    let nacked = |out: &[Effect]| {
        sent(out)
            .iter()
            .any(|(_, m)| matches!(m, Message::InitJoinNack { .. }))
    };
    run_timers(&mut node, 2_000);
    assert!(acked(&deliver(&mut node, 2_000, init_join())));
    let before_freeze = node.heartbeat_seq;

    // Frozen from 2 s to 30 s: the joiner's InitJoin is the first thing it handles on waking.
    let out = deliver(&mut node, 30_000, init_join());
    assert!(nacked(&out), "{out:?}");
    // An answer to a heartbeat sent before the freeze proves nothing.
    deliver_from(
        &mut node,
        30_001,
        &other,
        Message::HeartbeatRsp {
            from: other.clone(),
            seq: before_freeze,
        },
    );
    assert!(nacked(&deliver(&mut node, 30_002, init_join())));
    let heartbeats: Vec<u64> = run_timers(&mut node, 30_010)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Effect::Send {
                msg: Message::Heartbeat { seq, .. },
                ..
            } => Some(seq),
            _ => None,
        })
        .collect();
    let after_freeze = *heartbeats.last().expect("heartbeats go out on waking");
    assert!(after_freeze > before_freeze);
    assert!(nacked(&deliver(&mut node, 30_020, init_join())));
    deliver_from(
        &mut node,
        30_030,
        &other,
        Message::HeartbeatRsp {
            from: other.clone(),
            seq: after_freeze,
        },
    );
    let out = deliver(&mut node, 30_040, init_join());
    assert!(acked(&out), "{out:?}");
}

mod compat;
mod full_shutdown;
mod sbr_lease;
