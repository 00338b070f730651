//! `discovery.method = "dns"`: SRV records (each a host and its management port) or A/AAAA
//! records of a plain name (each address a contact point), through hickory-resolver on tokio.
//!
//! SRV targets are resolved from the answer's additional records when the server sends them
//! (Kubernetes' DNS does for headless services), else with a lookup of their own; a target
//! with several addresses is given its lowest, so that every node sees the same contact point.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::future::join_all;
use hickory_resolver::TokioResolver;
use hickory_resolver::config::{
    NameServerConfig, NameServerConfigGroup, ResolverConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::proto::xfer::Protocol;

use super::lookup::{DiscoveryError, Lookup, ResolvedTarget};

/// SRV targets resolved by a lookup of their own at most; the rest keep no address (and are
/// dialled by name). Bounds what one answer can make this node ask.
const MAX_TARGET_LOOKUPS: usize = 256;

/// A DNS resolver for discovery.
pub struct DnsDiscovery {
    resolver: TokioResolver,
}

impl std::fmt::Debug for DnsDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsDiscovery")
            .field("nameservers", &self.resolver.config().name_servers())
            .finish()
    }
}

impl DnsDiscovery {
    /// A resolver asking `nameservers` (UDP, and TCP for truncated answers), or the system's
    /// (`/etc/resolv.conf`) when empty. Answers are cached at most `max_ttl`, so that a
    /// lookup every interval sees changes within one.
    pub fn new(nameservers: &[SocketAddr], max_ttl: Duration) -> Result<Self, DiscoveryError> {
        let mut builder = if nameservers.is_empty() {
            TokioResolver::builder_tokio().map_err(|e| {
                DiscoveryError::Setup(format!(
                    "{e} (reading the system's resolver configuration; or name DNS servers in \
                     `discovery.dns.nameservers`)"
                ))
            })?
        } else {
            let servers: Vec<NameServerConfig> = nameservers
                .iter()
                .flat_map(|&addr| {
                    [
                        NameServerConfig::new(addr, Protocol::Udp),
                        NameServerConfig::new(addr, Protocol::Tcp),
                    ]
                })
                .collect();
            let config =
                ResolverConfig::from_parts(None, Vec::new(), NameServerConfigGroup::from(servers));
            let mut builder =
                TokioResolver::builder_with_config(config, TokioConnectionProvider::default());
            *builder.options_mut() = ResolverOpts::default();
            builder
        };
        let options = builder.options_mut();
        options.positive_max_ttl = Some(max_ttl);
        options.negative_max_ttl = Some(max_ttl);
        Ok(DnsDiscovery {
            resolver: builder.build(),
        })
    }

    /// The contact points of `lookup`: SRV records when it names them, else A/AAAA records.
    pub async fn lookup(&self, lookup: &Lookup) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
        match lookup.srv_name() {
            Some(srv) => self.lookup_srv(&srv).await,
            None => self.lookup_ip(&lookup.service_name).await,
        }
    }

    async fn lookup_ip(&self, name: &str) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
        let answer = self
            .resolver
            .lookup_ip(name)
            .await
            .map_err(|e| DiscoveryError::Dns {
                what: format!("A/AAAA {name}"),
                cause: e.to_string(),
            })?;
        let ips: BTreeSet<IpAddr> = answer.iter().collect();
        Ok(ips
            .into_iter()
            .map(|ip| ResolvedTarget {
                host: ip.to_string(),
                port: None,
                address: Some(ip),
            })
            .collect())
    }

    async fn lookup_srv(&self, name: &str) -> Result<Vec<ResolvedTarget>, DiscoveryError> {
        let answer = self
            .resolver
            .srv_lookup(name)
            .await
            .map_err(|e| DiscoveryError::Dns {
                what: format!("SRV {name}"),
                cause: e.to_string(),
            })?;
        // Addresses the answer carried along (additional records), by owner name.
        let mut known: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
        for record in answer.as_lookup().records() {
            let ip = match record.data() {
                RData::A(a) => IpAddr::from(a.0),
                RData::AAAA(a) => IpAddr::from(a.0),
                _ => continue,
            };
            known
                .entry(host_name(&record.name().to_utf8()))
                .or_default()
                .insert(ip);
        }
        let records: BTreeSet<(String, u16)> = answer
            .iter()
            .map(|srv| (host_name(&srv.target().to_utf8()), srv.port()))
            .collect();
        let missing: Vec<String> = records
            .iter()
            .map(|(host, _)| host.clone())
            .filter(|host| !known.contains_key(host))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .take(MAX_TARGET_LOOKUPS)
            .collect();
        let resolved = join_all(
            missing
                .iter()
                .map(|host| self.resolver.lookup_ip(host.as_str())),
        )
        .await;
        for (host, answer) in missing.into_iter().zip(resolved) {
            // A target that does not resolve stays without an address; its probe then fails
            // and says why.
            if let Ok(ips) = answer {
                known.entry(host).or_default().extend(ips.iter());
            }
        }
        Ok(records
            .into_iter()
            .map(|(host, port)| {
                let address = known.get(&host).and_then(|ips| ips.iter().next().copied());
                ResolvedTarget {
                    host,
                    port: Some(port),
                    address,
                }
            })
            .collect())
    }
}

/// A DNS name as a contact point's host: lower case, without the root's trailing dot.
fn host_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}
