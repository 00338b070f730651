//! Service discovery (Akka Discovery): finds the management endpoints of a service's nodes,
//! for cluster bootstrap. Two methods: the endpoints listed in the configuration
//! (`discovery.method = "config"`, `config.rs`) and DNS (`"dns"`, `dns.rs`: SRV records, or
//! A/AAAA records of a plain name, through hickory-resolver).
//!
//! A lookup answers [`ResolvedTarget`]s as Akka's does: a host (a name, or an IP address in
//! text), the port if the method knows it, and the IP address if it resolved one.

mod config;
#[cfg(feature = "dns")]
mod dns;
mod lookup;

use std::time::Duration;

use shardik_config::{DiscoveryMethod, Settings};

pub use config::ConfigDiscovery;
#[cfg(feature = "dns")]
pub use dns::DnsDiscovery;
pub use lookup::{DiscoveryError, Lookup, ResolvedTarget};

/// A discovery method, ready for lookups.
#[derive(Debug)]
pub enum ServiceDiscovery {
    /// `discovery.method = "config"`.
    Config(ConfigDiscovery),
    /// `discovery.method = "dns"` (boxed: the resolver is large, and there is one per node).
    #[cfg(feature = "dns")]
    Dns(Box<DnsDiscovery>),
}

impl ServiceDiscovery {
    /// The method `discovery.method` names, or `None` for `""`. Fails only when DNS is asked
    /// for without name servers and the system's resolver configuration cannot be read.
    pub fn from_settings(settings: &Settings) -> Result<Option<Self>, DiscoveryError> {
        let d = &settings.discovery;
        let lookup_interval = settings
            .management
            .cluster
            .bootstrap
            .contact_point_discovery
            .interval;
        Ok(match d.method {
            DiscoveryMethod::Off => None,
            DiscoveryMethod::Config => {
                Some(ServiceDiscovery::Config(ConfigDiscovery::new(&d.config)))
            }
            #[cfg(feature = "dns")]
            DiscoveryMethod::Dns => Some(ServiceDiscovery::Dns(Box::new(DnsDiscovery::new(
                &d.dns.nameserver_addrs(),
                lookup_interval,
            )?))),
            #[cfg(not(feature = "dns"))]
            DiscoveryMethod::Dns => {
                let _ = lookup_interval;
                return Err(DiscoveryError::Setup(
                    "discovery.method = \"dns\" needs shardik's `dns` feature, which this build \
                     leaves out"
                        .into(),
                ));
            }
        })
    }

    /// Looks `lookup` up, taking at most `timeout`.
    pub async fn lookup(
        &self,
        lookup: &Lookup,
        timeout: Duration,
    ) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
        // Only a DNS lookup can take time; the configured list answers at once.
        #[cfg(not(feature = "dns"))]
        let _ = timeout;
        match self {
            ServiceDiscovery::Config(c) => c.lookup(lookup),
            #[cfg(feature = "dns")]
            ServiceDiscovery::Dns(d) => {
                match tokio::time::timeout(timeout, d.lookup(lookup)).await {
                    Ok(result) => result,
                    Err(_) => Err(DiscoveryError::Timeout {
                        what: lookup.to_string(),
                        timeout,
                    }),
                }
            }
        }
    }
}
