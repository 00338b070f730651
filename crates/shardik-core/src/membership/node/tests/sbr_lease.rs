//! lease-majority's lease holder (`sbr_lease.rs`): first the holder alone (answered at once
//! while held, one acquisition at a time, no retry of its own, renewals, loss, release, a late
//! grant given back), then a node whose resolver decides under it.

use std::time::Duration;

use super::{addr, member_of_two_with, t};
use crate::lease::{LeaseAnswer, LeaseCall, LeaseLoss, LeaseRequest};
use crate::membership::node::sbr_lease::SbrLeaseHolder;
use crate::membership::node::*;
use crate::membership::sbr::{Decision, SbrAction, SbrSettings, Strategy};

/// lease-majority with a lease of 10 s, renewed every 2 s, 1 s per call.
fn lease_majority() -> Strategy {
    Strategy::LeaseMajority {
        role: None,
        acquire_lease_delay_for_minority: Duration::from_secs(2),
        release_after: Duration::from_secs(40),
        lease_operation_timeout: Duration::from_secs(1),
        lease_ttl: Duration::from_secs(10),
        lease_renew_interval: Duration::from_secs(2),
    }
}

fn holder() -> SbrLeaseHolder {
    SbrLeaseHolder::for_strategy(&lease_majority()).expect("lease-majority has a holder")
}

/// The lease calls among `out`, in order.
fn calls(out: &[Effect]) -> Vec<LeaseRequest<()>> {
    out.iter()
        .filter_map(|e| match e {
            Effect::SbrLease(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// The one lease call in `out`.
fn only_call(out: &[Effect]) -> LeaseRequest<()> {
    let calls = calls(out);
    assert_eq!(calls.len(), 1, "{out:?}");
    calls[0].clone()
}

/// A holder that acquired the lease with `token` at 0 ms, for attempt 1.
fn holding(token: u64) -> SbrLeaseHolder {
    let mut h = holder();
    let mut out = Vec::new();
    assert_eq!(h.acquire(t(0), 1, &mut out), None);
    let id = only_call(&out).id;
    out.clear();
    assert_eq!(
        h.answered(t(5), id, LeaseAnswer::Granted { token }, &mut out),
        Some((1, true))
    );
    assert!(out.is_empty(), "{out:?}");
    h
}

#[test]
fn only_lease_majority_has_a_holder() {
    assert!(SbrLeaseHolder::for_strategy(&Strategy::KeepMajority { role: None }).is_none());
    assert!(SbrLeaseHolder::for_strategy(&lease_majority()).is_some());
}

#[test]
fn a_held_lease_answers_at_once_and_one_not_held_takes_one_store_call() {
    let mut h = holding(7);
    assert_eq!(h.held(t(5)), Some(7));
    // Counted on until the request's send time + 10 s − 1 s.
    assert_eq!(h.held(t(8_999)), Some(7));
    assert_eq!(h.held(t(9_000)), None);
    let mut out = Vec::new();
    assert_eq!(h.acquire(t(1_000), 2, &mut out), Some(true));
    assert!(out.is_empty(), "no store call while held: {out:?}");
}

#[test]
fn a_new_attempt_while_an_acquisition_is_out_is_answered_by_that_one() {
    let mut h = holder();
    let mut out = Vec::new();
    assert_eq!(h.acquire(t(0), 1, &mut out), None);
    let first = only_call(&out);
    assert_eq!(first.call, LeaseCall::Acquire);
    out.clear();
    assert_eq!(h.acquire(t(10), 2, &mut out), None);
    assert!(out.is_empty(), "one acquisition at a time: {out:?}");
    assert_eq!(
        h.answered(t(20), first.id, LeaseAnswer::Granted { token: 3 }, &mut out),
        Some((2, true)),
        "the newest attempt hears the answer"
    );
}

#[test]
fn another_holder_or_a_failure_is_not_granted_and_not_tried_again() {
    for answer in [LeaseAnswer::HeldByOther, LeaseAnswer::Failed("down".into())] {
        let mut h = holder();
        let mut out = Vec::new();
        h.acquire(t(0), 4, &mut out);
        let id = only_call(&out).id;
        out.clear();
        assert_eq!(h.answered(t(5), id, answer, &mut out), Some((4, false)));
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(h.poll_timeout(), None, "no retry of its own");
        // Asked again, it asks the store again.
        h.acquire(t(100), 5, &mut out);
        assert_eq!(only_call(&out).call, LeaseCall::Acquire);
    }
}

#[test]
fn an_acquisition_not_answered_in_time_is_not_granted_and_its_late_grant_given_back() {
    let mut h = holder();
    let mut out = Vec::new();
    h.acquire(t(0), 1, &mut out);
    let id = only_call(&out).id;
    out.clear();
    assert_eq!(h.poll_timeout(), Some(t(1_000)));
    assert_eq!(h.handle_timeout(t(999), &mut out), None, "not yet");
    assert_eq!(h.handle_timeout(t(1_000), &mut out), Some((1, false)));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(h.poll_timeout(), None);
    assert_eq!(
        h.answered(t(1_500), id, LeaseAnswer::Granted { token: 9 }, &mut out),
        None
    );
    assert_eq!(only_call(&out).call, LeaseCall::Release { token: 9 });
    assert_eq!(h.held(t(1_500)), None);
}

#[test]
fn a_held_lease_is_renewed_and_lost_when_a_renewal_is_refused() {
    let mut h = holding(2);
    let mut out = Vec::new();
    assert_eq!(h.poll_timeout(), Some(t(2_000)), "renewed every 2 s");
    assert_eq!(h.handle_timeout(t(2_000), &mut out), None);
    let renewal = only_call(&out);
    assert_eq!(renewal.call, LeaseCall::Renew { token: 2 });
    out.clear();
    assert_eq!(
        h.answered(t(2_010), renewal.id, LeaseAnswer::Renewed, &mut out),
        None
    );
    assert_eq!(h.held(t(10_000)), Some(2), "counted on until 2 s + 9 s now");
    h.handle_timeout(t(4_000), &mut out);
    let renewal = only_call(&out);
    out.clear();
    h.answered(t(4_010), renewal.id, LeaseAnswer::Refused, &mut out);
    assert!(
        matches!(out[..], [Effect::SbrLeaseLost(LeaseLoss::Refused)]),
        "{out:?}"
    );
    assert_eq!(h.held(t(4_010)), None);
    assert_eq!(h.poll_timeout(), None);
}

#[test]
fn a_lease_whose_renewals_go_unanswered_is_lost_at_its_deadline() {
    let mut h = holding(2);
    let mut out = Vec::new();
    while let Some(at) = h.poll_timeout() {
        assert!(at <= t(9_000), "lost by its deadline");
        h.handle_timeout(at, &mut out);
    }
    assert!(
        out.iter().all(|e| matches!(
            e,
            Effect::SbrLease(LeaseRequest {
                call: LeaseCall::Renew { token: 2 },
                ..
            })
        ) || matches!(e, Effect::SbrLeaseLost(LeaseLoss::Expired))),
        "{out:?}"
    );
    assert!(matches!(
        out.last(),
        Some(Effect::SbrLeaseLost(LeaseLoss::Expired))
    ));
    assert!(calls(&out).len() >= 4, "renewals were tried: {out:?}");
}

#[test]
fn a_deadline_passed_during_a_pause_is_caught_when_the_lease_is_asked_for() {
    let mut h = holding(2);
    let mut out = Vec::new();
    // Frozen past the deadline: no timer ran, the resolver asks on waking.
    assert_eq!(h.acquire(t(9_500), 2, &mut out), None);
    assert!(
        matches!(out[0], Effect::SbrLeaseLost(LeaseLoss::Expired)),
        "{out:?}"
    );
    assert_eq!(only_call(&out).call, LeaseCall::Acquire);
}

#[test]
fn release_gives_a_held_lease_back_and_stops_its_renewals() {
    let mut h = holding(6);
    let mut out = Vec::new();
    h.release(&mut out);
    assert_eq!(only_call(&out).call, LeaseCall::Release { token: 6 });
    assert_eq!(h.held(t(10)), None);
    assert_eq!(h.poll_timeout(), None);
    out.clear();
    h.release(&mut out);
    assert!(out.is_empty(), "nothing more to give back");
}

// ---- a node whose resolver decides under the lease ----

/// A member of a two-node cluster under lease-majority (stable-after 2 s) whose peer never
/// answers, run until it asks the store for the lease. Returns the node, the request and
/// when it was made.
fn asking_for_the_lease(other: &UniqueAddress) -> (Membership, LeaseRequest<()>, Instant) {
    let cfg = MembershipConfig {
        downing: Some(SbrSettings::new(lease_majority(), Duration::from_secs(2))),
        ..MembershipConfig::default()
    };
    let mut node = member_of_two_with(cfg, other);
    let mut out = Vec::new();
    while let Some(at) = node.poll_timeout() {
        assert!(at < t(60_000), "no lease request within a minute");
        node.handle_timeout(at, &mut out);
        for e in out.drain(..) {
            if let Effect::SbrLease(request) = e {
                assert_eq!(request.call, LeaseCall::Acquire);
                return (node, request, at);
            }
            assert!(!matches!(e, Effect::Sbr(_)), "{e:?}");
        }
    }
    panic!("the node stopped");
}

fn answer(node: &mut Membership, at: Instant, id: u64, answer: LeaseAnswer) -> Vec<Effect> {
    let mut out = Vec::new();
    node.handle(at, Input::SbrLeaseAnswered { id, answer }, &mut out);
    out
}

fn downs(out: &[Effect]) -> Option<(Decision, Vec<UniqueAddress>)> {
    out.iter().find_map(|e| match e {
        Effect::Sbr(SbrAction::Down { decision, nodes }) => Some((*decision, nodes.clone())),
        _ => None,
    })
}

#[test]
fn granted_the_node_downs_its_silent_peer_and_keeps_the_lease_renewed() {
    let other = addr(2);
    let (mut node, request, at) = asking_for_the_lease(&other);
    assert_eq!(
        node.gossip().member(&other).map(|m| m.status),
        Some(MemberStatus::Up),
        "nothing is downed before the lease answers"
    );
    let out = answer(&mut node, at, request.id, LeaseAnswer::Granted { token: 4 });
    assert_eq!(
        downs(&out),
        Some((Decision::DownUnreachable, vec![other.clone()]))
    );
    assert_eq!(
        node.gossip().member(&other).map(|m| m.status),
        Some(MemberStatus::Down)
    );
    assert_eq!(node.sbr_lease_token(at), Some(4));
    // Its timers now include the renewal, 2 s after the acquisition was sent.
    let renew_at = at + Duration::from_secs(2);
    assert!(node.poll_timeout().is_some_and(|p| p <= renew_at));
    let mut out = Vec::new();
    while let Some(p) = node.poll_timeout().filter(|p| *p <= renew_at) {
        node.handle_timeout(p, &mut out);
    }
    let renewal = only_call(&out);
    assert_eq!(renewal.call, LeaseCall::Renew { token: 4 });
    assert!(!node.is_stopped());
}

#[test]
fn refused_the_node_downs_itself_and_stops() {
    let other = addr(2);
    let (mut node, request, at) = asking_for_the_lease(&other);
    // An answer to another request changes nothing.
    assert!(answer(&mut node, at, request.id + 1, LeaseAnswer::HeldByOther).is_empty());
    let out = answer(&mut node, at, request.id, LeaseAnswer::HeldByOther);
    let me = node.self_node().clone();
    assert_eq!(downs(&out), Some((Decision::DownReachable, vec![me])));
    assert!(
        out.iter()
            .any(|e| matches!(e, Effect::Shutdown(ShutdownReason::Downed)))
    );
    assert!(calls(&out).is_empty(), "nothing held, nothing to give back");
    assert!(node.is_stopped());
}

#[test]
fn a_store_that_does_not_answer_in_time_downs_the_side_that_asked() {
    let other = addr(2);
    let (mut node, _request, at) = asking_for_the_lease(&other);
    let timeout = at + Duration::from_secs(1);
    let mut out = Vec::new();
    while let Some(p) = node.poll_timeout().filter(|p| *p < timeout) {
        node.handle_timeout(p, &mut out);
    }
    assert_eq!(downs(&out), None, "not before the operation timeout");
    assert_eq!(node.poll_timeout(), Some(timeout));
    node.handle_timeout(timeout, &mut out);
    let me = node.self_node().clone();
    assert_eq!(downs(&out), Some((Decision::DownReachable, vec![me])));
    assert!(node.is_stopped());
}

#[test]
fn a_node_that_stops_holding_the_lease_does_not_release_it() {
    let other = addr(2);
    let (mut node, request, at) = asking_for_the_lease(&other);
    answer(&mut node, at, request.id, LeaseAnswer::Granted { token: 4 });
    let me = node.self_node().address.clone();
    let mut out = Vec::new();
    node.handle(at, Input::Command(Command::Down(me)), &mut out);
    assert!(node.is_stopped(), "{out:?}");
    assert!(calls(&out).is_empty(), "no release: {out:?}");
    assert_eq!(node.poll_timeout(), None, "no more renewals");
}
