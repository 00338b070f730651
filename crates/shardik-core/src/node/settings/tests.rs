//! Unit tests of the node settings: what each kind takes from the defaults, its role and the
//! store (leases, passivation, back-off).

use super::*;

fn with_leases() -> ShardingSettings {
    let timing = LeaseTiming {
        ttl: Duration::from_secs(8),
        renew_interval: Duration::from_secs(1),
        operation_timeout: Duration::from_secs(1),
        retry_interval: Duration::from_secs(1),
    };
    let mut s = ShardingSettings::default();
    s.region.lease = Some(timing);
    s.coordinator_lease = Some(timing);
    s.self_fence_after = Some(Duration::from_secs(7));
    s.role = Some("worker".into());
    s
}

#[test]
fn a_hosting_kind_takes_every_default_and_its_leases() {
    let s = with_leases().with_handoff_mode(HandOffMode::Drop);
    let k = s.kind_node_settings(s.kind_role(None), false);
    assert_eq!(k.role.as_deref(), Some("worker"));
    assert!(!k.proxy);
    assert_eq!(k.region.lease, s.region.lease);
    assert_eq!(k.coordinator_lease, s.coordinator_lease);
    assert_eq!(k.region.handoff_mode, HandOffMode::Drop);
    assert!(!k.coordinator.forward_handoff);
    assert_eq!(k.self_fence_after, Some(Duration::from_secs(7)));
    assert_eq!(k.shutdown_timeout, s.shutdown_timeout);
}

#[test]
fn only_a_kind_whose_shards_and_coordinator_are_leased_waits_no_margin() {
    let leased = with_leases();
    let k = leased.kind_node_settings(None, false);
    assert_eq!(k.down_removal_margin, Duration::ZERO);
    let mut shards_only = with_leases();
    shards_only.coordinator_lease = None;
    let k = shards_only.kind_node_settings(None, false);
    assert_eq!(k.down_removal_margin, shards_only.down_removal_margin);
    let plain = ShardingSettings::default();
    let k = plain.kind_node_settings(None, false);
    assert_eq!(k.down_removal_margin, Duration::from_secs(20));
}

#[test]
fn a_proxy_takes_no_lease_and_a_kind_role_wins_over_the_configured_one() {
    let s = with_leases();
    let k = s.kind_node_settings(s.kind_role(Some("billing")), true);
    assert_eq!(k.role.as_deref(), Some("billing"));
    assert!(k.proxy);
    assert_eq!(k.region.lease, None);
    assert_eq!(k.coordinator_lease, None);
}

#[test]
fn automatic_leases_apply_only_to_a_kind_with_a_store_and_never_replace_configured_ones() {
    let auto = LeaseTiming {
        ttl: Duration::from_secs(6),
        renew_interval: Duration::from_secs(2),
        operation_timeout: Duration::from_millis(1500),
        retry_interval: Duration::from_secs(1),
    };
    let s = ShardingSettings {
        auto_shard_lease: Some(auto),
        auto_coordinator_lease: Some(auto),
        ..ShardingSettings::default()
    };
    let stored = s.for_kind(true);
    assert_eq!(stored.region.lease, Some(auto));
    assert_eq!(stored.coordinator_lease, Some(auto));
    let plain = s.for_kind(false);
    assert_eq!(plain.region.lease, None);
    assert_eq!(plain.coordinator_lease, None);

    let configured = with_leases();
    let both = ShardingSettings {
        auto_shard_lease: Some(auto),
        ..configured.clone()
    };
    assert_eq!(both.for_kind(true).region.lease, configured.region.lease);
}

#[test]
fn entities_take_the_configured_passivation_and_back_off() {
    let s = ShardingSettings {
        entity_restart_backoff: Duration::from_millis(300),
        ..ShardingSettings::default()
    };
    let e = s.entity_settings(true);
    assert!(e.remember);
    assert_eq!(e.restart_backoff, Duration::from_millis(300));
    assert_eq!(e.passivation, s.passivation);
}
