//! `management.*`: the management HTTP API, its write guard (read-only switch, bearer token,
//! client-certificate TLS) and the bounds on its port.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;
use shardik_core::membership::Address;

use super::ConfigError;
use super::validate::{invalid, positive_count, positive_duration};
use super::values::{de_bytes, de_string, de_switch};

/// The smallest accepted `management.http.max-request-body-size`: a form with a member
/// address or an operation must always fit.
pub const MIN_MANAGEMENT_BODY_SIZE: usize = 1024;

/// `management.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ManagementSettings {
    /// `http.*`.
    pub http: ManagementHttpSettings,
}

/// `management.http.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ManagementHttpSettings {
    /// `hostname`: interface to listen on.
    #[serde(deserialize_with = "de_string")]
    pub hostname: String,
    /// `port`.
    pub port: u16,
    /// `route-providers-read-only`: when true (the default, as in Akka Management),
    /// state-changing routes answer 403.
    #[serde(deserialize_with = "de_switch")]
    pub route_providers_read_only: bool,
    /// `auth-token-file`: a file holding the bearer token that state-changing routes require;
    /// empty for none.
    #[serde(deserialize_with = "de_string")]
    pub auth_token_file: String,
    /// `header-read-timeout`: how long a client may take to send a whole request head.
    #[serde(deserialize_with = "humantime_serde::deserialize")]
    pub header_read_timeout: Duration,
    /// `max-connections`: connections served at once (a few more are kept for `/alive` and
    /// `/ready`).
    pub max_connections: usize,
    /// `max-request-body-size`, in bytes: larger bodies are answered with 413.
    #[serde(deserialize_with = "de_bytes")]
    pub max_request_body_size: usize,
    /// `tls.*`.
    pub tls: ManagementTlsSettings,
}

/// `management.http.tls.*`: client-certificate TLS on the management port. Designed, not yet
/// served: `enabled = true` is refused at start.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ManagementTlsSettings {
    /// `enabled`.
    #[serde(deserialize_with = "de_switch")]
    pub enabled: bool,
    /// `cert-file`: this node's certificate chain (PEM); empty = the transport's.
    #[serde(deserialize_with = "de_string")]
    pub cert_file: String,
    /// `key-file`: its private key (PEM); empty = the transport's.
    #[serde(deserialize_with = "de_string")]
    pub key_file: String,
    /// `ca-cert-file`: the CA that signs accepted client certificates (PEM); empty = the
    /// transport's.
    #[serde(deserialize_with = "de_string")]
    pub ca_cert_file: String,
}

impl ManagementHttpSettings {
    /// `hostname:port`, ready for binding (IPv6 literals are bracketed).
    pub fn bind_address(&self) -> String {
        Address::new(self.hostname.clone(), self.port).to_string()
    }

    /// Whether the API listens only on this host: `localhost` or a loopback IP address
    /// (`127.0.0.0/8`, `::1`). Any other name counts as reachable from elsewhere.
    pub fn listens_on_loopback(&self) -> bool {
        let host = self.hostname.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// The bearer token file, if one is configured.
    pub fn auth_token_path(&self) -> Option<&str> {
        let path = self.auth_token_file.trim();
        (!path.is_empty()).then_some(path)
    }
}

impl ManagementSettings {
    /// The checks of `management.*`. Run again after command-line overrides of the address
    /// (`shardik node --management`), since the write guard depends on it.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let http = &self.http;
        if http.hostname.is_empty() {
            return Err(invalid(
                "management.http.hostname",
                "",
                "a host name or IP address such as `127.0.0.1` or `0.0.0.0`",
            ));
        }
        positive_duration(
            "management.http.header-read-timeout",
            http.header_read_timeout,
        )?;
        positive_count("management.http.max-connections", http.max_connections)?;
        if http.max_request_body_size < MIN_MANAGEMENT_BODY_SIZE {
            return Err(invalid(
                "management.http.max-request-body-size",
                http.max_request_body_size,
                "at least 1KiB (1024 bytes)",
            ));
        }
        if http.tls.enabled {
            return Err(ConfigError::Refused {
                key: "management.http.tls.enabled".to_string(),
                value: "true".to_string(),
                reason: "client-certificate TLS on the management port is not yet supported; \
                         set it to false and guard state-changing routes with \
                         `management.http.auth-token-file`, or keep the API on 127.0.0.1"
                    .to_string(),
                origin: None,
            });
        }
        if !http.route_providers_read_only
            && !http.listens_on_loopback()
            && http.auth_token_path().is_none()
        {
            return Err(ConfigError::Refused {
                key: "management.http.route-providers-read-only".to_string(),
                value: "false".to_string(),
                reason: format!(
                    "state-changing routes on an address reachable from other hosts \
                     (`management.http.hostname` = `{}`) need a bearer token: set \
                     `management.http.auth-token-file` to a file holding one, or listen on \
                     127.0.0.1, or keep `route-providers-read-only = true`",
                    http.hostname
                ),
                origin: None,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_is_localhost_and_loopback_ips_only() {
        let mut http = super::super::Settings::reference().management.http;
        for (host, loopback) in [
            ("127.0.0.1", true),
            ("127.5.6.7", true),
            ("localhost", true),
            ("LocalHost", true),
            ("::1", true),
            ("[::1]", true),
            ("0.0.0.0", false),
            ("::", false),
            ("10.0.0.1", false),
            ("node-1.example", false),
        ] {
            http.hostname = host.to_string();
            assert_eq!(http.listens_on_loopback(), loopback, "{host}");
        }
    }
}
