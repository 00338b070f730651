//! Nodes with mutual TLS on their cluster port: certificates issued in a test's directory by
//! a CA of the test's making (`shardik_runtime::tls::certs`).

use std::path::Path;

use shardik_runtime::tls::certs::{CertificateAuthority, NodeCertRequest};

use super::NodeSpec;

/// The cluster name of the nodes (`cluster.name`'s default), which their certificates name.
pub const CLUSTER: &str = "shardik";

/// The trust domain of the certificates (`transport.tls.trust-domain`'s default).
pub const TRUST_DOMAIN: &str = "shardik";

/// A node spec with TLS on, its certificate for 127.0.0.1 issued by `ca`, trusting the CA
/// certificates of `trust` (PEM). Its files are written to `dir`, named after `name`.
pub fn tls_node(
    dir: &Path,
    name: &str,
    seeds: &[String],
    ca: &CertificateAuthority,
    trust: &str,
) -> NodeSpec {
    let issued = ca
        .issue(&NodeCertRequest::for_node(
            TRUST_DOMAIN,
            CLUSTER,
            "127.0.0.1",
            5,
        ))
        .expect("a node certificate");
    let path = |suffix: &str| dir.join(format!("{name}{suffix}"));
    std::fs::write(path(".pem"), &issued.cert_pem).unwrap();
    std::fs::write(path("-key.pem"), &issued.key_pem).unwrap();
    std::fs::write(path("-ca.pem"), trust).unwrap();
    NodeSpec::new(name, seeds)
        .env("SHARDIK_TRANSPORT__TLS__ENABLED", "on")
        .env(
            "SHARDIK_TRANSPORT__TLS__CERT_FILE",
            &path(".pem").display().to_string(),
        )
        .env(
            "SHARDIK_TRANSPORT__TLS__KEY_FILE",
            &path("-key.pem").display().to_string(),
        )
        .env(
            "SHARDIK_TRANSPORT__TLS__CA_CERT_FILE",
            &path("-ca.pem").display().to_string(),
        )
}
