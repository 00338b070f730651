//! Two node cores wired by hand: the exit and leave rules, and when the view is taken.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::Instant;
use crate::membership::{
    Address, Effect, Gossip, Input, Member, MemberStatus, MembershipConfig, ShutdownReason,
    UniqueAddress,
};

const LEAVE_TIMEOUT: Duration = Duration::from_secs(30);

fn addr(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) * 1000 + 7)
}

/// Two cores that formed a cluster (both Up, the state seen by both).
fn two_members() -> [NodeCore; 2] {
    two_members_with(MembershipConfig::default())
}

/// [`two_members`] with these settings.
fn two_members_with(cfg: MembershipConfig) -> [NodeCore; 2] {
    let (a, b) = (addr(1), addr(2));
    let mut g = Gossip::default();
    for (i, n) in [&a, &b].into_iter().enumerate() {
        let mut m = Member::joining(n.clone(), Default::default(), "1");
        m.status = MemberStatus::Up;
        m.up_number = i as u32 + 1;
        Arc::make_mut(&mut g.members).insert(n.clone(), m);
    }
    g.version.increment(&a);
    g.seen = g.members.keys().cloned().collect();
    let g = Arc::new(g);
    [a, b].map(|n| {
        let seed = n.uid;
        let mut core = NodeCore::new(cfg.clone(), n, seed, Instant::ZERO, LEAVE_TIMEOUT);
        core.start_as_member(Instant::ZERO, Arc::clone(&g));
        core
    })
}

/// What the pump saw each core do.
#[derive(Default)]
struct Seen {
    self_exiting: [bool; 2],
    shutdown: [Option<ShutdownReason>; 2],
}

/// Runs both cores until `until`, delivering every message at once (unless `cut`), and
/// confirming exit tasks at once when `confirm` says so.
fn pump(
    nodes: &mut [NodeCore; 2],
    out: &mut [Vec<Effect>; 2],
    seen: &mut Seen,
    until: Instant,
    cut: bool,
    confirm: bool,
) -> Instant {
    let mut now = Instant::ZERO;
    loop {
        let mut progressed = true;
        while progressed {
            progressed = false;
            for i in 0..2 {
                for effect in std::mem::take(&mut out[i]) {
                    match effect {
                        Effect::Send { to, msg } if !cut => {
                            let j = 1 - i;
                            if nodes[j].self_node().address == to {
                                let from = nodes[i].self_node().clone();
                                let input = Input::Message {
                                    msg,
                                    from,
                                    received_at: now,
                                };
                                let mut more = Vec::new();
                                nodes[j].handle(now, input, &mut more);
                                out[j].extend(more);
                                progressed = true;
                            }
                        }
                        Effect::SelfExiting => {
                            seen.self_exiting[i] = true;
                            if confirm {
                                let mut more = Vec::new();
                                nodes[i].exit_tasks_done(now, &mut more);
                                out[i].extend(more);
                                progressed = true;
                            }
                        }
                        Effect::Shutdown(reason) => seen.shutdown[i] = Some(reason),
                        _ => {}
                    }
                }
            }
        }
        let next = nodes.iter().filter_map(NodeCore::poll_timeout).min();
        match next {
            Some(t) if t <= until => {
                now = t.max(now);
                for i in 0..2 {
                    if nodes[i].poll_timeout().is_some_and(|t| t <= now) {
                        let mut more = Vec::new();
                        nodes[i].handle_timeout(now, &mut more);
                        out[i].extend(more);
                    }
                }
            }
            _ => return now,
        }
    }
}

fn at(secs: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(secs)
}

#[test]
fn exiting_is_confirmed_only_after_the_exit_tasks() {
    let mut nodes = two_members();
    let (mut out, mut seen) = ([Vec::new(), Vec::new()], Seen::default());
    assert!(!nodes[1].leave(Instant::ZERO, &mut out[1]));
    // The tasks never finish within 10 s: the node stays Exiting, it is not removed.
    pump(&mut nodes, &mut out, &mut seen, at(10), false, false);
    assert!(seen.self_exiting[1], "the leaving node became Exiting");
    assert!(nodes[1].is_running_exit_tasks());
    assert_eq!(
        nodes[1].membership().self_status(),
        Some(MemberStatus::Exiting)
    );
    assert_eq!(seen.shutdown[1], None, "no exit before the tasks are done");
    let mut more = Vec::new();
    nodes[1].exit_tasks_done(at(10), &mut more);
    out[1].extend(more);
    pump(&mut nodes, &mut out, &mut seen, at(20), false, false);
    assert_eq!(seen.shutdown[1], Some(ShutdownReason::Left));
    assert!(!nodes[1].is_running_exit_tasks());
}

#[test]
fn exit_tasks_that_overrun_the_leave_timeout_are_given_up_on() {
    let mut nodes = two_members();
    let (mut out, mut seen) = ([Vec::new(), Vec::new()], Seen::default());
    // Asked to leave by the other member (an operator's request there): no leave deadline of
    // its own, only the exit tasks' one.
    let leaver = nodes[1].self_node().address.clone();
    let leave = Input::Command(crate::membership::Command::Leave(leaver));
    nodes[0].handle(Instant::ZERO, leave, &mut out[0]);
    pump(&mut nodes, &mut out, &mut seen, at(5), false, false);
    assert!(nodes[1].is_running_exit_tasks());
    let due = nodes[1].poll_timeout().expect("a deadline is armed");
    assert!(due <= Instant::ZERO + LEAVE_TIMEOUT + Duration::from_secs(5));
    // Step to the exit deadline alone: the core reports it and confirms Exiting itself.
    let mut overdue = None;
    let mut now = Instant::ZERO;
    while overdue.is_none() && now < at(60) {
        now = nodes[1].poll_timeout().expect("a deadline is armed");
        let mut more = Vec::new();
        overdue = nodes[1].handle_timeout(now, &mut more);
        out[1].extend(more);
    }
    assert_eq!(overdue, Some(Overdue::ExitTasks));
    assert!(!nodes[1].is_running_exit_tasks());
    pump(&mut nodes, &mut out, &mut seen, at(60), false, false);
    assert_eq!(seen.shutdown[1], Some(ShutdownReason::Left));
}

#[test]
fn a_leave_that_cannot_complete_stops_the_node_after_the_leave_timeout() {
    // No resolver: nothing but the leave timeout ends the node's wait.
    let mut nodes = two_members_with(MembershipConfig {
        downing: None,
        ..MembershipConfig::default()
    });
    let mut out = [Vec::new(), Vec::new()];
    nodes[1].leave(Instant::ZERO, &mut out[1]);
    // Nobody hears it: the leave cannot complete.
    let mut overdue = None;
    let mut now = Instant::ZERO;
    while overdue.is_none() {
        let Some(next) = nodes[1].poll_timeout() else {
            panic!("stopped at {now:?}: {:?}", out[1]);
        };
        now = next;
        assert!(now <= Instant::ZERO + LEAVE_TIMEOUT, "stopped by {now:?}");
        let mut more = Vec::new();
        overdue = nodes[1].handle_timeout(now, &mut more);
        out[1].extend(more);
    }
    assert_eq!(overdue, Some(Overdue::Leave));
    assert_eq!(now, Instant::ZERO + LEAVE_TIMEOUT);
    assert!(nodes[1].is_stopped());
    assert!(
        out[1]
            .iter()
            .any(|e| matches!(e, Effect::Shutdown(ShutdownReason::Left)))
    );
    assert_eq!(nodes[1].poll_timeout(), None);
}

#[test]
fn a_second_leave_request_or_one_before_joining_stops_at_once() {
    let mut nodes = two_members();
    let mut out = Vec::new();
    assert!(!nodes[1].leave(Instant::ZERO, &mut out));
    out.clear();
    assert!(nodes[1].leave(at(1), &mut out));
    // Stopped, not Left: what it had not handed off yet was not.
    assert!(matches!(
        out.as_slice(),
        [Effect::Shutdown(ShutdownReason::Stopped)]
    ));

    let mut lonely = NodeCore::new(
        MembershipConfig::default(),
        addr(9),
        9,
        Instant::ZERO,
        LEAVE_TIMEOUT,
    );
    let mut out = Vec::new();
    assert!(lonely.leave(Instant::ZERO, &mut out), "not a member yet");
    assert!(lonely.is_stopped());
    assert!(
        matches!(out.as_slice(), [Effect::Shutdown(ShutdownReason::Stopped)]),
        "a node that never joined did not leave: {out:?}"
    );
}

#[test]
fn the_view_is_taken_again_only_when_the_membership_changed() {
    let mut nodes = two_members();
    let first = nodes[0].take_view().expect("the first view");
    assert_eq!(first.members.len(), 2);
    assert!(first.unreachable.is_empty());
    assert_eq!(nodes[0].take_view(), None, "nothing changed");
    let (mut out, mut seen) = ([Vec::new(), Vec::new()], Seen::default());
    nodes[1].leave(Instant::ZERO, &mut out[1]);
    pump(&mut nodes, &mut out, &mut seen, at(1), false, true);
    let after = nodes[0].take_view().expect("the leave changed the state");
    assert_ne!(after, first);
}
