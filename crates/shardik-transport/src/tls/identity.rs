//! The cluster identity a certificate must carry, and what the transport learns about a peer
//! from its verified certificate.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::{CertificateDer, DnsName, ServerName};
use rustls::{CertificateError, OtherError};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::X509Certificate;

/// The URI SAN every certificate of cluster `cluster_name` carries:
/// `spiffe://{trust_domain}/cluster/{cluster_name}`.
pub fn cluster_uri(trust_domain: &str, cluster_name: &str) -> String {
    format!("spiffe://{trust_domain}/cluster/{cluster_name}")
}

/// The rule lives with the configuration, which checks `transport.tls.trust-domain` with it.
pub use shardik_config::is_trust_domain;

/// Whether `name` can be the cluster segment of [`cluster_uri`]: ASCII letters, digits, `.`,
/// `-` and `_` (what `cluster.name` allows, and a valid URI path segment).
pub fn is_uri_cluster_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The TLS server name for `host` as written in an address: an IP literal (IPv6 with or
/// without brackets) or a DNS name. `None` if it is neither.
pub fn server_name(host: &str) -> Option<ServerName<'static>> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Some(ServerName::IpAddress(ip.into()));
    }
    DnsName::try_from(bare.to_string())
        .ok()
        .map(ServerName::DnsName)
}

/// A certificate that chains to a trusted CA but does not carry the cluster's URI SAN: made
/// for another cluster, another trust domain, or another purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrongIdentity {
    /// The URI SAN that was required.
    pub expected: String,
    /// The URI SANs the certificate carries (possibly none).
    pub found: Vec<String>,
}

impl fmt::Display for WrongIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.found.is_empty() {
            write!(
                f,
                "certificate has no URI SAN; this cluster requires `{}`",
                self.expected
            )
        } else {
            write!(
                f,
                "certificate names {:?}, not this cluster's `{}`",
                self.found, self.expected
            )
        }
    }
}

impl std::error::Error for WrongIdentity {}

/// The URI SANs of a parsed certificate.
fn uris_of(cert: &X509Certificate<'_>) -> Result<Vec<String>, CertificateError> {
    let san = cert
        .subject_alternative_name()
        .map_err(|_| CertificateError::BadEncoding)?;
    Ok(san
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::URI(uri) => Some((*uri).to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default())
}

fn parse(der: &[u8]) -> Result<X509Certificate<'_>, CertificateError> {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => Ok(cert),
        Err(_) => Err(CertificateError::BadEncoding),
    }
}

/// Rule 3 of the identity rule: `end_entity` carries the URI SAN `expected`. The error is what
/// the verifiers return to rustls (and what [`super::FailureReason`] classifies as
/// `wrong-cluster`).
pub(super) fn check_cluster_uri(
    end_entity: &CertificateDer<'_>,
    expected: &str,
) -> Result<(), rustls::Error> {
    let cert = parse(end_entity)?;
    let found = uris_of(&cert)?;
    if found.iter().any(|uri| uri == expected) {
        return Ok(());
    }
    Err(CertificateError::Other(OtherError(Arc::new(WrongIdentity {
        expected: expected.to_string(),
        found,
    })))
    .into())
}

/// A peer's certificate after the TLS handshake verified it: what the transport needs to
/// know who is on the other end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCertificate {
    der: CertificateDer<'static>,
    serial: Vec<u8>,
    not_before: i64,
    not_after: i64,
    uris: Vec<String>,
}

impl PeerCertificate {
    /// Reads the fields the transport uses from a DER certificate. `None` if it does not
    /// parse (a certificate rustls verified always does).
    #[doc(hidden)] // names rustls's type: for the runtime and its tests, not the facade
    pub fn from_der(der: CertificateDer<'static>) -> Option<Self> {
        let (serial, not_before, not_after, uris) = {
            let cert = parse(&der).ok()?;
            (
                cert.tbs_certificate.raw_serial().to_vec(),
                cert.validity().not_before.timestamp(),
                cert.validity().not_after.timestamp(),
                uris_of(&cert).ok()?,
            )
        };
        Some(PeerCertificate {
            der,
            serial,
            not_before,
            not_after,
            uris,
        })
    }

    /// The first certificate of a connection's peer chain (the peer's own), if it sent one.
    pub(super) fn from_chain(chain: Option<&[CertificateDer<'static>]>) -> Option<Self> {
        chain
            .and_then(|c| c.first())
            .and_then(|der| Self::from_der(der.clone()))
    }

    /// Whether the certificate names `host` (an IP address against its IP SANs, a DNS name
    /// against its DNS SANs, with webpki's rules): the accepting side's check that a client
    /// may claim the address `host:port` in shardik's handshake.
    pub fn names_host(&self, host: &str) -> bool {
        let Some(name) = server_name(host) else {
            return false;
        };
        webpki::EndEntityCert::try_from(&self.der)
            .map(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
            .unwrap_or(false)
    }

    /// The certificate as DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The serial number, big-endian bytes as encoded.
    pub fn serial(&self) -> &[u8] {
        &self.serial
    }

    /// The serial number in lower-case hex, for logs.
    pub fn serial_hex(&self) -> String {
        self.serial.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Start of the validity period.
    pub fn not_before(&self) -> SystemTime {
        unix_time(self.not_before)
    }

    /// End of the validity period.
    pub fn not_after(&self) -> SystemTime {
        unix_time(self.not_after)
    }

    /// The URI SANs (the cluster identity `spiffe://…/cluster/…` among them).
    pub fn uris(&self) -> &[String] {
        &self.uris
    }
}

fn unix_time(secs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_of_addresses() {
        assert!(matches!(
            server_name("127.0.0.1"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(
            server_name("[::1]"),
            Some(ServerName::IpAddress(_))
        ));
        assert!(matches!(server_name("::1"), Some(ServerName::IpAddress(_))));
        assert!(matches!(
            server_name("node-1.example.com"),
            Some(ServerName::DnsName(_))
        ));
        assert_eq!(server_name("not a host"), None);
        assert_eq!(server_name(""), None);
    }

    #[test]
    fn cluster_uri_format() {
        assert_eq!(
            cluster_uri("shardik", "orders"),
            "spiffe://shardik/cluster/orders"
        );
    }

    #[test]
    fn wrong_identity_says_what_was_found() {
        let none = WrongIdentity {
            expected: "spiffe://shardik/cluster/a".into(),
            found: vec![],
        };
        assert!(none.to_string().contains("no URI SAN"));
        let other = WrongIdentity {
            expected: "spiffe://shardik/cluster/a".into(),
            found: vec!["spiffe://shardik/cluster/b".into()],
        };
        assert!(other.to_string().contains("cluster/b"));
    }
}
