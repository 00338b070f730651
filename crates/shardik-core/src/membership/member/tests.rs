//! Unit tests of members: the transition table, merge priority and age ordering.

use super::*;
use crate::membership::address::Address;
use MemberStatus::*;

fn m(port: u16, status: MemberStatus, up: u32) -> Member {
    Member {
        addr: UniqueAddress::new(Address::new("h", port), 1),
        status,
        up_number: up,
        roles: BTreeSet::new(),
        app_version: "0.0.0".into(),
    }
}

/// The allowed transitions, as a full table (row = from, listed = allowed to).
#[test]
fn transition_table() {
    let allowed: &[(MemberStatus, &[MemberStatus])] = &[
        (Joining, &[Joining, WeaklyUp, Up, Leaving, Down, Removed]),
        (WeaklyUp, &[WeaklyUp, Up, Leaving, Down, Removed]),
        (Up, &[Up, Leaving, Down, Removed, PreparingForShutdown]),
        (Leaving, &[Leaving, Exiting, Down, Removed]),
        (Exiting, &[Exiting, Removed, Down]),
        (Down, &[Down, Removed]),
        (
            PreparingForShutdown,
            &[
                PreparingForShutdown,
                ReadyForShutdown,
                Removed,
                Leaving,
                Down,
            ],
        ),
        (
            ReadyForShutdown,
            &[ReadyForShutdown, Removed, Leaving, Down],
        ),
        (Removed, &[Removed]),
    ];
    for (from, tos) in allowed {
        for to in MemberStatus::ALL {
            let expected = tos.contains(&to);
            assert_eq!(from.can_move_to(to), expected, "{from} -> {to}");
            if expected && *from != to {
                // A merge must never undo a transition.
                assert!(
                    from.merge_rank() < to.merge_rank(),
                    "rank of {from} -> {to}"
                );
            }
        }
    }
}

/// Merge priority order, equal status resolved to the older member.
#[test]
fn merge_priority() {
    let order = [
        Joining,
        WeaklyUp,
        Up,
        PreparingForShutdown,
        ReadyForShutdown,
        Leaving,
        Exiting,
        Down,
        Removed,
    ];
    for w in order.windows(2) {
        let lo = m(1, w[0], 5);
        let hi = m(1, w[1], 5);
        assert_eq!(Member::highest_priority(&lo, &hi).status, w[1]);
        assert_eq!(Member::highest_priority(&hi, &lo).status, w[1]);
    }
    let young = m(1, Up, 7);
    let old = m(1, Up, 3);
    assert_eq!(Member::highest_priority(&young, &old).up_number, 3);
    assert_eq!(Member::highest_priority(&old, &young).up_number, 3);
}

#[test]
fn age_ordering_by_up_number_then_address() {
    let a = m(5, Up, 1);
    let b = m(1, Up, 2);
    let c = m(2, Up, 2);
    assert!(a.is_older_than(&b));
    assert!(b.is_older_than(&c));
    assert!(!c.is_older_than(&c));
    let joining = m(0, Joining, NOT_YET_UP);
    assert!(c.is_older_than(&joining));
}
