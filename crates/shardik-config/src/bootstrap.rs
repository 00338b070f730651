//! `management.cluster.bootstrap.*`: Akka Management's Cluster Bootstrap (find contact
//! points through `discovery.*`, probe them, join their cluster or form one), plus the
//! bounds shardik adds to the probes.

use std::time::Duration;

use serde::Deserialize;

use crate::discovery::{DiscoveryMethod, DiscoverySettings};
use crate::error::ConfigError;
use crate::validate::{fmt_duration, invalid, positive_count, positive_duration};
use crate::values::{de_bytes, de_string, de_switch};

/// `management.cluster.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ManagementClusterSettings {
    /// `bootstrap.*`.
    pub bootstrap: BootstrapSettings,
}

/// `management.cluster.bootstrap.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct BootstrapSettings {
    /// `new-cluster-enabled`: whether this node may form a new cluster when no contact point
    /// belongs to one.
    #[serde(deserialize_with = "de_switch")]
    pub new_cluster_enabled: bool,
    /// `contact-point-discovery.*`.
    pub contact_point_discovery: ContactPointDiscoverySettings,
    /// `contact-point.*`.
    pub contact_point: ContactPointSettings,
}

/// `management.cluster.bootstrap.contact-point-discovery.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ContactPointDiscoverySettings {
    /// `service-name`: the name looked up (a DNS name, an SRV name `_port._proto.name`, or a
    /// service of `discovery.config.services`).
    #[serde(deserialize_with = "de_string")]
    pub service_name: String,
    /// `port-name`: with `protocol`, makes the DNS lookup an SRV lookup of
    /// `_{port-name}._{protocol}.{service-name}`; empty for none.
    #[serde(deserialize_with = "de_string")]
    pub port_name: String,
    /// `protocol`: see `port-name`.
    #[serde(deserialize_with = "de_string")]
    pub protocol: String,
    /// `required-contact-point-nr`: contact points that must answer before a new cluster may
    /// be formed.
    pub required_contact_point_nr: usize,
    /// `stable-margin`: how long the discovered set must stay unchanged before a new cluster
    /// may be formed.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub stable_margin: Duration,
    /// `interval`: time between two lookups.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub interval: Duration,
    /// `exponential-backoff-max`: the longest time between lookups after failed ones.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub exponential_backoff_max: Duration,
    /// `exponential-backoff-random-factor`: jitter added to the intervals, 0 to 1.
    pub exponential_backoff_random_factor: f64,
    /// `resolve-timeout`: the longest one lookup may take.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub resolve_timeout: Duration,
    /// `contact-with-all-contact-points`: every discovered contact point must have answered
    /// before a new cluster is formed.
    #[serde(deserialize_with = "de_switch")]
    pub contact_with_all_contact_points: bool,
    /// `max-contact-points` (shardik's): discovered contact points beyond this many (the
    /// lowest are kept) are ignored.
    pub max_contact_points: usize,
}

/// `management.cluster.bootstrap.contact-point.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ContactPointSettings {
    /// `fallback-port`: the management port of contact points discovered without one; 0 means
    /// `management.http.port`.
    pub fallback_port: u16,
    /// `filter-on-fallback-port`: of several ports discovered for one host (without
    /// `port-name`), keep only the fallback port.
    #[serde(deserialize_with = "de_switch")]
    pub filter_on_fallback_port: bool,
    /// `probing-failure-timeout`: a contact point's last answer counts this long.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub probing_failure_timeout: Duration,
    /// `probe-interval`: time between two rounds of probes.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub probe_interval: Duration,
    /// `probe-interval-jitter`: random share added to `probe-interval`, 0 to 1.
    pub probe_interval_jitter: f64,
    /// `probe-timeout` (shardik's): the longest one probe may take, connection included.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub probe_timeout: Duration,
    /// `max-response-size` (shardik's), in bytes: larger answers fail the probe.
    #[serde(deserialize_with = "de_bytes")]
    pub max_response_size: usize,
}

impl BootstrapSettings {
    /// The checks of `management.cluster.bootstrap.*`, with the `discovery` section whose
    /// method and services they need.
    pub(crate) fn validate(&self, discovery: &DiscoverySettings) -> Result<(), ConfigError> {
        const P: &str = "management.cluster.bootstrap";
        let d = &self.contact_point_discovery;
        let c = &self.contact_point;
        positive_count(
            &format!("{P}.contact-point-discovery.required-contact-point-nr"),
            d.required_contact_point_nr,
        )?;
        positive_count(
            &format!("{P}.contact-point-discovery.max-contact-points"),
            d.max_contact_points,
        )?;
        if d.max_contact_points < d.required_contact_point_nr {
            return Err(invalid(
                &format!("{P}.contact-point-discovery.max-contact-points"),
                d.max_contact_points,
                &format!(
                    "at least `{P}.contact-point-discovery.required-contact-point-nr` ({}), \
                     or no new cluster could ever be formed",
                    d.required_contact_point_nr
                ),
            ));
        }
        for (key, value) in [
            ("contact-point-discovery.interval", d.interval),
            (
                "contact-point-discovery.exponential-backoff-max",
                d.exponential_backoff_max,
            ),
            ("contact-point-discovery.resolve-timeout", d.resolve_timeout),
            (
                "contact-point.probing-failure-timeout",
                c.probing_failure_timeout,
            ),
            ("contact-point.probe-interval", c.probe_interval),
            ("contact-point.probe-timeout", c.probe_timeout),
        ] {
            positive_duration(&format!("{P}.{key}"), value)?;
        }
        for (key, value) in [
            (
                "contact-point-discovery.exponential-backoff-random-factor",
                d.exponential_backoff_random_factor,
            ),
            (
                "contact-point.probe-interval-jitter",
                c.probe_interval_jitter,
            ),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(invalid(
                    &format!("{P}.{key}"),
                    value,
                    "a number from 0 to 1",
                ));
            }
        }
        // An answer must still count when the next round's answer comes in, or a healthy
        // contact point would keep dropping out of the decision.
        let round = c.probe_interval.mul_f64(1.0 + c.probe_interval_jitter) + c.probe_timeout;
        if c.probing_failure_timeout <= round {
            return Err(invalid(
                &format!("{P}.contact-point.probing-failure-timeout"),
                fmt_duration(c.probing_failure_timeout),
                &format!(
                    "longer than a round of probes: `probe-interval` with its jitter plus \
                     `probe-timeout` ({})",
                    fmt_duration(round)
                ),
            ));
        }
        if c.max_response_size < 1024 {
            return Err(invalid(
                &format!("{P}.contact-point.max-response-size"),
                c.max_response_size,
                "at least 1KiB (1024 bytes)",
            ));
        }
        let has_port_name = !d.port_name.trim().is_empty();
        if has_port_name && d.protocol.trim().is_empty() {
            return Err(invalid(
                &format!("{P}.contact-point-discovery.protocol"),
                "",
                "a protocol such as \"tcp\" when `port-name` is set (the SRV name is \
                 `_{port-name}._{protocol}.{service-name}`)",
            ));
        }
        if discovery.method != DiscoveryMethod::Off && d.service_name.trim().is_empty() {
            return Err(invalid(
                &format!("{P}.contact-point-discovery.service-name"),
                "",
                &format!(
                    "the name to look up with `discovery.method = \"{}\"`: a DNS name whose \
                     A/AAAA records are the contact points, an SRV name such as \
                     `_management._tcp.shop.svc`, or a service of `discovery.config.services`",
                    discovery.method.as_str()
                ),
            ));
        }
        if discovery.method == DiscoveryMethod::Config
            && !discovery
                .config
                .services
                .contains_key(d.service_name.trim())
        {
            let known: Vec<&str> = discovery
                .config
                .services
                .keys()
                .map(String::as_str)
                .collect();
            return Err(invalid(
                &format!("{P}.contact-point-discovery.service-name"),
                &d.service_name,
                &format!("a service listed under `discovery.config.services` (listed: {known:?})"),
            ));
        }
        Ok(())
    }
}
