//! `management.*`: the management HTTP API, its write guard (read-only switch, bearer token,
//! client-certificate TLS) and the bounds on its port.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;
use shardik_core::membership::Address;

use crate::bootstrap::ManagementClusterSettings;
use crate::error::ConfigError;
use crate::tls::TlsSettings;
use crate::validate::{invalid, positive_count, positive_duration};
use crate::values::{de_bytes, de_string, de_switch};

/// The smallest accepted `management.http.max-request-body-size`: a form with a member
/// address or an operation must always fit.
pub const MIN_MANAGEMENT_BODY_SIZE: usize = 1024;

/// `management.*`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ManagementSettings {
    /// `http.*`.
    pub http: ManagementHttpSettings,
    /// `cluster.*`: cluster bootstrap.
    pub cluster: ManagementClusterSettings,
}

/// `management.http.*`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
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

/// `management.http.tls.*`: HTTPS on the management port, where a client certificate from the
/// cluster's CA authorises the state-changing routes (see the runtime's `http` module). Each empty file
/// key stands for the transport's (`transport.tls.*`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[non_exhaustive]
pub struct ManagementTlsSettings {
    /// `enabled`: serve HTTPS instead of HTTP.
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

impl ManagementTlsSettings {
    /// The configuration key and path of the certificate file: `cert-file`, or
    /// `transport.tls.cert-file` when it is empty.
    pub fn cert_file_or<'a>(&'a self, transport: &'a TlsSettings) -> (&'static str, &'a str) {
        or_transport(
            ("management.http.tls.cert-file", &self.cert_file),
            ("transport.tls.cert-file", &transport.cert_file),
        )
    }

    /// The configuration key and path of the private key file: `key-file`, or
    /// `transport.tls.key-file` when it is empty.
    pub fn key_file_or<'a>(&'a self, transport: &'a TlsSettings) -> (&'static str, &'a str) {
        or_transport(
            ("management.http.tls.key-file", &self.key_file),
            ("transport.tls.key-file", &transport.key_file),
        )
    }

    /// The configuration key and path of the CA file: `ca-cert-file`, or
    /// `transport.tls.ca-cert-file` when it is empty.
    pub fn ca_cert_file_or<'a>(&'a self, transport: &'a TlsSettings) -> (&'static str, &'a str) {
        or_transport(
            ("management.http.tls.ca-cert-file", &self.ca_cert_file),
            ("transport.tls.ca-cert-file", &transport.ca_cert_file),
        )
    }

    /// With TLS on, every file must be named here or by the transport's key.
    fn validate(&self, transport: &TlsSettings) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        for ((key, path), what) in [
            (self.cert_file_or(transport), "this node's certificate"),
            (self.key_file_or(transport), "its private key"),
            (
                self.ca_cert_file_or(transport),
                "the CA certificates that client certificates must chain to",
            ),
        ] {
            if path.is_empty() {
                let own_key = key.replace("transport.tls.", "management.http.tls.");
                return Err(invalid(
                    &own_key,
                    "",
                    &format!(
                        "the path of a PEM file with {what}, required when \
                         `management.http.tls.enabled` is on (empty means `{key}`, which is \
                         empty too)"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `own` unless it is empty (after trimming), else `transport`.
fn or_transport<'a>(
    own: (&'static str, &'a str),
    transport: (&'static str, &'a str),
) -> (&'static str, &'a str) {
    let own_path = own.1.trim();
    if own_path.is_empty() {
        (transport.0, transport.1.trim())
    } else {
        (own.0, own_path)
    }
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
    /// The checks of `management.*` (`transport_tls` provides the files that empty
    /// `management.http.tls.*` keys stand for). Run again after command-line overrides of the
    /// address (`shardik node --management`), since the write guard depends on it.
    pub(super) fn validate(&self, transport_tls: &TlsSettings) -> Result<(), ConfigError> {
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
        http.tls.validate(transport_tls)?;
        if !http.route_providers_read_only
            && !http.listens_on_loopback()
            && http.auth_token_path().is_none()
            && !http.tls.enabled
        {
            return Err(ConfigError::Refused {
                key: "management.http.route-providers-read-only".to_string(),
                value: "false".to_string(),
                reason: format!(
                    "state-changing routes on an address reachable from other hosts \
                     (`management.http.hostname` = `{}`) need credentials: set \
                     `management.http.auth-token-file` to a file holding a bearer token, or \
                     turn on `management.http.tls.enabled` so that client certificates from \
                     the cluster's CA are required, or listen on 127.0.0.1, or keep \
                     `route-providers-read-only = true`",
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
        let mut http = crate::Settings::reference().management.http;
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
