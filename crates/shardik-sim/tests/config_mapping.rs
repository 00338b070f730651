//! The simulated nodes are built from a configuration by the runtime's own mapping
//! (`Settings::node_settings`): a key set in TOML reaches a simulated node's kind and entity
//! settings exactly as it reaches a shipped node's.

use std::time::Duration;

use shardik_core::membership::MembershipConfig;
use shardik_core::sharding::{EntityRecovery, HandOffMode};
use shardik_sim::sharding::{
    FAST_LEASE_OVERRIDES, KindSpec, ShardingConfig, ShardingWorld, fast_leases, fast_settings,
    world_with,
};

/// A formed cluster of two nodes, the second with role `worker`, built from `layers` of
/// configuration on top of the simulator's fast settings; the kind `counter` has no role of
/// its own and `billing` is hosted by workers only.
fn two_nodes(layers: &[&str]) -> ShardingWorld {
    let node = fast_settings(layers).node_settings();
    let world = world_with(1, node.membership.clone());
    let cfg = ShardingConfig::with_sharding(node.sharding).with_kinds(vec![
        KindSpec::new("counter"),
        KindSpec::with_role("billing", "worker"),
    ]);
    let worker = MembershipConfig {
        roles: ["worker".to_string()].into(),
        ..node.membership.clone()
    };
    let mut s = ShardingWorld::new(world, cfg);
    let (_, at) = s.form_cluster_with(vec![node.membership, worker]);
    assert!(at.is_some(), "the cluster did not form");
    s
}

#[test]
fn sharding_keys_reach_every_kind_of_a_simulated_node() {
    let s = two_nodes(&[r#"
[cluster.sharding]
remember-entities = "on"
entity-recovery-strategy = "constant"
handoff-timeout = "7s"
handoff-mode = "drop"
entity-restart-backoff = "750ms"

[cluster.sharding.entity-recovery-constant-rate-strategy]
number-of-entities = 3
frequency = "50ms"
"#]);
    assert_eq!(
        s.config().sharding.remember_entities,
        Some(EntityRecovery::ConstantRate {
            entities: 3,
            frequency: Duration::from_millis(50),
        })
    );
    for id in [0, 1] {
        let node = s.node(id).expect("a live node");
        for kind in [0, 1] {
            let k = node.kind_settings(kind);
            assert_eq!(k.region.handoff_timeout, Duration::from_secs(7));
            assert_eq!(k.coordinator.handoff_timeout, Duration::from_secs(7));
            // The reference ties the region's shutdown to the hand-off timeout.
            assert_eq!(k.shutdown_timeout, Duration::from_secs(7));
            assert_eq!(k.region.handoff_mode, HandOffMode::Drop);
            assert!(!k.coordinator.forward_handoff);
            let e = node.entity_settings(kind);
            assert!(e.remember, "node {id} kind {kind}");
            assert_eq!(e.restart_backoff, Duration::from_millis(750));
        }
    }
}

#[test]
fn leases_reach_hosting_nodes_and_skip_proxies() {
    let s = two_nodes(&[FAST_LEASE_OVERRIDES]);
    let timing = Some(fast_leases());
    // Node 0 lacks the role `worker`: a proxy for `billing`, which takes no lease.
    let proxy = s.node(0).expect("a live node").kind_settings(1);
    assert!(proxy.proxy);
    assert_eq!(proxy.role.as_deref(), Some("worker"));
    assert_eq!((proxy.region.lease, proxy.coordinator_lease), (None, None));
    for (id, kind) in [(0, 0), (1, 0), (1, 1)] {
        let k = s.node(id).expect("a live node").kind_settings(kind);
        assert!(!k.proxy, "node {id} kind {kind}");
        assert_eq!(k.region.lease, timing, "node {id} kind {kind}");
        assert_eq!(k.coordinator_lease, timing, "node {id} kind {kind}");
    }
    assert_eq!(
        fast_leases().ttl,
        Duration::from_secs(8),
        "coordination.lease.heartbeat-timeout"
    );
}

#[test]
fn the_configured_role_and_the_resolver_shape_every_kind() {
    let s = two_nodes(&[r#"
[cluster.split-brain-resolver]
stable-after = "4s"

[cluster.sharding]
role = "worker"
"#]);
    let node0 = s.node(0).expect("a live node");
    // `counter` names no role: the configured one applies, so node 0 only routes for it.
    assert_eq!(node0.kind_settings(0).role.as_deref(), Some("worker"));
    assert!(node0.kind_settings(0).proxy);
    assert!(!s.node(1).expect("a live node").kind_settings(0).proxy);
    // Keep-majority: the down-removal margin and self-fencing follow stable-after.
    let k = s.node(1).expect("a live node").kind_settings(0);
    assert_eq!(k.down_removal_margin, Duration::from_secs(4));
    assert_eq!(k.self_fence_after, Some(Duration::from_secs(4)));
    let downing = s.world().config().membership.downing.as_ref();
    assert_eq!(
        downing.map(|d| d.stable_after),
        Some(Duration::from_secs(4))
    );
}
