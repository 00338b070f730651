//! Members and views shared by the resolver's tests: the fixtures of the reference's
//! `SplitBrainResolverSpec` (`TestAddresses`).

use std::collections::BTreeSet;

use crate::membership::address::{Address, UniqueAddress};
use crate::membership::member::{Member, MemberStatus, NOT_YET_UP};
use crate::membership::sbr::Strategy;
use MemberStatus::*;

pub(super) fn member(host: &str, up: u32, roles: &[&str]) -> Member {
    Member {
        addr: UniqueAddress::new(Address::new(host, 7355), 0),
        status: Up,
        up_number: up,
        roles: roles.iter().map(|r| r.to_string()).collect(),
        app_version: "0.0.0".into(),
    }
}

// Up-numbers as the reference fixtures: E is the oldest, then D, C, B, A/F, G.
pub(super) fn a() -> Member {
    member("a", 5, &["role3"])
}
pub(super) fn b() -> Member {
    member("b", 4, &["role1", "role3"])
}
pub(super) fn c() -> Member {
    member("c", 3, &["role2"])
}
pub(super) fn d() -> Member {
    member("d", 2, &["role1", "role2", "role3"])
}
pub(super) fn e() -> Member {
    member("e", 1, &[])
}
pub(super) fn f() -> Member {
    member("f", 5, &[])
}
pub(super) fn g() -> Member {
    member("g", 6, &[])
}

pub(super) fn joining(m: Member) -> Member {
    Member {
        status: Joining,
        up_number: NOT_YET_UP,
        ..m
    }
}
pub(super) fn weakly_up(m: Member) -> Member {
    Member {
        status: WeaklyUp,
        up_number: NOT_YET_UP,
        ..m
    }
}
pub(super) fn leaving(m: Member) -> Member {
    Member {
        status: Leaving,
        ..m
    }
}
pub(super) fn exiting(m: Member) -> Member {
    Member {
        status: Exiting,
        ..m
    }
}
pub(super) fn downed(m: Member) -> Member {
    Member { status: Down, ..m }
}

pub(super) fn addrs(ms: &[Member]) -> BTreeSet<UniqueAddress> {
    ms.iter().map(|m| m.addr.clone()).collect()
}

pub(super) fn keep_majority() -> Strategy {
    Strategy::KeepMajority { role: None }
}
