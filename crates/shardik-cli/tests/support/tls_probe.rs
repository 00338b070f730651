//! A TLS client of our own (rustls directly, not the node's TLS module) that opens a connection
//! to a node's cluster port and reads the certificate the node presents to new connections,
//! whatever it is: the test decides what it should have been.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use shardik_runtime::tls::PeerCertificate;
use shardik_runtime::tls::certs::IssuedCert;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// Bound on each step of a probe (connect, handshake, close).
const STEP: Duration = Duration::from_secs(5);

/// The DER of the (first) certificate in `pem`.
pub fn der(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("a PEM certificate")
        .to_vec()
}

/// The serial number, in the lower-case hex the node logs, of the certificate in `pem`.
pub fn serial_hex(pem: &str) -> String {
    PeerCertificate::from_der(CertificateDer::from(der(pem)))
        .expect("an X.509 certificate")
        .serial_hex()
}

/// Opens TLS connections to nodes, presenting a client certificate (so the node accepts the
/// handshake and counts no failure for the probe), and returns the node's certificate.
pub struct CertificateProbe {
    connector: TlsConnector,
}

impl CertificateProbe {
    /// A probe that presents `client` (a member certificate of the cluster's CA).
    pub fn new(client: &IssuedCert) -> CertificateProbe {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = vec![CertificateDer::from(der(&client.cert_pem))];
        let key = PrivateKeyDer::from_pem_slice(client.key_pem.as_bytes()).expect("a PEM key");
        let config = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCertificate(provider)))
            .with_client_auth_cert(chain, key)
            .expect("a client certificate");
        CertificateProbe {
            connector: TlsConnector::from(Arc::new(config)),
        }
    }

    /// The DER of the certificate the node at `addr` (`host:port`) presents to a new
    /// connection. Fails if the node cannot be reached, the handshake fails, or the node
    /// refuses the probe's own certificate.
    pub async fn presented(&self, addr: &str) -> Result<Vec<u8>, String> {
        let (host, _port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("{addr}: not host:port"))?;
        let name = ServerName::try_from(host.to_string()).map_err(|e| format!("{host}: {e}"))?;
        let tcp = tokio::time::timeout(STEP, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("{addr}: no connection within {STEP:?}"))?
            .map_err(|e| format!("{addr}: connect: {e}"))?;
        let mut tls = tokio::time::timeout(STEP, self.connector.connect(name, tcp))
            .await
            .map_err(|_| format!("{addr}: no TLS handshake within {STEP:?}"))?
            .map_err(|e| format!("{addr}: TLS handshake: {e}"))?;
        let presented = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|c| c.to_vec())
            .ok_or_else(|| format!("{addr}: presented no certificate"))?;
        // Close, and read until the node closes too: by then it has checked our certificate
        // (in TLS 1.3 after our side considers the handshake done) and read the end of the
        // stream, so the probe costs it no failed handshake; a refusal arrives as an alert.
        tls.shutdown()
            .await
            .map_err(|e| format!("{addr}: close: {e}"))?;
        let mut rest = Vec::new();
        match tokio::time::timeout(STEP, tls.read_to_end(&mut rest)).await {
            Err(_) => Err(format!("{addr}: the node did not close within {STEP:?}")),
            // The node closes without a close_notify of its own: that is the end too.
            Ok(Ok(_)) => Ok(presented),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(presented),
            Ok(Err(e)) => Err(format!("{addr}: the node refused the probe: {e}")),
        }
    }
}

/// Accepts any server certificate (the probe reports it rather than judging it), while still
/// checking the handshake's signatures with it, so what it reports is what the node holds the
/// key of.
#[derive(Debug)]
struct AnyServerCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
