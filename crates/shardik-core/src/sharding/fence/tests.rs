//! Unit tests of the self-fence's clock.

use super::*;

const S: Duration = Duration::from_secs(10);

fn t(s: u64) -> Instant {
    Instant::from_nanos(s * 1_000_000_000)
}

#[test]
fn closes_after_the_decision_time_and_a_brief_heal_does_not_restart_the_clock() {
    let mut f = SelfFence::new(S, S);
    assert_eq!(f.update(t(0), true), FenceChange::None);
    assert_eq!(f.update(t(12), false), FenceChange::None);
    assert_eq!(f.next_deadline(), Some(t(22)));
    // A heal of one second in the middle.
    assert_eq!(f.update(t(20), true), FenceChange::None);
    assert_eq!(f.update(t(21), false), FenceChange::None);
    assert_eq!(f.tick(t(22)), FenceChange::Closed);
    assert!(f.is_closed());
    // Open only after a majority held for twice the decision time.
    assert_eq!(f.update(t(30), true), FenceChange::None);
    assert_eq!(f.next_deadline(), Some(t(50)));
    assert_eq!(f.tick(t(49)), FenceChange::None);
    assert_eq!(f.tick(t(50)), FenceChange::Opened);
    assert!(!f.is_closed());
}

#[test]
fn a_deadline_passed_unseen_with_the_majority_settled_is_not_due_again() {
    // The sharding simulation's store-cut seed 4853: a node paused over its deadline
    // found a settled majority when it ran again, did not close, and was woken at the
    // past deadline over and over without its clock moving.
    let mut f = SelfFence::new(S, S);
    f.update(t(0), false);
    assert_eq!(f.update(t(8), true), FenceChange::None);
    assert_eq!(f.next_deadline(), Some(t(10)));
    // Paused from before 10 until 14: by then the majority has held for 6 s.
    assert_eq!(f.tick(t(14)), FenceChange::None);
    assert!(!f.is_closed());
    assert_eq!(f.next_deadline(), Some(t(18)));
    assert_eq!(f.tick(t(18)), FenceChange::None);
    assert_eq!(f.next_deadline(), None);
    // Losing the majority again starts a new period.
    f.update(t(19), false);
    assert_eq!(f.next_deadline(), Some(t(29)));
}

#[test]
fn a_majority_that_came_back_just_before_the_deadline_does_not_count() {
    // The failure detector reports a heal that is already over (the sim's seed 670).
    let mut f = SelfFence::new(S, S);
    f.update(t(0), false);
    assert_eq!(f.update(t(8), true), FenceChange::None);
    assert_eq!(f.tick(t(10)), FenceChange::Closed);
    // Then the majority goes again: still closed, and the clock to open starts over.
    f.update(t(12), false);
    assert_eq!(f.next_deadline(), None);
    f.update(t(13), true);
    assert_eq!(f.tick(t(32)), FenceChange::None);
    assert_eq!(f.tick(t(33)), FenceChange::Opened);
}

#[test]
fn a_loss_shorter_than_the_decision_time_never_closes_it() {
    let mut f = SelfFence::new(S, S);
    f.update(t(0), false);
    f.update(t(3), true);
    // The majority is back, settled, when the deadline passes: no fence; healthy at 13.
    assert_eq!(f.tick(t(10)), FenceChange::None);
    assert_eq!(f.tick(t(13)), FenceChange::None);
    assert_eq!(f.next_deadline(), None);
    // Lost again at 16: a fresh period.
    f.update(t(16), false);
    assert_eq!(f.tick(t(25)), FenceChange::None);
    assert_eq!(f.tick(t(26)), FenceChange::Closed);
}

#[test]
fn a_majority_is_counted_as_keep_majority_counts() {
    use crate::membership::Address;
    let n = |i: u16| UniqueAddress::new(Address::new(format!("n{i}"), 1), u64::from(i));
    let up =
        |i| Member::joining(n(i), BTreeSet::new(), String::new()).with_status(MemberStatus::Up);
    let members = vec![up(1), up(2), up(3), up(4)];
    let cut = |ids: &[u16]| ids.iter().map(|&i| n(i)).collect::<BTreeSet<_>>();
    assert!(SelfFence::sees_majority(&n(1), &members, &cut(&[4])));
    assert!(!SelfFence::sees_majority(&n(4), &members, &cut(&[1, 2, 3])));
    // 2|2: the half with the lowest address.
    assert!(SelfFence::sees_majority(&n(1), &members, &cut(&[3, 4])));
    assert!(!SelfFence::sees_majority(&n(3), &members, &cut(&[1, 2])));
    // A joining node is not counted and fences nothing.
    let mut joining = members.clone();
    joining.push(Member::joining(n(5), BTreeSet::new(), String::new()));
    assert!(SelfFence::sees_majority(
        &n(5),
        &joining,
        &cut(&[1, 2, 3, 4])
    ));
}
