//! What the rest of the node sees of TLS in a build without the `tls` feature: a context and a
//! peer certificate that cannot exist, so that code holding an `Option` of them needs no
//! `cfg` of its own and its TLS branches are statically unreachable, and the start-up check
//! that refuses a configuration asking for TLS.

use shardik_config::Settings;

use super::error::TlsError;

/// A TLS context: none can be made in a build without the `tls` feature.
#[derive(Clone, Debug)]
pub enum TlsContext {}

impl TlsContext {
    /// `None` when `transport.tls.enabled` is off; an error naming the key and the feature
    /// when it is on, since this build cannot speak TLS.
    pub fn from_settings(settings: &Settings) -> Result<Option<TlsContext>, TlsError> {
        refuse_if(settings.transport.tls.enabled, "transport.tls.enabled")
    }

    /// `None` when `management.http.tls.enabled` is off; an error naming the key and the
    /// feature when it is on.
    pub fn for_management(settings: &Settings) -> Result<Option<TlsContext>, TlsError> {
        refuse_if(
            settings.management.http.tls.enabled,
            "management.http.tls.enabled",
        )
    }
}

fn refuse_if(enabled: bool, key: &'static str) -> Result<Option<TlsContext>, TlsError> {
    if enabled {
        Err(TlsError::NotBuilt { key })
    } else {
        Ok(None)
    }
}

/// A peer's verified certificate: none exists without TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerCertificate {}

impl PeerCertificate {
    /// Whether the certificate names `host` (never called: no certificate exists).
    pub fn names_host(&self, _host: &str) -> bool {
        match *self {}
    }

    /// The serial number in hex (never called: no certificate exists).
    pub fn serial_hex(&self) -> String {
        match *self {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_that_turns_tls_on_is_refused_with_the_key_and_the_feature() {
        let mut settings = Settings::reference();
        assert!(TlsContext::from_settings(&settings).unwrap().is_none());
        assert!(TlsContext::for_management(&settings).unwrap().is_none());
        settings.transport.tls.enabled = true;
        let err = TlsContext::from_settings(&settings)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("transport.tls.enabled") && err.contains("`tls` feature"),
            "{err}"
        );
        settings.management.http.tls.enabled = true;
        let err = TlsContext::for_management(&settings)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("management.http.tls.enabled"), "{err}");
    }
}
