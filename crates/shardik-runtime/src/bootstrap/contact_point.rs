//! Contact points: the management endpoints discovery found, in the one order every node
//! agrees on, and how a node recognises itself among them.
//!
//! "Lowest address" is this order's first: hosts that are IP addresses come before host
//! names and compare as numbers (IPv4 before IPv6; `10.0.0.9` before `10.0.0.10`), host
//! names compare as lower-case text (`node-1.shop` before `node-2.shop`), then ports, then the
//! resolved address. It depends only on what discovery answered, never on which node looks or
//! how it reached a contact point, so every node that sees the same records picks the same
//! lowest contact point.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use crate::discovery::ResolvedTarget;

/// One contact point: a node's management endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContactPoint {
    /// A lower-case host name without trailing dot, or an IP address in its canonical text.
    pub host: String,
    /// The management port.
    pub port: u16,
    /// The IP address discovery resolved, if any.
    pub address: Option<IpAddr>,
}

impl ContactPoint {
    /// A contact point at `host:port`, the host normalised as discovery's hosts are.
    pub fn new(host: &str, port: u16, address: Option<IpAddr>) -> Self {
        ContactPoint {
            host: normalise_host(host),
            port,
            address,
        }
    }

    /// The host as an IP address, if it is one.
    pub fn host_ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// `host:port` for URLs and logs (IPv6 in brackets).
    pub fn authority(&self) -> String {
        match self.host_ip() {
            Some(IpAddr::V6(ip)) => format!("[{ip}]:{}", self.port),
            _ => format!("{}:{}", self.host, self.port),
        }
    }
}

/// Lower case, no brackets around IPv6, no trailing dot; IP addresses in canonical text.
fn normalise_host(host: &str) -> String {
    let host = host
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .trim_end_matches('.');
    match host.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host.to_ascii_lowercase(),
    }
}

impl fmt::Display for ContactPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.authority())?;
        match self.address {
            Some(ip) if self.host_ip() != Some(ip) => write!(f, " ({ip})"),
            _ => Ok(()),
        }
    }
}

/// How a host sorts: IP addresses (as numbers) before names (as text).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum HostKey<'a> {
    Ip(IpAddr),
    Name(&'a str),
}

impl ContactPoint {
    fn host_key(&self) -> HostKey<'_> {
        match self.host_ip() {
            Some(ip) => HostKey::Ip(ip),
            None => HostKey::Name(&self.host),
        }
    }
}

impl Ord for ContactPoint {
    fn cmp(&self, other: &Self) -> Ordering {
        self.host_key()
            .cmp(&other.host_key())
            .then(self.port.cmp(&other.port))
            .then(self.address.cmp(&other.address))
    }
}

impl PartialOrd for ContactPoint {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// How discovered targets become contact points.
#[derive(Clone, Debug)]
pub struct Selection {
    /// The port of targets without one (`contact-point.fallback-port`).
    pub fallback_port: u16,
    /// `contact-point.filter-on-fallback-port`, in force only without a port name.
    pub filter_on_fallback_port: bool,
    /// Keep at most this many (`contact-point-discovery.max-contact-points`), the lowest.
    pub max_contact_points: usize,
}

/// The contact points of a lookup's answer, and how many were left out for
/// `max_contact_points`.
///
/// As Akka's `selectHosts`: when several targets share a host and one of them has a port,
/// only the one on the fallback port is kept (a node listing its remoting and HTTP ports
/// beside the management port), unless filtering is off.
pub fn select(targets: Vec<ResolvedTarget>, rules: &Selection) -> (BTreeSet<ContactPoint>, usize) {
    let mut by_host: BTreeMap<String, Vec<ResolvedTarget>> = BTreeMap::new();
    for t in targets {
        by_host.entry(normalise_host(&t.host)).or_default().push(t);
    }
    let mut all = BTreeSet::new();
    for (_, group) in by_host {
        let keep_all = !rules.filter_on_fallback_port
            || group.len() == 1
            || group.iter().all(|t| t.port.is_none());
        for t in group {
            let port = t.port.unwrap_or(rules.fallback_port);
            if keep_all || t.port == Some(rules.fallback_port) {
                all.insert(ContactPoint::new(&t.host, port, t.address));
            }
        }
    }
    let dropped = all.len().saturating_sub(rules.max_contact_points);
    let kept = all.into_iter().take(rules.max_contact_points).collect();
    (kept, dropped)
}

/// What this node's own contact point looks like: its management port, and the hosts and
/// addresses it is known by (the management API's host, the cluster address's host).
#[derive(Clone, Debug)]
pub struct SelfContact {
    /// `management.http.port`.
    pub port: u16,
    /// Host names and addresses, normalised.
    pub hosts: BTreeSet<String>,
}

impl SelfContact {
    /// A node whose management API listens on `port`, known by `hosts`.
    pub fn new<'a>(port: u16, hosts: impl IntoIterator<Item = &'a str>) -> Self {
        SelfContact {
            port,
            hosts: hosts.into_iter().map(normalise_host).collect(),
        }
    }

    /// Whether `cp` names this node: same port, and its host or resolved address is one of
    /// this node's hosts; with `is_local_ip`, also a resolved address this machine owns (for
    /// a management API bound to `0.0.0.0` or `::`).
    pub fn matches(&self, cp: &ContactPoint, is_local_ip: impl Fn(IpAddr) -> bool) -> bool {
        if cp.port != self.port {
            return false;
        }
        if self.hosts.contains(&cp.host) {
            return true;
        }
        let ip = cp.address.or_else(|| cp.host_ip());
        ip.is_some_and(|ip| self.hosts.contains(&ip.to_string()) || is_local_ip(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: Option<u16>) -> ResolvedTarget {
        ResolvedTarget {
            host: host.to_string(),
            port,
            address: host.parse().ok(),
        }
    }

    fn rules(max: usize) -> Selection {
        Selection {
            fallback_port: 8558,
            filter_on_fallback_port: true,
            max_contact_points: max,
        }
    }

    #[test]
    fn addresses_sort_as_numbers_before_names_as_text() {
        let mut points = [
            ContactPoint::new("node-2.shop", 8558, None),
            ContactPoint::new("10.0.0.10", 8558, None),
            ContactPoint::new("Node-1.Shop.", 8558, None),
            ContactPoint::new("10.0.0.9", 8558, None),
            ContactPoint::new("[fd00::1]", 8558, None),
            ContactPoint::new("10.0.0.9", 8557, None),
        ];
        points.sort();
        let shown: Vec<String> = points.iter().map(ContactPoint::authority).collect();
        assert_eq!(
            shown,
            [
                "10.0.0.9:8557",
                "10.0.0.9:8558",
                "10.0.0.10:8558",
                "[fd00::1]:8558",
                "node-1.shop:8558",
                "node-2.shop:8558"
            ]
        );
    }

    #[test]
    fn targets_without_a_port_get_the_fallback_and_extra_ports_are_filtered() {
        let (points, dropped) = select(
            vec![
                target("10.0.0.1", None),
                target("10.0.0.2", Some(2552)),
                target("10.0.0.2", Some(8558)),
                target("10.0.0.3", Some(9000)),
            ],
            &rules(10),
        );
        let shown: Vec<String> = points.iter().map(ContactPoint::authority).collect();
        assert_eq!(shown, ["10.0.0.1:8558", "10.0.0.2:8558", "10.0.0.3:9000"]);
        assert_eq!(dropped, 0);
    }

    #[test]
    fn only_the_lowest_max_contact_points_are_kept() {
        let targets = (1..=5)
            .rev()
            .map(|i| target(&format!("10.0.0.{i}"), None))
            .collect();
        let (points, dropped) = select(targets, &rules(3));
        let shown: Vec<String> = points.iter().map(ContactPoint::authority).collect();
        assert_eq!(shown, ["10.0.0.1:8558", "10.0.0.2:8558", "10.0.0.3:8558"]);
        assert_eq!(dropped, 2);
    }

    #[test]
    fn a_node_knows_itself_by_host_address_or_local_address_on_its_port() {
        let me = SelfContact::new(8558, ["10.0.0.7", "node-7.shop"]);
        let nowhere = |_| false;
        let ip: IpAddr = "10.0.0.7".parse().unwrap();
        assert!(me.matches(&ContactPoint::new("10.0.0.7", 8558, None), nowhere));
        assert!(me.matches(&ContactPoint::new("NODE-7.shop.", 8558, None), nowhere));
        assert!(me.matches(&ContactPoint::new("pod-7.svc", 8558, Some(ip)), nowhere));
        assert!(!me.matches(&ContactPoint::new("10.0.0.7", 8559, None), nowhere));
        assert!(!me.matches(&ContactPoint::new("10.0.0.8", 8558, None), nowhere));
        let any = SelfContact::new(8558, ["0.0.0.0"]);
        let other: IpAddr = "10.0.0.8".parse().unwrap();
        assert!(
            any.matches(&ContactPoint::new("x.svc", 8558, Some(other)), |a| a
                == other)
        );
        assert!(!any.matches(&ContactPoint::new("x.svc", 8558, Some(other)), nowhere));
    }
}
