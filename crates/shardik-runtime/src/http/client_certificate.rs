//! What the HTTPS server tells the write guard about a connection's client.

use std::sync::Arc;

use shardik_transport::tls::PeerCertificate;

/// The verified client certificate of the connection a request came on, put in the request's
/// extensions by the HTTPS server. Its presence means the TLS handshake checked it against the
/// identity rule ([`crate::tls`]: chains to the CA file, valid now, this cluster's URI SAN,
/// `clientAuth`), so the write guard can take it as authority.
#[derive(Clone, Debug)]
pub struct ClientCertificate(Arc<PeerCertificate>);

impl ClientCertificate {
    /// Wraps a certificate that a TLS handshake verified.
    pub fn verified(cert: PeerCertificate) -> Self {
        ClientCertificate(Arc::new(cert))
    }

    /// The certificate.
    pub fn certificate(&self) -> &PeerCertificate {
        &self.0
    }
}
