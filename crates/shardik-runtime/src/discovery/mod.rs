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

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use shardik_config::{DiscoveryMethod, Settings};

pub use config::ConfigDiscovery;
#[cfg(feature = "dns")]
pub use dns::DnsDiscovery;

/// What to look up (Akka's `Lookup`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lookup {
    /// The service name (a DNS name, an SRV name, or a configured service).
    pub service_name: String,
    /// With `protocol`: look up the SRV records `_{port_name}._{protocol}.{service_name}`.
    pub port_name: Option<String>,
    /// See `port_name`.
    pub protocol: Option<String>,
}

impl Lookup {
    /// The lookup of `management.cluster.bootstrap.contact-point-discovery`.
    pub fn from_settings(settings: &Settings) -> Lookup {
        let d = &settings
            .management
            .cluster
            .bootstrap
            .contact_point_discovery;
        let non_empty = |s: &str| {
            let s = s.trim();
            (!s.is_empty()).then(|| s.to_string())
        };
        Lookup {
            service_name: d.service_name.trim().to_string(),
            port_name: non_empty(&d.port_name),
            protocol: non_empty(&d.protocol),
        }
    }

    /// The SRV name to ask for, if this is an SRV lookup: `_{port}._{proto}.{name}` when a
    /// port name and protocol are given, or the service name itself when it already has
    /// that shape (`_management._tcp.shop.svc`).
    pub fn srv_name(&self) -> Option<String> {
        match (&self.port_name, &self.protocol) {
            (Some(port), Some(proto)) => Some(format!("_{port}._{proto}.{}", self.service_name)),
            _ => is_srv_name(&self.service_name).then(|| self.service_name.clone()),
        }
    }
}

impl fmt::Display for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.srv_name() {
            Some(srv) => write!(f, "SRV {srv}"),
            None => write!(f, "{}", self.service_name),
        }
    }
}

/// Whether `name` reads as an SRV name: `_service._proto.rest`, each label non-empty.
fn is_srv_name(name: &str) -> bool {
    let mut labels = name.split('.');
    let (Some(service), Some(proto), Some(rest)) = (labels.next(), labels.next(), labels.next())
    else {
        return false;
    };
    service.len() > 1
        && service.starts_with('_')
        && proto.len() > 1
        && proto.starts_with('_')
        && !rest.is_empty()
}

/// One endpoint a lookup found (Akka's `ResolvedTarget`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResolvedTarget {
    /// A host name (without a trailing dot), or an IP address in text.
    pub host: String,
    /// The port, when the method gives one (SRV records, configured endpoints with a port).
    pub port: Option<u16>,
    /// The IP address, when the method resolved one.
    pub address: Option<IpAddr>,
}

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// The DNS lookup failed (no such name, no answer, server unreachable).
    #[error("DNS lookup of {what} failed: {cause}")]
    Dns {
        /// What was asked.
        what: String,
        /// The resolver's error.
        cause: String,
    },
    /// The lookup took longer than `resolve-timeout`.
    #[error("lookup of {what} took longer than {timeout:?} (resolve-timeout)")]
    Timeout {
        /// What was asked.
        what: String,
        /// The bound.
        timeout: Duration,
    },
    /// The configured service is not listed.
    #[error("no service [{0}] under discovery.config.services")]
    UnknownService(String),
    /// The resolver could not be set up (the system's resolv.conf could not be read).
    #[error("cannot set up the DNS resolver: {0}")]
    Setup(String),
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str, port: Option<&str>, proto: Option<&str>) -> Lookup {
        Lookup {
            service_name: name.to_string(),
            port_name: port.map(str::to_string),
            protocol: proto.map(str::to_string),
        }
    }

    #[test]
    fn srv_names_come_from_the_port_name_or_the_service_name_itself() {
        assert_eq!(
            lookup("shop.svc", Some("management"), Some("tcp")).srv_name(),
            Some("_management._tcp.shop.svc".to_string())
        );
        assert_eq!(
            lookup("_management._tcp.shop.svc", None, Some("tcp")).srv_name(),
            Some("_management._tcp.shop.svc".to_string())
        );
        assert_eq!(lookup("shop.svc", None, Some("tcp")).srv_name(), None);
        assert_eq!(lookup("_x.shop", None, None).srv_name(), None);
        assert_eq!(lookup("_._tcp.shop", None, None).srv_name(), None);
    }
}
