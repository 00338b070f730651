use std::sync::Arc;

use super::*;
use crate::membership::address::Address;
fn addr(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) * 1000 + 7)
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// A node that formed a cluster of itself and `other` (both Up), seen by both.
fn member_of_two(other: &UniqueAddress) -> Membership {
    member_of_two_with(MembershipConfig::default(), other)
}

/// [`member_of_two`] with these settings.
fn member_of_two_with(cfg: MembershipConfig, other: &UniqueAddress) -> Membership {
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

mod lease_majority {
    use std::time::Duration;

    use super::*;
    use crate::membership::sbr::{Decision, SbrAction, SbrSettings, Strategy};

    /// A member of a two-node cluster under lease-majority (stable-after 2 s) whose peer
    /// never answers, run until its resolver asks for the lease. Returns the node and the
    /// request's attempt.
    fn asking_for_the_lease(other: &UniqueAddress) -> (Membership, u64, Instant) {
        let cfg = MembershipConfig {
            downing: Some(SbrSettings::new(
                Strategy::LeaseMajority {
                    role: None,
                    acquire_lease_delay_for_minority: Duration::from_secs(2),
                    release_after: Duration::from_secs(40),
                    lease_operation_timeout: Duration::from_secs(5),
                },
                Duration::from_secs(2),
            )),
            ..MembershipConfig::default()
        };
        let mut node = member_of_two_with(cfg, other);
        let mut out = Vec::new();
        while let Some(at) = node.poll_timeout() {
            assert!(at < t(60_000), "no lease request within a minute");
            node.handle_timeout(at, &mut out);
            for e in out.drain(..) {
                if let Effect::Sbr(SbrAction::AcquireLease { attempt }) = e {
                    return (node, attempt, at);
                }
                assert!(!matches!(e, Effect::Sbr(SbrAction::Down { .. })), "{e:?}");
            }
        }
        panic!("the node stopped");
    }

    fn answer(node: &mut Membership, at: Instant, attempt: u64, granted: bool) -> Vec<Effect> {
        let mut out = Vec::new();
        node.handle(at, Input::SbrLeaseAnswer { attempt, granted }, &mut out);
        out
    }

    #[test]
    fn granted_the_node_downs_its_silent_peer() {
        let other = addr(2);
        let (mut node, attempt, at) = asking_for_the_lease(&other);
        assert_eq!(
            node.gossip().member(&other).map(|m| m.status),
            Some(MemberStatus::Up),
            "nothing is downed before the lease answers"
        );
        let out = answer(&mut node, at, attempt, true);
        assert!(out.iter().any(|e| matches!(
            e,
            Effect::Sbr(SbrAction::Down { decision: Decision::DownUnreachable, nodes })
                if nodes == &vec![other.clone()]
        )));
        assert_eq!(
            node.gossip().member(&other).map(|m| m.status),
            Some(MemberStatus::Down)
        );
        assert!(!node.is_stopped());
    }

    #[test]
    fn refused_the_node_downs_itself_and_stops() {
        let other = addr(2);
        let (mut node, attempt, at) = asking_for_the_lease(&other);
        // An answer to another request changes nothing.
        assert!(answer(&mut node, at, attempt + 1, false).is_empty());
        let out = answer(&mut node, at, attempt, false);
        let me = node.self_node().clone();
        assert!(out.iter().any(|e| matches!(
            e,
            Effect::Sbr(SbrAction::Down { decision: Decision::DownReachable, nodes })
                if nodes == &vec![me.clone()]
        )));
        assert!(
            out.iter()
                .any(|e| matches!(e, Effect::Shutdown(ShutdownReason::Downed)))
        );
        assert!(node.is_stopped());
    }
}
