//! The mapping from a node's configuration to the membership core's ([`MembershipConfig`]):
//! `cluster.*` with its failure detector, and the split-brain resolver's settings
//! ([`SbrSettings`]) and lease (`cluster.split-brain-resolver.*` with `coordination.lease.*`).
//! The runtime and the simulator both build their membership from it.

use shardik_core::membership::phi::PhiAccrualConfig;
use shardik_core::membership::sbr::{SbrSettings, Strategy};
use shardik_core::membership::{FailureDetectorConfig, MembershipConfig};

use crate::downing::{ActiveStrategy, DownAllWhenUnstable, DowningProvider};
use crate::settings::Settings;

impl Settings {
    /// The membership core's configuration.
    #[doc(hidden)] // the mapping to the cores, for the runtime and the simulator
    pub fn membership_config(&self) -> MembershipConfig {
        let c = &self.cluster;
        let fd = &c.failure_detector;
        MembershipConfig {
            cluster_name: c.name.clone(),
            join_compat: self.join_compat(),
            roles: c.roles.clone(),
            app_version: c.app_version.clone(),
            seed_node_timeout: c.seed_node_timeout,
            retry_unsuccessful_join_after: c.retry_unsuccessful_join_after,
            allow_weakly_up_members: c.allow_weakly_up_members,
            min_nr_of_members: c.min_nr_of_members,
            role_min_nr_of_members: c
                .role
                .iter()
                .map(|(role, s)| (role.clone(), s.min_nr_of_members))
                .collect(),
            periodic_tasks_initial_delay: c.periodic_tasks_initial_delay,
            gossip_interval: c.gossip_interval,
            gossip_time_to_live: c.gossip_time_to_live,
            leader_actions_interval: c.leader_actions_interval,
            unreachable_nodes_reaper_interval: c.unreachable_nodes_reaper_interval,
            gossip_different_view_probability: c.gossip_different_view_probability,
            reduce_gossip_different_view_probability: c.reduce_gossip_different_view_probability,
            prune_gossip_tombstones_after: c.prune_gossip_tombstones_after,
            failure_detector: FailureDetectorConfig {
                phi: PhiAccrualConfig {
                    threshold: fd.threshold,
                    max_sample_size: fd.max_sample_size,
                    min_std_deviation: fd.min_std_deviation,
                    acceptable_heartbeat_pause: fd.acceptable_heartbeat_pause,
                    // Before any heartbeat was measured, the configured interval is the best
                    // guess of the inter-arrival time (as the reference does).
                    first_heartbeat_estimate: fd.heartbeat_interval,
                },
                heartbeat_interval: fd.heartbeat_interval,
                monitored_by_nr_of_members: fd.monitored_by_nr_of_members,
                expected_response_after: fd.expected_response_after,
            },
            downing: match c.downing_provider {
                DowningProvider::Off => None,
                DowningProvider::SplitBrainResolver => Some(self.sbr_settings()),
            },
        }
    }

    /// The name of the lease-majority lease: `lease-majority.lease-name`, or
    /// `{cluster.name}-shardik-sbr` when that is empty.
    #[doc(hidden)] // the mapping to the cores, for the runtime and the simulator
    pub fn sbr_lease_name(&self) -> String {
        let name = &self.cluster.split_brain_resolver.lease_majority.lease_name;
        if name.is_empty() {
            format!("{}-shardik-sbr", self.cluster.name)
        } else {
            name.clone()
        }
    }

    /// Whether the split-brain resolver runs lease-majority, and so needs its lease.
    #[doc(hidden)] // the mapping to the cores, for the runtime and the simulator
    pub fn sbr_needs_lease(&self) -> bool {
        self.cluster.downing_provider == DowningProvider::SplitBrainResolver
            && self.cluster.split_brain_resolver.active_strategy == ActiveStrategy::LeaseMajority
    }

    /// The split-brain resolver settings, whether or not downing is enabled.
    #[doc(hidden)] // the mapping to the cores, for the runtime and the simulator
    pub fn sbr_settings(&self) -> SbrSettings {
        let s = &self.cluster.split_brain_resolver;
        let role = |r: &str| (!r.is_empty()).then(|| r.to_string());
        let strategy = match s.active_strategy {
            ActiveStrategy::KeepMajority => Strategy::KeepMajority {
                role: role(&s.keep_majority.role),
            },
            ActiveStrategy::StaticQuorum => Strategy::StaticQuorum {
                quorum_size: s.static_quorum.quorum_size,
                role: role(&s.static_quorum.role),
            },
            ActiveStrategy::KeepOldest => Strategy::KeepOldest {
                down_if_alone: s.keep_oldest.down_if_alone,
                role: role(&s.keep_oldest.role),
            },
            ActiveStrategy::DownAll => Strategy::DownAll,
            ActiveStrategy::LeaseMajority => Strategy::LeaseMajority {
                role: role(&s.lease_majority.role),
                acquire_lease_delay_for_minority: s.lease_majority.acquire_lease_delay_for_minority,
                release_after: s.lease_majority.release_after,
                lease_operation_timeout: self.coordination.lease.lease_operation_timeout,
                lease_ttl: self.coordination.lease.heartbeat_timeout,
                lease_renew_interval: self.coordination.lease.heartbeat_interval,
            },
        };
        let down_all_when_unstable = match s.down_all_when_unstable {
            DownAllWhenUnstable::On => Some(SbrSettings::down_all_when_unstable_on(s.stable_after)),
            DownAllWhenUnstable::Off => None,
            DownAllWhenUnstable::After(d) => Some(d),
        };
        SbrSettings {
            strategy,
            stable_after: s.stable_after,
            down_all_when_unstable,
        }
    }
}
