//! Preparing for a full cluster shutdown, one core at a time (`full_shutdown.rs`, and its
//! rules in `leader.rs` and `joining.rs`).

use std::sync::Arc;

use crate::membership::address::Address;
use crate::membership::events::ClusterEvent;
use crate::membership::node::*;

fn addr(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) * 1000 + 7)
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// Node 1 in a converged cluster of `up` (Up, in that order of age, node 1 first) and
/// `joining` (Joining), all of whom have seen the state.
fn member_of(up: &[u16], joining: &[u16]) -> Membership {
    let me = addr(up[0]);
    let mut node = Membership::new(MembershipConfig::default(), me.clone(), 1, t(0));
    let mut g = Gossip::default();
    for (i, port) in up.iter().enumerate() {
        let mut m = Member::joining(addr(*port), Default::default(), "1");
        m.status = MemberStatus::Up;
        m.up_number = i as u32 + 1;
        Arc::make_mut(&mut g.members).insert(m.addr.clone(), m);
    }
    for port in joining {
        let m = Member::joining(addr(*port), Default::default(), "1");
        Arc::make_mut(&mut g.members).insert(m.addr.clone(), m);
    }
    g.version.increment(&me);
    g.seen = g.members.keys().cloned().collect();
    node.start_as_member(t(0), Arc::new(g));
    node
}

/// Tells `node` that every member has seen its current state (as their gossip would).
fn seen_by_all(node: &mut Membership, at: u64) {
    let mut g = Gossip::clone(node.gossip());
    let members: Vec<UniqueAddress> = g.members.keys().cloned().collect();
    for m in &members {
        g.see(m);
    }
    let from = members
        .iter()
        .find(|m| *m != node.self_node())
        .expect("another member")
        .clone();
    let msg = Message::GossipEnvelope {
        from: from.clone(),
        to: node.self_node().clone(),
        gossip: Arc::new(g),
    };
    let mut out = Vec::new();
    node.handle(
        t(at),
        Input::Message {
            msg,
            from,
            received_at: t(at),
        },
        &mut out,
    );
    assert!(
        !out.iter().any(|e| matches!(e, Effect::Dropped { .. })),
        "{out:?}"
    );
}

/// Runs the node's timers until `until`.
fn tick_until(node: &mut Membership, until: u64) -> Vec<Effect> {
    let mut out = Vec::new();
    while let Some(at) = node.poll_timeout().filter(|at| *at <= t(until)) {
        node.handle_timeout(at, &mut out);
    }
    out
}

fn status(node: &Membership, port: u16) -> Option<MemberStatus> {
    node.gossip().member(&addr(port)).map(|m| m.status)
}

fn command(node: &mut Membership, at: u64, cmd: Command) -> Vec<Effect> {
    let mut out = Vec::new();
    node.handle(t(at), Input::Command(cmd), &mut out);
    out
}

#[test]
fn every_up_member_prepares_then_the_leader_makes_them_ready_once_all_have_seen_it() {
    let mut node = member_of(&[1, 2, 3], &[]);
    assert!(!node.is_preparing_for_shutdown());
    let out = command(&mut node, 100, Command::PrepareForFullClusterShutdown);
    assert!(node.is_preparing_for_shutdown());
    for port in [1, 2, 3] {
        assert_eq!(
            status(&node, port),
            Some(MemberStatus::PreparingForShutdown)
        );
    }
    let preparing_events = out
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Event(ClusterEvent::MemberPreparingForShutdown(_))
            )
        })
        .count();
    assert_eq!(preparing_events, 3);
    let reported = |out: &[Effect]| {
        out.iter()
            .filter(|e| matches!(e, Effect::PreparingForFullShutdown))
            .count()
    };
    assert_eq!(reported(&out), 1, "reported once");
    assert!(
        out.iter().any(|e| matches!(
            e,
            Effect::Send {
                msg: Message::GossipEnvelope { .. },
                ..
            }
        )),
        "gossiped at once"
    );
    // Not converged yet (only this node has seen it): nothing is ready.
    tick_until(&mut node, 900);
    assert_eq!(status(&node, 2), Some(MemberStatus::PreparingForShutdown));
    // Everyone has seen it: the leader (this node, lowest address) moves them on.
    seen_by_all(&mut node, 1000);
    let out = tick_until(&mut node, 3000);
    for port in [1, 2, 3] {
        assert_eq!(status(&node, port), Some(MemberStatus::ReadyForShutdown));
    }
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::Event(ClusterEvent::MemberReadyForShutdown(_))))
    );
    // The command again changes nothing and is not an error.
    let out = command(&mut node, 3100, Command::PrepareForFullClusterShutdown);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(reported(&out), 0);
}

#[test]
fn nobody_joins_or_is_moved_up_while_the_cluster_prepares() {
    let mut node = member_of(&[1, 2], &[3]);
    command(&mut node, 100, Command::PrepareForFullClusterShutdown);
    assert_eq!(status(&node, 3), Some(MemberStatus::Joining), "not marked");
    seen_by_all(&mut node, 200);
    tick_until(&mut node, 3000);
    assert_eq!(status(&node, 1), Some(MemberStatus::ReadyForShutdown));
    assert_eq!(
        status(&node, 3),
        Some(MemberStatus::Joining),
        "a joiner is not moved up"
    );

    // A new node asks to join: refused, counted, nothing changes and nothing is sent back.
    let joiner = addr(4);
    let join = Message::Join {
        node: joiner.clone(),
        roles: Default::default(),
        app_version: "1".into(),
        config: Some(Box::new(JoinConfig {
            cluster_name: node.config().cluster_name.clone(),
            must_match: node.config().join_compat.values(),
        })),
    };
    let before = Arc::clone(node.gossip());
    let mut out = Vec::new();
    node.handle(
        t(3100),
        Input::Message {
            msg: join,
            from: joiner.clone(),
            received_at: t(3100),
        },
        &mut out,
    );
    assert_eq!(
        out.iter()
            .filter_map(|e| match e {
                Effect::Dropped { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect::<Vec<_>>(),
        vec![DropReason::PreparingForShutdown]
    );
    assert!(
        !out.iter().any(|e| matches!(e, Effect::Send { .. })),
        "{out:?}"
    );
    assert!(Arc::ptr_eq(&before, node.gossip()), "state unchanged");
    assert_eq!(
        DropReason::PreparingForShutdown.as_str(),
        "preparing-for-shutdown"
    );
}

#[test]
fn a_member_up_in_a_concurrent_state_is_marked_too() {
    // Node 2's view, concurrent with the preparation: node 3 was moved Up there.
    let mut node = member_of(&[1, 2], &[]);
    command(&mut node, 100, Command::PrepareForFullClusterShutdown);
    let mut g = Gossip::clone(node.gossip());
    let mut late = Member::joining(addr(3), Default::default(), "1");
    late.status = MemberStatus::Up;
    late.up_number = 3;
    g.update_member(late);
    g.version.increment(&addr(3));
    g.see(&addr(3));
    // Seen as a full state from node 3 after a merge: node 3 Up, the rest preparing.
    let msg = Message::GossipEnvelope {
        from: addr(2),
        to: addr(1),
        gossip: Arc::new(g),
    };
    let mut out = Vec::new();
    node.handle(
        t(200),
        Input::Message {
            msg,
            from: addr(2),
            received_at: t(200),
        },
        &mut out,
    );
    assert_eq!(status(&node, 3), Some(MemberStatus::Up));
    tick_until(&mut node, 2500);
    assert_eq!(
        status(&node, 3),
        Some(MemberStatus::PreparingForShutdown),
        "marked on the next leader tick"
    );
}

#[test]
fn a_member_ready_for_shutdown_can_still_leave() {
    let mut node = member_of(&[1, 2], &[]);
    command(&mut node, 100, Command::PrepareForFullClusterShutdown);
    seen_by_all(&mut node, 200);
    tick_until(&mut node, 3000);
    assert_eq!(status(&node, 2), Some(MemberStatus::ReadyForShutdown));
    let out = command(&mut node, 3100, Command::Leave(addr(2).address.clone()));
    assert!(
        !out.iter().any(|e| matches!(e, Effect::CommandFailed(_))),
        "{out:?}"
    );
    assert_eq!(status(&node, 2), Some(MemberStatus::Leaving));
    // A concurrent state that still has it ReadyForShutdown does not undo the leave.
    let stale = Gossip::clone(node.gossip());
    let mut ready = stale.clone();
    let m = Member {
        status: MemberStatus::ReadyForShutdown,
        ..stale.member(&addr(2)).expect("member").clone()
    };
    Arc::make_mut(&mut ready.members).insert(addr(2), m);
    let merged = stale.merge(&ready);
    assert_eq!(
        merged.member(&addr(2)).map(|m| m.status),
        Some(MemberStatus::Leaving)
    );
    seen_by_all(&mut node, 3200);
    tick_until(&mut node, 6000);
    assert_eq!(status(&node, 2), Some(MemberStatus::Exiting));
}

#[test]
fn a_node_that_is_not_a_member_cannot_prepare() {
    let mut node = Membership::new(MembershipConfig::default(), addr(1), 1, t(0));
    let out = command(&mut node, 0, Command::PrepareForFullClusterShutdown);
    assert!(matches!(
        out.as_slice(),
        [Effect::CommandFailed(CommandError::NotAMember)]
    ));
    assert!(!node.is_preparing_for_shutdown());
}
