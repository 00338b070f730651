//! `discovery.*`: how cluster bootstrap finds its contact points (Akka Discovery's
//! `akka.discovery`): a static list in the configuration, or DNS records.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::validate::invalid;
use crate::values::{de_string, de_string_list};

/// `discovery.method`: the discovery mechanism.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiscoveryMethod {
    /// `""`: no discovery; bootstrap does not run.
    #[serde(rename = "")]
    Off,
    /// `"config"`: the endpoints listed under `discovery.config.services`.
    Config,
    /// `"dns"`: A/AAAA or SRV records, through `discovery.dns.nameservers` or the system's
    /// resolver configuration.
    Dns,
}

impl DiscoveryMethod {
    /// The configuration value.
    pub fn as_str(self) -> &'static str {
        match self {
            DiscoveryMethod::Off => "",
            DiscoveryMethod::Config => "config",
            DiscoveryMethod::Dns => "dns",
        }
    }
}

/// `discovery.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct DiscoverySettings {
    /// `method`.
    pub method: DiscoveryMethod,
    /// `config.*`.
    pub config: ConfigDiscoverySettings,
    /// `dns.*`.
    pub dns: DnsDiscoverySettings,
}

/// `discovery.config.*` (Akka's config discovery).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ConfigDiscoverySettings {
    /// `services.<name>.endpoints`: each service's endpoints.
    pub services: BTreeMap<String, ConfigService>,
}

/// `discovery.config.services.<name>`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ConfigService {
    /// `endpoints`: `{ host = "...", port = N }`, the port optional.
    pub endpoints: Vec<ConfigEndpoint>,
}

/// One endpoint of a configured service.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ConfigEndpoint {
    /// `host`: a host name or IP address.
    #[serde(deserialize_with = "de_string")]
    pub host: String,
    /// `port`: the management port; absent means the bootstrap's fallback port.
    #[serde(default)]
    pub port: Option<u16>,
}

/// `discovery.dns.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct DnsDiscoverySettings {
    /// `nameservers`: `"IP:PORT"` of the DNS servers to ask; empty means the system's
    /// (`/etc/resolv.conf`).
    #[serde(deserialize_with = "de_string_list")]
    pub nameservers: Vec<String>,
}

impl DnsDiscoverySettings {
    /// The name servers as socket addresses (checked by `validate`, so this cannot fail on
    /// loaded settings; an entry that does not parse is left out).
    pub fn nameserver_addrs(&self) -> Vec<SocketAddr> {
        self.nameservers
            .iter()
            .filter_map(|s| s.trim().parse().ok())
            .collect()
    }
}

impl DiscoverySettings {
    /// The checks of `discovery.*`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for server in &self.dns.nameservers {
            if server.trim().parse::<SocketAddr>().is_err() {
                return Err(invalid(
                    "discovery.dns.nameservers",
                    server,
                    "addresses of DNS servers written as \"IP:PORT\", e.g. \"10.0.0.10:53\" or \
                     \"[fd00::a]:53\" (a name server is reached by its IP address)",
                ));
            }
        }
        for (name, service) in &self.config.services {
            for endpoint in &service.endpoints {
                if endpoint.host.trim().is_empty() {
                    return Err(invalid(
                        &format!("discovery.config.services.{name}.endpoints"),
                        "host = \"\"",
                        "endpoints with a host name or IP address, e.g. \
                         { host = \"10.0.0.1\", port = 8558 }",
                    ));
                }
                if endpoint.port == Some(0) {
                    return Err(invalid(
                        &format!("discovery.config.services.{name}.endpoints"),
                        format!("{{ host = \"{}\", port = 0 }}", endpoint.host),
                        "a port from 1 to 65535, or no port (the bootstrap's fallback port)",
                    ));
                }
            }
        }
        Ok(())
    }
}
