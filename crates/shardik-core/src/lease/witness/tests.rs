//! Unit tests of the store as a witness: only the suspect's own expired tenure counts as lapsed.

use super::*;
use crate::membership::Address;

fn node(port: u16, uid: u64) -> UniqueAddress {
    UniqueAddress::new(Address::new("10.0.0.1", port), uid)
}

fn row(owner: Option<&UniqueAddress>, token: u64, ms: u64) -> StoreLease {
    StoreLease {
        owner: owner.map(owner_name),
        token,
        time_left: Duration::from_millis(ms),
    }
}

#[test]
fn only_the_suspects_own_expired_tenure_has_lapsed() {
    let suspect = node(2552, 7);
    let other = node(2553, 8);
    let restarted = node(2552, 9);
    let cases = [
        (None, Lapse::NotTheSuspects),
        (Some(row(None, 4, 0)), Lapse::NotTheSuspects),
        (Some(row(Some(&suspect), 4, 0)), Lapse::Lapsed { token: 4 }),
        (
            Some(row(Some(&suspect), 4, 1)),
            Lapse::Held {
                time_left: Duration::from_millis(1),
            },
        ),
        (Some(row(Some(&other), 5, 3000)), Lapse::NotTheSuspects),
        (Some(row(Some(&other), 5, 0)), Lapse::NotTheSuspects),
        // The same address with another uid is another owner.
        (Some(row(Some(&restarted), 6, 0)), Lapse::NotTheSuspects),
    ];
    for (lease, expected) in cases {
        assert_eq!(
            Lapse::judge(lease.as_ref(), &suspect),
            expected,
            "{lease:?}"
        );
    }
}
