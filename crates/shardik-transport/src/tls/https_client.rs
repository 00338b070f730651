//! The client side of the management port's HTTPS: a rustls configuration that trusts the
//! cluster's CA file and, if asked, presents a client certificate (which the management port
//! takes as the authority to use its state-changing routes). The CLI's management commands
//! use it.

use std::sync::Arc;

use rustls::ClientConfig;

use super::error::TlsError;
use super::pem::{self, PemFile};

/// A client configuration for the management port: the server's certificate must chain to a
/// CA of `ca` and name the host dialled (webpki's rules, as any HTTPS client); with
/// `identity` (certificate chain, private key), that certificate is presented when the
/// server asks. TLS 1.3 and 1.2, ring provider. The files are read once, now; errors name
/// the key or option of the file.
pub fn https_client_config(
    ca: &PemFile,
    identity: Option<(&PemFile, &PemFile)>,
) -> Result<ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = pem::root_store(ca, &ca.read())?;
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_root_certificates(roots);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let (chain, key) = pem::identity(cert, &cert.read(), key, &key.read(), &provider)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TlsError::Rustls(e.to_string()))
        }
    }
}
