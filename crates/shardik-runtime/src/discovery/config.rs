//! `discovery.method = "config"`: the endpoints listed under `discovery.config.services`
//! (Akka's config discovery).

use std::collections::BTreeMap;
use std::net::IpAddr;

use shardik_config::ConfigDiscoverySettings;

use super::lookup::{DiscoveryError, Lookup, ResolvedTarget};

/// The configured services and their endpoints.
#[derive(Clone, Debug)]
pub struct ConfigDiscovery {
    services: BTreeMap<String, Vec<ResolvedTarget>>,
}

impl ConfigDiscovery {
    /// The services of `discovery.config`.
    pub fn new(settings: &ConfigDiscoverySettings) -> Self {
        let services = settings
            .services
            .iter()
            .map(|(name, service)| {
                let targets = service
                    .endpoints
                    .iter()
                    .map(|e| {
                        let host = e.host.trim().trim_end_matches('.').to_string();
                        // An IP address written as the host is known without a lookup.
                        let address = host
                            .trim_start_matches('[')
                            .trim_end_matches(']')
                            .parse::<IpAddr>()
                            .ok();
                        ResolvedTarget {
                            host,
                            port: e.port,
                            address,
                        }
                    })
                    .collect();
                (name.clone(), targets)
            })
            .collect();
        ConfigDiscovery { services }
    }

    /// The endpoints of the service `lookup` names (the port name is ignored, as in Akka).
    pub fn lookup(&self, lookup: &Lookup) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
        self.services
            .get(&lookup.service_name)
            .cloned()
            .ok_or_else(|| DiscoveryError::UnknownService(lookup.service_name.clone()))
    }
}
