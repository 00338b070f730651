//! Unit tests of the allocation table: its invariants after any sequence of events, and the
//! preconditions of each event.

use super::*;
use crate::membership::Address;
use proptest::prelude::*;

fn region(i: u8) -> UniqueAddress {
    UniqueAddress::new(Address::new("h", u16::from(i)), u64::from(i))
}

fn event() -> impl Strategy<Value = StateEvent> {
    let r = (0u8..4).prop_map(region);
    let s = (0u8..6).prop_map(|i| ShardId::from(i.to_string()));
    prop_oneof![
        r.clone().prop_map(StateEvent::RegionRegistered),
        r.clone().prop_map(StateEvent::ProxyRegistered),
        r.clone().prop_map(StateEvent::RegionTerminated),
        r.clone().prop_map(StateEvent::ProxyTerminated),
        (s.clone(), r).prop_map(|(s, r)| StateEvent::ShardHomeAllocated(s, r)),
        s.prop_map(StateEvent::ShardHomeDeallocated),
    ]
}

proptest! {
    /// Whatever events arrive, accepted or refused, the invariants hold after each, and a
    /// refused event changes nothing.
    #[test]
    fn invariants_hold_after_any_event_sequence(events in prop::collection::vec(event(), 0..60)) {
        let mut state = CoordinatorState::default();
        for e in &events {
            let before = state.clone();
            if state.apply(e).is_err() {
                prop_assert_eq!(&state, &before);
            }
            prop_assert_eq!(state.check(), Ok(()));
        }
    }
}

#[test]
fn preconditions_are_enforced() {
    let mut s = CoordinatorState::default();
    let a = region(1);
    let shard: ShardId = "7".into();
    assert_eq!(
        s.apply(&StateEvent::ShardHomeAllocated(shard.clone(), a.clone())),
        Err(StateError::UnknownRegion(a.clone()))
    );
    s.apply(&StateEvent::RegionRegistered(a.clone())).unwrap();
    assert_eq!(
        s.apply(&StateEvent::RegionRegistered(a.clone())),
        Err(StateError::RegionExists(a.clone()))
    );
    s.apply(&StateEvent::ShardHomeAllocated(shard.clone(), a.clone()))
        .unwrap();
    assert_eq!(
        s.apply(&StateEvent::ShardHomeAllocated(shard.clone(), a.clone())),
        Err(StateError::ShardAllocated(shard.clone()))
    );
    s.apply(&StateEvent::RegionTerminated(a)).unwrap();
    assert_eq!(s.home(&shard), None);
    assert_eq!(
        s.apply(&StateEvent::ShardHomeDeallocated(shard.clone())),
        Err(StateError::ShardNotAllocated(shard))
    );
}
