//! The resolver's timing: stable-after, instability, down-all-when-unstable.

use std::collections::BTreeSet;
use std::time::Duration;

use super::fixtures::*;
use crate::membership::address::UniqueAddress;
use crate::membership::member::Member;
use crate::membership::reachability::ReachabilityStatus;
use crate::membership::sbr::*;
use crate::time::Instant;
use Decision::{DownAll as All, DownReachable as Reach, DownUnreachable as Unreach};

#[test]
fn settings_defaults() {
    let s = SbrSettings::default();
    assert_eq!(s.stable_after, Duration::from_secs(20));
    assert_eq!(s.down_all_when_unstable, Some(Duration::from_secs(15)));
    assert_eq!(s.strategy, keep_majority());
    assert_eq!(
        SbrSettings::down_all_when_unstable_on(Duration::from_secs(2)),
        Duration::from_secs(4)
    );
}

// ---- SplitBrainResolver timing -----------------------------------------------------

fn secs(s: f64) -> Instant {
    Instant::from_nanos((s * 1e9) as u64)
}

/// A five-node view from A with `unreachable` nodes unreachable from A.
fn five(unreachable: &[Member]) -> SbrView {
    let members = vec![a(), b(), c(), d(), e()];
    SbrView {
        self_addr: a().addr,
        unreachable: addrs(unreachable),
        records: unreachable
            .iter()
            .map(|m| (a().addr, m.addr.clone(), ReachabilityStatus::Unreachable))
            .collect(),
        seen_by: members
            .iter()
            .filter(|m| !unreachable.contains(m))
            .map(|m| m.addr.clone())
            .collect(),
        members,
        gone: BTreeSet::new(),
    }
}

/// The decision and nodes of a [`SbrAction::Down`]; `None` for anything else.
fn downs(action: Option<SbrAction>) -> Option<(Decision, Vec<UniqueAddress>)> {
    match action {
        Some(SbrAction::Down { decision, nodes }) => Some((decision, nodes)),
        _ => None,
    }
}

fn sbr(stable: f64, unstable: Option<f64>) -> SplitBrainResolver {
    SplitBrainResolver::new(
        SbrSettings {
            strategy: keep_majority(),
            stable_after: Duration::from_secs_f64(stable),
            down_all_when_unstable: unstable.map(Duration::from_secs_f64),
        },
        secs(0.0),
    )
}

#[test]
fn decides_only_after_stable_after() {
    let mut r = sbr(20.0, None);
    let v = five(&[d(), e()]);
    r.note_change(secs(1.0), SbrChange::Unreachable, &v);
    r.note_change(secs(2.0), SbrChange::Unreachable, &v);
    assert_eq!(r.next_deadline(), Some(secs(22.0)));
    assert_eq!(r.tick(secs(21.9), true, &v), None, "not stable yet");
    assert_eq!(r.tick(secs(22.0), false, &v), None, "not responsible");
    let (decision, nodes) = downs(r.tick(secs(22.0), true, &v)).expect("decision due");
    assert_eq!(decision, Unreach);
    assert_eq!(nodes, vec![d().addr, e().addr]);
    assert_eq!(r.stable_deadline(), secs(42.0), "reset after acting");
    assert_eq!(r.instability(), None);
}

#[test]
fn every_change_but_removal_resets_the_deadline() {
    let mut r = sbr(20.0, None);
    let v = five(&[e()]);
    r.note_change(secs(1.0), SbrChange::Unreachable, &v);
    r.note_change(secs(10.0), SbrChange::MemberUp, &v);
    assert_eq!(r.tick(secs(21.0), true, &v), None);
    r.note_change(secs(15.0), SbrChange::MemberExited, &v);
    r.note_change(secs(16.0), SbrChange::MemberRemoved, &v);
    assert_eq!(r.stable_deadline(), secs(35.0));
    assert!(r.tick(secs(35.0), true, &v).is_some());
}

/// The leader of the minority downs its own side, self last.
#[test]
fn minority_leader_downs_itself_last() {
    let mut r = sbr(1.0, None);
    let v = SbrView {
        self_addr: a().addr,
        ..five(&[c(), d(), e()])
    };
    r.note_change(secs(0.0), SbrChange::Unreachable, &v);
    let (decision, nodes) = downs(r.tick(secs(1.0), true, &v)).unwrap();
    assert_eq!(decision, Reach);
    assert_eq!(nodes, vec![b().addr, a().addr]);
}

/// "not down when unreachable become reachable", "… is already Down".
#[test]
fn nothing_to_do_when_healed_or_already_down() {
    let mut r = sbr(1.0, None);
    let healed = five(&[]);
    r.note_change(secs(0.0), SbrChange::Unreachable, &five(&[e()]));
    r.note_change(secs(0.5), SbrChange::Reachable, &healed);
    assert_eq!(r.tick(secs(5.0), true, &healed), None);
    assert_eq!(r.instability(), None, "all unreachable healed");

    let mut r = sbr(1.0, None);
    let mut v = five(&[e()]);
    v.members[4] = downed(e());
    r.note_change(secs(0.0), SbrChange::MemberDowned, &v);
    assert_eq!(r.instability(), None, "the only unreachable is Down");
    assert_eq!(r.tick(secs(5.0), true, &v), None);
}

/// Joining members do not count for resetting instability (as the reference).
#[test]
fn unreachable_joining_does_not_keep_instability_alive() {
    let mut r = sbr(2.0, Some(1.0));
    let mut v = five(&[e()]);
    v.members[4] = joining(e());
    r.note_change(secs(0.0), SbrChange::Unreachable, &v);
    assert_eq!(r.instability(), None);
}

/// "down all when unstable, scenario 1" (stable-after 2 s, down-all-when-unstable 1 s):
/// E flaps every second, D stays unreachable. The stable deadline keeps moving, but after
/// 3 s of changes everyone goes down — on a node that is not the leader too.
#[test]
fn down_all_when_unstable_fires_on_every_node() {
    for responsible in [true, false] {
        let mut r = sbr(2.0, Some(1.0));
        let de = five(&[d(), e()]);
        let dd = five(&[d()]);
        r.note_change(secs(0.0), SbrChange::Unreachable, &de);
        r.note_change(secs(0.0), SbrChange::Unreachable, &de);
        assert_eq!(r.tick(secs(0.1), responsible, &de), None);
        r.note_change(secs(1.0), SbrChange::Reachable, &dd);
        assert_eq!(r.tick(secs(1.1), responsible, &dd), None);
        r.note_change(secs(2.0), SbrChange::Unreachable, &de);
        assert_eq!(r.tick(secs(2.1), responsible, &de), None);
        assert_eq!(r.next_deadline(), Some(secs(3.0)));
        r.note_change(secs(3.0), SbrChange::Reachable, &dd);
        assert_eq!(
            r.tick(secs(3.0), responsible, &dd),
            None,
            "not beyond 3 s yet"
        );
        let (decision, nodes) = downs(r.tick(secs(3.1), responsible, &dd)).expect("down all");
        assert_eq!(decision, All);
        assert_eq!(
            nodes,
            vec![b().addr, c().addr, d().addr, e().addr, a().addr]
        );
        assert_eq!(r.instability(), None);
    }
}

/// "not down all when becoming stable again".
#[test]
fn no_down_all_once_stable_again() {
    let mut r = sbr(2.0, Some(1.0));
    let de = five(&[d(), e()]);
    let dd = five(&[d()]);
    let healed = five(&[]);
    r.note_change(secs(0.0), SbrChange::Unreachable, &de);
    r.note_change(secs(1.0), SbrChange::Reachable, &dd);
    assert_eq!(r.tick(secs(1.5), false, &dd), None);
    r.note_change(secs(2.0), SbrChange::Reachable, &healed);
    assert_eq!(r.instability(), None);
    for t in [2.5, 5.0, 10.0] {
        assert_eq!(r.tick(secs(t), true, &healed), None);
    }
}

/// With down-all-when-unstable off nothing is downed for instability, and the tracking
/// is forgotten after 2 × stable-after without changes; the normal decision still comes.
#[test]
fn instability_tracking_expires_when_feature_off() {
    let mut r = sbr(2.0, None);
    let v = five(&[e()]);
    r.note_change(secs(0.0), SbrChange::Unreachable, &v);
    assert_eq!(r.tick(secs(1.0), false, &v), None);
    assert!(r.instability().is_some());
    assert_eq!(r.tick(secs(4.1), false, &v), None);
    assert_eq!(r.instability(), None);
    assert_eq!(
        downs(r.tick(secs(4.2), true, &v)).map(|(d, _)| d),
        Some(Unreach)
    );
}

/// A member whose port refused a connection is gone, not silent: once every reachable member
/// has seen the current state, the leader downs it without waiting for stable-after.
#[test]
fn a_gone_member_is_downed_without_waiting_for_stable_after() {
    let mut r = sbr(20.0, None);
    let mut v = five(&[e()]);
    r.note_change(secs(0.0), SbrChange::Unreachable, &v);
    assert!(r.tick(secs(1.0), true, &v).is_none(), "silent: it waits");
    v.gone = addrs(&[e()]);
    assert!(
        r.tick(secs(1.0), false, &v).is_none(),
        "only the leader decides"
    );
    let (decision, nodes) = downs(r.tick(secs(2.0), true, &v)).expect("decided at once");
    assert_eq!(decision, Unreach);
    assert_eq!(nodes, vec![e().addr]);
}

/// A gone member beside a silent one, or a state some reachable member has not seen yet: the
/// split is not evident, and the resolver waits for stable-after as usual.
#[test]
fn a_gone_member_beside_a_silent_one_or_an_unseen_state_waits_for_stable_after() {
    let mut r = sbr(20.0, None);
    let mut beside_silent = five(&[d(), e()]);
    beside_silent.gone = addrs(&[e()]);
    r.note_change(secs(0.0), SbrChange::Unreachable, &beside_silent);
    assert!(r.tick(secs(2.0), true, &beside_silent).is_none());
    let mut unseen = five(&[e()]);
    unseen.gone = addrs(&[e()]);
    unseen.seen_by.remove(&b().addr);
    assert!(r.tick(secs(2.0), true, &unseen).is_none());
    let (_, nodes) = downs(r.tick(secs(20.0), true, &beside_silent)).expect("stable by now");
    assert_eq!(nodes, vec![d().addr, e().addr]);
}

/// The side the strategy would down does not act early, even when everything unreachable is
/// gone: those nodes may be restarting, and their new incarnations replace them as they join.
#[test]
fn a_minority_facing_gone_members_still_waits_for_stable_after() {
    let mut r = sbr(20.0, None);
    let mut v = five(&[c(), d(), e()]);
    v.gone = addrs(&[c(), d(), e()]);
    r.note_change(secs(0.0), SbrChange::Unreachable, &v);
    assert!(r.tick(secs(2.0), true, &v).is_none());
    let (decision, _) = downs(r.tick(secs(20.0), true, &v)).expect("stable by now");
    assert_eq!(decision, Reach);
}
