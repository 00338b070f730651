//! Certificates for the TLS tests: a CA of the test's making, node certificates it issues, and
//! files replaced the way an operator or Kubernetes replaces them.

use std::path::Path;

use shardik_runtime::tls::certs::{CertificateAuthority, IssuedCert, NodeCertRequest, Validity};

/// A CA valid for 30 days, named `name`.
pub fn new_ca(name: &str) -> CertificateAuthority {
    CertificateAuthority::generate(name, Validity::days_from_now(30)).unwrap()
}

/// A certificate valid five days for a node of `cluster` (trust domain `shardik`) at `host`.
pub fn node_cert_for(ca: &CertificateAuthority, cluster: &str, host: &str) -> IssuedCert {
    ca.issue(&NodeCertRequest::for_node("shardik", cluster, host, 5))
        .unwrap()
}

/// Writes `contents` to `path` through a temporary file renamed into place, so a reader never
/// sees half of it.
pub fn put(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
