//! `transport.*`: the TCP transport between nodes.

use std::time::Duration;

use serde::Deserialize;

use crate::error::ConfigError;
use crate::tls::TlsSettings;
use crate::validate::{fmt_duration, invalid, positive_count, positive_duration};
use crate::values::de_bytes;

/// The smallest accepted `transport.maximum-frame-size`: a handshake or a small gossip must
/// always fit, or no connection could ever be established.
pub const MIN_FRAME_SIZE: usize = 1024;

/// `transport.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct TransportSettings {
    /// `maximum-frame-size`, in bytes.
    #[serde(deserialize_with = "de_bytes")]
    pub maximum_frame_size: usize,
    /// `outbound-control-queue-size`.
    pub outbound_control_queue_size: usize,
    /// `outbound-user-queue-size`.
    pub outbound_user_queue_size: usize,
    /// `connect-timeout`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub connect_timeout: Duration,
    /// `handshake-timeout`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub handshake_timeout: Duration,
    /// `idle-timeout`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub idle_timeout: Duration,
    /// `frame-read-timeout`: a started frame must complete within this.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub frame_read_timeout: Duration,
    /// `maximum-inbound-connections`.
    pub maximum_inbound_connections: usize,
    /// `maximum-unauthenticated-connections`.
    pub maximum_unauthenticated_connections: usize,
    /// `maximum-non-member-connections`.
    pub maximum_non_member_connections: usize,
    /// `reconnect-backoff-min`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub reconnect_backoff_min: Duration,
    /// `reconnect-backoff-max`.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub reconnect_backoff_max: Duration,
    /// `maximum-gossip-decompressed-size`, in bytes.
    #[serde(deserialize_with = "de_bytes")]
    pub maximum_gossip_decompressed_size: usize,
    /// `tls.*`: mutual TLS between nodes.
    pub tls: TlsSettings,
}

impl TransportSettings {
    /// The checks of `transport.*`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.maximum_frame_size < MIN_FRAME_SIZE {
            return Err(invalid(
                "transport.maximum-frame-size",
                self.maximum_frame_size,
                "at least 1KiB (1024 bytes)",
            ));
        }
        positive_count(
            "transport.outbound-control-queue-size",
            self.outbound_control_queue_size,
        )?;
        positive_count(
            "transport.outbound-user-queue-size",
            self.outbound_user_queue_size,
        )?;
        positive_count(
            "transport.maximum-gossip-decompressed-size",
            self.maximum_gossip_decompressed_size,
        )?;
        self.validate_connection_limits()?;
        for (key, d) in [
            ("transport.connect-timeout", self.connect_timeout),
            ("transport.handshake-timeout", self.handshake_timeout),
            ("transport.idle-timeout", self.idle_timeout),
            ("transport.frame-read-timeout", self.frame_read_timeout),
            (
                "transport.reconnect-backoff-min",
                self.reconnect_backoff_min,
            ),
            (
                "transport.reconnect-backoff-max",
                self.reconnect_backoff_max,
            ),
        ] {
            positive_duration(key, d)?;
        }
        self.tls.validate()?;
        if self.reconnect_backoff_max < self.reconnect_backoff_min {
            return Err(invalid(
                "transport.reconnect-backoff-max",
                fmt_duration(self.reconnect_backoff_max),
                &format!(
                    "a duration no shorter than `transport.reconnect-backoff-min` ({})",
                    fmt_duration(self.reconnect_backoff_min)
                ),
            ));
        }
        if self.frame_read_timeout > self.idle_timeout {
            return Err(invalid(
                "transport.frame-read-timeout",
                fmt_duration(self.frame_read_timeout),
                &format!(
                    "a duration no longer than `transport.idle-timeout` ({})",
                    fmt_duration(self.idle_timeout)
                ),
            ));
        }
        Ok(())
    }

    /// The connection caps: each positive, and the total leaves room for members beyond what
    /// connections still handshaking and connections of non-members may hold.
    fn validate_connection_limits(&self) -> Result<(), ConfigError> {
        positive_count(
            "transport.maximum-unauthenticated-connections",
            self.maximum_unauthenticated_connections,
        )?;
        positive_count(
            "transport.maximum-non-member-connections",
            self.maximum_non_member_connections,
        )?;
        let others = self
            .maximum_unauthenticated_connections
            .saturating_add(self.maximum_non_member_connections);
        if self.maximum_inbound_connections <= others {
            return Err(invalid(
                "transport.maximum-inbound-connections",
                self.maximum_inbound_connections,
                &format!(
                    "a number greater than `transport.maximum-unauthenticated-connections` + \
                     `transport.maximum-non-member-connections` ({others}), so that members \
                     always have room"
                ),
            ));
        }
        Ok(())
    }
}
