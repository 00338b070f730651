//! What discovery asks and answers, shared by both methods: the [`Lookup`], the
//! [`ResolvedTarget`]s it finds and the [`DiscoveryError`] when it cannot. It stands below
//! `config.rs`, `dns.rs` and the dispatching [`super::ServiceDiscovery`], which all use it.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use shardik_config::Settings;

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
