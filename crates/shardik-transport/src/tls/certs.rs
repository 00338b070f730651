//! Making certificates that follow the identity rule: a cluster CA and node certificates with
//! the cluster's URI SAN and the node's host. `shardik certs` uses it, and so do the tests,
//! which also make the certificates the rule must refuse (another CA, another cluster, no URI
//! SAN, expired).
//!
//! Keys are ECDSA P-256; every certificate gets a random 128-bit serial number.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use time::OffsetDateTime;

use super::identity::cluster_uri;

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A host that is neither an IP address nor a valid DNS name.
    #[error("`{0}` is not an IP address or DNS name a certificate can name")]
    InvalidHost(String),
    /// A URI a certificate cannot carry (not ASCII).
    #[error("`{0}` cannot be a URI SAN (only ASCII is allowed)")]
    InvalidUri(String),
    /// The CA certificate or key could not be read.
    #[error("the CA {what} cannot be used: {cause}")]
    BadCa {
        /// `certificate` or `key`.
        what: &'static str,
        /// What went wrong.
        cause: String,
    },
    /// The CA key does not belong to the CA certificate.
    #[error("the CA key does not belong to the CA certificate")]
    CaKeyMismatch,
    /// rcgen refused to make the certificate.
    #[error("cannot make the certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// When a certificate is valid.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Validity {
    /// Start of the validity period.
    pub not_before: SystemTime,
    /// End of the validity period.
    pub not_after: SystemTime,
}

impl Validity {
    /// From an hour ago (tolerating clocks a little behind ours) until `days` days from now.
    pub fn days_from_now(days: u32) -> Self {
        let now = SystemTime::now();
        Validity {
            not_before: now - Duration::from_secs(3600),
            not_after: now + Duration::from_secs(u64::from(days) * 86_400),
        }
    }

    /// A period that ended a day ago (for tests of expired certificates).
    pub fn expired() -> Self {
        let now = SystemTime::now();
        Validity {
            not_before: now - Duration::from_secs(30 * 86_400),
            not_after: now - Duration::from_secs(86_400),
        }
    }
}

/// What goes into a node certificate.
#[derive(Clone, Debug)]
pub struct NodeCertRequest {
    /// Host names and IP addresses the node is dialled at (DNS and IP SANs). The first is
    /// also the subject's common name.
    pub hosts: Vec<String>,
    /// URI SANs; a node of cluster C carries `spiffe://{trust-domain}/cluster/C`.
    pub uris: Vec<String>,
    /// The validity period.
    pub validity: Validity,
}

impl NodeCertRequest {
    /// A certificate for `host` as a member of `cluster_name` in `trust_domain`, valid from
    /// now for `days` days.
    pub fn for_node(trust_domain: &str, cluster_name: &str, host: &str, days: u32) -> Self {
        NodeCertRequest {
            hosts: vec![host.to_string()],
            uris: vec![cluster_uri(trust_domain, cluster_name)],
            validity: Validity::days_from_now(days),
        }
    }
}

/// A certificate and its private key, both PEM.
#[derive(Clone, Debug)]
pub struct IssuedCert {
    /// The certificate (`-----BEGIN CERTIFICATE-----`).
    pub cert_pem: String,
    /// The private key, PKCS#8 (`-----BEGIN PRIVATE KEY-----`).
    pub key_pem: String,
}

/// A CA that issues node certificates.
pub struct CertificateAuthority {
    cert_pem: String,
    key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CertificateAuthority")
            .field("cert_pem", &self.cert_pem)
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// A new self-signed CA named `common_name`, allowed to sign end-entity certificates only
    /// (path length 0).
    pub fn generate(common_name: &str, validity: Validity) -> Result<Self, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        set_validity(&mut params, validity);
        params.serial_number = Some(random_serial());
        let cert = params.self_signed(&key)?;
        Ok(CertificateAuthority {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA from its certificate and private key (PEM), as `shardik certs` wrote them.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, CertError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| CertError::BadCa {
            what: "key",
            cause: e.to_string(),
        })?;
        let der =
            CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|e| CertError::BadCa {
                what: "certificate",
                cause: e.to_string(),
            })?;
        let (_, parsed) =
            x509_parser::parse_x509_certificate(&der).map_err(|e| CertError::BadCa {
                what: "certificate",
                cause: e.to_string(),
            })?;
        if parsed.public_key().raw != key.subject_public_key_info().as_slice() {
            return Err(CertError::CaKeyMismatch);
        }
        let issuer = Issuer::from_ca_cert_der(&der, key).map_err(|e| CertError::BadCa {
            what: "certificate",
            cause: e.to_string(),
        })?;
        Ok(CertificateAuthority {
            cert_pem: cert_pem.to_string(),
            key_pem: key_pem.to_string(),
            issuer,
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key, PEM (PKCS#8).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// Issues a node certificate (with a fresh key) for `request`, usable both to accept
    /// (`serverAuth`) and to dial (`clientAuth`).
    pub fn issue(&self, request: &NodeCertRequest) -> Result<IssuedCert, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(request.hosts.first().map_or("shardik node", |h| h));
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        // Lets path building pick the right CA when a bundle holds an old and a new one.
        params.use_authority_key_identifier_extension = true;
        for uri in &request.uris {
            let ia5 = uri
                .as_str()
                .try_into()
                .map_err(|_| CertError::InvalidUri(uri.clone()))?;
            params.subject_alt_names.push(SanType::URI(ia5));
        }
        for host in &request.hosts {
            params.subject_alt_names.push(host_san(host)?);
        }
        set_validity(&mut params, request.validity);
        params.serial_number = Some(random_serial());
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

fn set_validity(params: &mut CertificateParams, validity: Validity) {
    params.not_before = OffsetDateTime::from(validity.not_before);
    params.not_after = OffsetDateTime::from(validity.not_after);
}

/// 128 random bits with the top bit clear and the next one set, so the DER integer is
/// positive and always 16 bytes long.
fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    bytes[0] |= 0x40;
    SerialNumber::from_slice(&bytes)
}

/// The SAN naming `host`: an IP address SAN for an IP literal (IPv6 with or without
/// brackets), a DNS SAN otherwise.
fn host_san(host: &str) -> Result<SanType, CertError> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    // A wildcard (`*.pods.example`) names every host one label below its domain: one
    // certificate that all pods of a Deployment can share (see docs/SECURITY.md, Kubernetes).
    let domain = bare.strip_prefix("*.").unwrap_or(bare);
    if domain.parse::<IpAddr>().is_ok() || rustls::pki_types::DnsName::try_from(domain).is_err() {
        return Err(CertError::InvalidHost(host.to_string()));
    }
    let ia5 = bare
        .try_into()
        .map_err(|_| CertError::InvalidHost(host.to_string()))?;
    Ok(SanType::DnsName(ia5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::PeerCertificate;

    fn parse(pem: &str) -> PeerCertificate {
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        PeerCertificate::from_der(der).unwrap()
    }

    #[test]
    fn node_certificates_carry_the_identity_and_host() {
        let ca = CertificateAuthority::generate("test CA", Validity::days_from_now(10)).unwrap();
        let ip = ca
            .issue(&NodeCertRequest::for_node(
                "shardik",
                "orders",
                "127.0.0.1",
                5,
            ))
            .unwrap();
        let cert = parse(&ip.cert_pem);
        assert_eq!(cert.uris(), ["spiffe://shardik/cluster/orders"]);
        assert!(cert.names_host("127.0.0.1"));
        assert!(!cert.names_host("127.0.0.2"));
        assert!(!cert.names_host("localhost"));
        let dns = ca
            .issue(&NodeCertRequest::for_node(
                "shardik",
                "orders",
                "node-1.example",
                5,
            ))
            .unwrap();
        let cert = parse(&dns.cert_pem);
        assert!(cert.names_host("node-1.example"));
        assert!(!cert.names_host("node-2.example"));
        assert!(!cert.names_host("127.0.0.1"));
        let v6 = ca
            .issue(&NodeCertRequest::for_node("shardik", "orders", "[::1]", 5))
            .unwrap();
        assert!(parse(&v6.cert_pem).names_host("::1"));
    }

    #[test]
    fn serials_differ_and_validity_is_kept() {
        let ca = CertificateAuthority::generate("test CA", Validity::days_from_now(10)).unwrap();
        let req = NodeCertRequest {
            validity: Validity::expired(),
            ..NodeCertRequest::for_node("shardik", "c", "127.0.0.1", 1)
        };
        let a = parse(&ca.issue(&req).unwrap().cert_pem);
        let b = parse(&ca.issue(&req).unwrap().cert_pem);
        assert_ne!(a.serial(), b.serial());
        assert!(a.not_after() < SystemTime::now());
    }

    #[test]
    fn a_ca_reloaded_from_pem_issues_certificates_it_signed() {
        let ca = CertificateAuthority::generate("test CA", Validity::days_from_now(10)).unwrap();
        let again = CertificateAuthority::from_pem(ca.cert_pem(), ca.key_pem()).unwrap();
        assert_eq!(again.cert_pem(), ca.cert_pem());
        let other = CertificateAuthority::generate("other", Validity::days_from_now(10)).unwrap();
        assert!(matches!(
            CertificateAuthority::from_pem(ca.cert_pem(), other.key_pem()),
            Err(CertError::CaKeyMismatch)
        ));
    }

    #[test]
    fn bad_hosts_are_refused() {
        let ca = CertificateAuthority::generate("test CA", Validity::days_from_now(10)).unwrap();
        for host in [
            "not a host",
            "*.10.0.0.1",
            "*",
            "*.",
            "a.*.example",
            "**.example",
        ] {
            let req = NodeCertRequest::for_node("shardik", "c", host, 1);
            assert!(
                matches!(ca.issue(&req), Err(CertError::InvalidHost(_))),
                "{host}"
            );
        }
    }

    #[test]
    fn a_wildcard_certificate_names_every_host_one_label_below_its_domain() {
        let ca = CertificateAuthority::generate("test CA", Validity::days_from_now(10)).unwrap();
        let req = NodeCertRequest::for_node("shardik", "c", "*.pods.example", 1);
        let issued = ca.issue(&req).unwrap();
        let cert = parse(&issued.cert_pem);
        assert!(cert.names_host("node-1.pods.example"));
        assert!(cert.names_host("node-2.pods.example"));
        assert!(!cert.names_host("pods.example"), "not the domain itself");
        assert!(!cert.names_host("a.node-1.pods.example"), "one label only");
        assert!(!cert.names_host("node-1.other.example"));
    }
}
