//! Unit tests of the sharding view: which node runs the coordinator (and its stand-in), how long
//! a member that went away lingers, and who may register and host.

use super::*;
use crate::membership::Address;

fn ua(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("h", port), u64::from(port))
}

fn member(port: u16, status: MemberStatus, up: u32, roles: &[&str]) -> Member {
    let mut m = Member::joining(
        ua(port),
        roles.iter().map(|r| r.to_string()).collect(),
        "1.0",
    );
    m.status = status;
    m.up_number = up;
    m
}

const MARGIN: Duration = Duration::from_secs(10);

#[test]
fn coordinator_is_the_oldest_with_the_role() {
    let mut v = ShardingView::new(ua(2), Some("b".into()), MARGIN);
    v.update(
        Instant::ZERO,
        [
            member(1, MemberStatus::Up, 1, &["a"]),
            member(2, MemberStatus::Up, 2, &["b"]),
            member(3, MemberStatus::Up, 3, &["b"]),
        ],
        BTreeSet::new(),
    );
    assert_eq!(v.coordinator_node(), Some(&ua(2)));
    assert!(v.self_hosts_coordinator());
    assert_eq!(v.registration_targets(), vec![ua(2)]);
    assert_eq!(v.expected_regions(), [ua(2), ua(3)].into());
}

/// The stand-in: only when allowed, only while the coordinator's node is unreachable or
/// Down, and never a member someone cannot reach; registrations go to it too.
#[test]
fn a_stand_in_is_the_next_oldest_reachable_member_while_the_oldest_is_silent() {
    let members = |first: MemberStatus| {
        [
            member(1, first, 1, &[]),
            member(2, MemberStatus::Up, 2, &[]),
            member(3, MemberStatus::Up, 3, &[]),
        ]
    };
    let mut v = ShardingView::new(ua(3), None, MARGIN).with_stand_in(true);
    v.update(Instant::ZERO, members(MemberStatus::Up), BTreeSet::new());
    assert_eq!(v.stand_in(), None, "the oldest is heard");
    v.update(Instant::ZERO, members(MemberStatus::Up), [ua(1)].into());
    assert_eq!(v.stand_in(), Some(&ua(2)));
    assert!(v.may_run_coordinator(&ua(1)) && v.may_run_coordinator(&ua(2)));
    assert!(!v.may_run_coordinator(&ua(3)));
    assert_eq!(v.registration_targets(), vec![ua(1), ua(2)]);
    v.update(
        Instant::ZERO,
        members(MemberStatus::Up),
        [ua(1), ua(2)].into(),
    );
    assert_eq!(v.stand_in(), Some(&ua(3)), "the next one nobody reports");
    v.update(Instant::ZERO, members(MemberStatus::Down), [ua(1)].into());
    assert_eq!(v.stand_in(), Some(&ua(2)), "Down, not yet removed");
    v.update(
        Instant::ZERO,
        members(MemberStatus::Leaving),
        BTreeSet::new(),
    );
    assert_eq!(v.stand_in(), None, "leaving, and heard");
    let mut off = ShardingView::new(ua(3), None, MARGIN);
    off.update(Instant::ZERO, members(MemberStatus::Up), [ua(1)].into());
    assert_eq!(off.stand_in(), None, "not without leases");
    assert_eq!(off.registration_targets(), vec![ua(1)]);
}

#[test]
fn a_crashed_coordinator_lingers_for_the_margin() {
    let mut v = ShardingView::new(ua(2), None, MARGIN);
    let t0 = Instant::from_millis(1000);
    v.update(
        t0,
        [
            member(1, MemberStatus::Up, 1, &[]),
            member(2, MemberStatus::Up, 2, &[]),
        ],
        [ua(1)].into(),
    );
    v.update(
        t0,
        [
            member(1, MemberStatus::Down, 1, &[]),
            member(2, MemberStatus::Up, 2, &[]),
        ],
        [ua(1)].into(),
    );
    assert!(v.is_terminating(&ua(1)));
    assert!(!v.self_hosts_coordinator(), "the downed one may still run");
    v.update(t0, [member(2, MemberStatus::Up, 2, &[])], BTreeSet::new());
    assert!(v.is_terminating(&ua(1)), "removed but within the margin");
    assert_eq!(v.coordinator_node(), Some(&ua(1)));
    assert!(!v.self_hosts_coordinator());
    assert_eq!(v.next_expiry(), Some(t0 + MARGIN));
    assert!(v.expire(t0 + MARGIN));
    assert!(!v.may_be_alive(&ua(1)));
    assert!(v.self_hosts_coordinator());
}

#[test]
fn a_graceful_leaver_does_not_linger_and_keeps_the_coordinator_while_leaving() {
    let mut v = ShardingView::new(ua(1), None, MARGIN);
    v.update(
        Instant::ZERO,
        [
            member(1, MemberStatus::Leaving, 1, &[]),
            member(2, MemberStatus::Up, 2, &[]),
        ],
        BTreeSet::new(),
    );
    assert!(v.self_hosts_coordinator());
    assert_eq!(v.registration_targets(), vec![ua(1), ua(2)]);
    let mut other = ShardingView::new(ua(2), None, MARGIN);
    other.update(
        Instant::ZERO,
        [
            member(1, MemberStatus::Exiting, 1, &[]),
            member(2, MemberStatus::Up, 2, &[]),
        ],
        BTreeSet::new(),
    );
    assert!(!other.self_hosts_coordinator());
    other.update(
        Instant::ZERO,
        [member(2, MemberStatus::Up, 2, &[])],
        BTreeSet::new(),
    );
    assert!(other.self_hosts_coordinator(), "no margin after a leave");
}

/// Simulator seed 1869 (reachability sweep), reduced: a member Exiting when a partition
/// cuts it off is removed without any downing decision, but its regions may not have
/// finished handing off. It lingers for the margin, as a downed member does.
#[test]
fn an_exiting_member_cut_off_before_its_removal_lingers_for_the_margin() {
    let mut v = ShardingView::new(ua(2), None, MARGIN);
    let t0 = Instant::from_millis(1000);
    let exiting = [
        member(1, MemberStatus::Exiting, 1, &[]),
        member(2, MemberStatus::Up, 2, &[]),
    ];
    v.update(t0, exiting.clone(), BTreeSet::new());
    v.update(t0, exiting, [ua(1)].into());
    v.update(t0, [member(2, MemberStatus::Up, 2, &[])], BTreeSet::new());
    assert!(v.is_terminating(&ua(1)), "removed but within the margin");
    assert!(!v.self_hosts_coordinator());
    assert_eq!(v.next_expiry(), Some(t0 + MARGIN));
    assert!(v.expire(t0 + MARGIN));
    assert!(v.self_hosts_coordinator());
}

/// Members preparing for a full shutdown keep doing what Up members do (host shards, the
/// coordinator, take registrations), and seeing one latches the view's flag for good.
#[test]
fn members_preparing_for_shutdown_count_as_up_and_latch_the_flag() {
    let mut v = ShardingView::new(ua(1), None, MARGIN);
    v.update(
        Instant::ZERO,
        [
            member(1, MemberStatus::Up, 1, &[]),
            member(2, MemberStatus::Up, 2, &[]),
        ],
        BTreeSet::new(),
    );
    assert!(!v.is_preparing_for_shutdown());
    let changed = v.update(
        Instant::ZERO,
        [
            member(1, MemberStatus::ReadyForShutdown, 1, &[]),
            member(2, MemberStatus::PreparingForShutdown, 2, &[]),
        ],
        BTreeSet::new(),
    );
    assert!(changed);
    assert!(v.is_preparing_for_shutdown());
    assert!(v.self_hosts_coordinator());
    assert_eq!(v.registration_targets(), vec![ua(1)]);
    assert!(v.can_host(&ua(1)) && v.can_host(&ua(2)));
    assert!(v.can_register(&ua(2)));
    assert_eq!(v.up_count(), 2);
    assert_eq!(v.members_holding_shards().count(), 2);
    // Both leave and the first is gone: the flag stays.
    v.update(
        Instant::ZERO,
        [member(2, MemberStatus::Leaving, 2, &[])],
        BTreeSet::new(),
    );
    assert!(v.is_preparing_for_shutdown());
    assert!(!v.can_host(&ua(2)), "a leaving member gets no shard");
}

#[test]
fn joining_and_weakly_up_members_cannot_host() {
    let mut v = ShardingView::new(ua(1), None, MARGIN);
    v.update(
        Instant::ZERO,
        [
            member(1, MemberStatus::Up, 1, &[]),
            member(2, MemberStatus::WeaklyUp, u32::MAX, &[]),
            member(3, MemberStatus::Joining, u32::MAX, &[]),
        ],
        BTreeSet::new(),
    );
    assert!(v.can_host(&ua(1)));
    assert!(!v.can_host(&ua(2)));
    assert!(v.can_register(&ua(2)));
    assert!(!v.can_register(&ua(3)));
    assert_eq!(v.expected_regions(), [ua(1), ua(2)].into());
    assert!(v.any_joining());
}
