//! Unit tests of the routing order after a lease changed hands.

use std::time::Duration;

use super::*;
use crate::Instant;
use crate::lease::LeaseTiming;
use crate::sharding::region::RegionSettings;
use crate::sharding::testkit::node;
use crate::sharding::view::ShardingView;

/// A `NotHere` counts only from the home the region routes the shard to: any other member
/// can neither make it forget a home nor fill its table of nonces.
#[test]
fn not_here_from_anyone_but_the_home_changes_nothing() {
    let settings = RegionSettings {
        lease: Some(LeaseTiming::default()),
        ..RegionSettings::default()
    };
    let mut region: Region<u32> = Region::new(node(1), false, settings, Instant::ZERO);
    let view = ShardingView::new(node(1), None, Duration::from_secs(5));
    let home = node(2);
    region.homes.insert(ShardId::from("7"), home.clone());
    let mut out = Vec::new();
    for i in 0..1000 {
        let msg = Protocol::NotHere {
            shard: ShardId::from(i.to_string().as_str()),
            nonce: 3,
        };
        region.handle(Instant::ZERO, &node(3), msg, &view, &mut out);
    }
    assert!(region.nonces.is_empty());
    assert_eq!(region.homes.get(&ShardId::from("7")), Some(&home));
    let msg = Protocol::NotHere {
        shard: ShardId::from("7"),
        nonce: 3,
    };
    region.handle(Instant::ZERO, &home, msg, &view, &mut out);
    assert_eq!(region.homes.get(&ShardId::from("7")), None);
    assert_eq!(region.nonces.len(), 1);
    assert!(out.is_empty(), "{out:?}");
}
