//! rustls verifiers that apply the identity rule: webpki's chain, validity, key-usage and
//! (for servers) host-name checks, then the cluster's URI SAN.
//!
//! Both wrap rustls's own webpki verifiers rather than re-implementing path building, so the
//! only code of ours on the trust path is the SAN URI comparison.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::identity::check_cluster_uri;

/// Verifies the certificate of the node we dial: webpki (chain to the CA file, validity,
/// `serverAuth`, the dialled host in its SANs), then the cluster's URI SAN.
#[derive(Debug)]
pub struct ClusterServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
    cluster_uri: String,
}

impl ClusterServerVerifier {
    /// Wraps `inner`, additionally requiring the URI SAN `cluster_uri`.
    pub fn new(inner: Arc<WebPkiServerVerifier>, cluster_uri: String) -> Self {
        ClusterServerVerifier { inner, cluster_uri }
    }
}

impl ServerCertVerifier for ClusterServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain first: a stranger's certificate is reported as an unknown CA, not as a
        // wrong cluster, whatever its SANs say.
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        check_cluster_uri(end_entity, &self.cluster_uri)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Verifies the certificate of a node that dials us: webpki (chain to the CA file, validity,
/// `clientAuth`), then the cluster's URI SAN. Whether a client must present one at all is the
/// inner verifier's setting (`require-mutual-authentication`).
#[derive(Debug)]
pub struct ClusterClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    cluster_uri: String,
}

impl ClusterClientVerifier {
    /// Wraps `inner`, additionally requiring the URI SAN `cluster_uri`.
    pub fn new(inner: Arc<dyn ClientCertVerifier>, cluster_uri: String) -> Self {
        ClusterClientVerifier { inner, cluster_uri }
    }
}

impl ClientCertVerifier for ClusterClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        check_cluster_uri(end_entity, &self.cluster_uri)?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
