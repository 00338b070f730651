//! Helpers the runtime's in-process cluster tests share.

#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use shardik_core::membership::MembershipConfig;

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Membership settings with timers short enough for a test: a lone seed forms its cluster
/// after 0.5 s and gossip runs every 200 ms.
pub fn fast_membership(cluster_name: &str, roles: &[&str]) -> MembershipConfig {
    MembershipConfig {
        cluster_name: cluster_name.into(),
        seed_node_timeout: Duration::from_millis(500),
        periodic_tasks_initial_delay: Duration::from_millis(100),
        gossip_interval: Duration::from_millis(200),
        leader_actions_interval: Duration::from_millis(200),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        ..MembershipConfig::default()
    }
}
