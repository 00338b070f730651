//! `management.*`: the management HTTP API.

use serde::Deserialize;
use shardik_core::membership::Address;

use super::ConfigError;
use super::validate::invalid;
use super::values::{de_string, de_switch};

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
    /// `route-providers-read-only`: when true, state-changing routes are disabled.
    #[serde(deserialize_with = "de_switch")]
    pub route_providers_read_only: bool,
}

impl ManagementHttpSettings {
    /// `hostname:port`, ready for binding (IPv6 literals are bracketed).
    pub fn bind_address(&self) -> String {
        Address::new(self.hostname.clone(), self.port).to_string()
    }
}

impl ManagementSettings {
    /// The checks of `management.*`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.http.hostname.is_empty() {
            return Err(invalid(
                "management.http.hostname",
                "",
                "a host name or IP address such as `127.0.0.1` or `0.0.0.0`",
            ));
        }
        Ok(())
    }
}
