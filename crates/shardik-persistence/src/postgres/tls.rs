//! TLS for the PostgreSQL store: rustls with the ring provider, checking the server's
//! certificate as the URL's `sslmode` and `sslrootcert` say (see [`super::url`]).
//!
//! The certificate files are read again for every new connection, so a rotated CA file or
//! client certificate is used without a restart; a file that cannot be read or parsed then
//! leaves the last good configuration in use (and is logged, once per distinct problem).

use std::convert::Infallible;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    ClientConfig, DigitallySignedStruct, Error as TlsError, OtherError, RootCertStore,
    SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::url::TlsParams;

/// Makes the TLS side of each new connection of the store's pool.
#[derive(Clone)]
pub(super) struct StoreTls {
    shared: Arc<Shared>,
}

struct Shared {
    params: TlsParams,
    current: Mutex<Loaded>,
}

/// The configuration in use, and the file contents it was built from.
struct Loaded {
    files: Files,
    connect: MakeRustlsConnect,
    /// The last problem logged, so a file that stays broken is logged once.
    last_problem: Option<String>,
}

impl StoreTls {
    /// Reads the files `params` names and builds the configuration. The error names the URL
    /// parameter and file at fault.
    pub(super) fn new(params: TlsParams) -> Result<Self, String> {
        let files = Files::read(&params)?;
        let connect = MakeRustlsConnect::new(build(&params, &files)?);
        Ok(StoreTls {
            shared: Arc::new(Shared {
                params,
                current: Mutex::new(Loaded {
                    files,
                    connect,
                    last_problem: None,
                }),
            }),
        })
    }

    /// The configuration for a new connection: rebuilt if a file changed, the last good one
    /// if a file is now unreadable or bad.
    fn current(&self) -> MakeRustlsConnect {
        let params = &self.shared.params;
        let fresh = Files::read(params);
        // A poisoned lock only means another connection panicked mid-reload; what it holds
        // is still a whole configuration.
        let mut loaded = self
            .shared
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let problem = match fresh {
            Ok(files) if files == loaded.files => None,
            Ok(files) => match build(params, &files) {
                Ok(config) => {
                    loaded.connect = MakeRustlsConnect::new(config);
                    loaded.files = files;
                    tracing::info!(
                        "PostgreSQL store: certificate files changed; new connections use them"
                    );
                    None
                }
                Err(why) => Some(why),
            },
            Err(why) => Some(why),
        };
        if let Some(why) = &problem
            && loaded.last_problem.as_ref() != Some(why)
        {
            tracing::warn!(
                "PostgreSQL store: {why}; new connections keep the certificates read before"
            );
        }
        loaded.last_problem = problem;
        loaded.connect.clone()
    }
}

impl<S> MakeTlsConnect<S> for StoreTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = Infallible;

    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Infallible> {
        MakeTlsConnect::<S>::make_tls_connect(&mut self.current(), hostname)
    }
}

/// The contents of the certificate files, to notice when they change.
#[derive(PartialEq, Eq)]
struct Files {
    root: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Files {
    fn read(params: &TlsParams) -> Result<Self, String> {
        if params.mode == super::url::SslMode::Disable {
            return Ok(Files {
                root: None,
                client: None,
            });
        }
        let root = params
            .chain_roots()
            .map(|path| read("sslrootcert", path))
            .transpose()?;
        let client = params
            .client
            .as_ref()
            .map(|id| Ok::<_, String>((read("sslcert", &id.cert)?, read("sslkey", &id.key)?)))
            .transpose()?;
        Ok(Files { root, client })
    }
}

fn read(name: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{name}={}: cannot read it: {e}", path.display()))
}

/// The rustls configuration for `params`, from the file contents `files`.
fn build(params: &TlsParams, files: &Files) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let roots = match (&files.root, params.chain_roots()) {
        (Some(pem), Some(path)) => Some(Roots {
            store: root_store(pem, path)?,
            path: path.display().to_string(),
        }),
        _ => None,
    };
    let verifier = Arc::new(Verifier {
        roots,
        check_name: params.checks_host_name(),
        algorithms,
    });
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("the TLS library refuses its own defaults: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (&files.client, &params.client) {
        (Some((cert_pem, key_pem)), Some(id)) => {
            let chain = certificates(cert_pem)
                .map_err(|e| format!("sslcert={}: {e}", id.cert.display()))?;
            if chain.is_empty() {
                return Err(format!(
                    "sslcert={}: no certificate in it (PEM \"CERTIFICATE\" blocks expected)",
                    id.cert.display()
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
                format!(
                    "sslkey={}: no private key read from it (PEM PKCS#8, RSA or EC key \
                     expected): {e}",
                    id.key.display()
                )
            })?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                format!(
                    "sslcert={} and sslkey={} do not make a client identity: {e}",
                    id.cert.display(),
                    id.key.display()
                )
            })
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM file of certificates: {e}"))
}

fn root_store(pem: &[u8], path: &Path) -> Result<Arc<RootCertStore>, String> {
    let at = |e: String| format!("sslrootcert={}: {e}", path.display());
    let mut store = RootCertStore::empty();
    for cert in certificates(pem).map_err(at)? {
        store
            .add(cert)
            .map_err(|e| at(format!("a certificate in it is not usable as a CA: {e}")))?;
    }
    if store.is_empty() {
        return Err(at(
            "no certificate in it (PEM \"CERTIFICATE\" blocks expected)".to_string(),
        ));
    }
    Ok(Arc::new(store))
}

/// The CAs the server's certificate must chain to.
struct Roots {
    store: Arc<RootCertStore>,
    /// The file they came from, for refusals.
    path: String,
}

/// Checks the server's certificate as libpq does for the mode: not at all (`prefer` and
/// `require` without `sslrootcert`: encryption against a passive listener only), its chain
/// (`verify-ca`, or any mode with `sslrootcert`), or its chain and its host name
/// (`verify-full`). The handshake signatures are always checked, so the server holds the key
/// of the certificate it shows.
struct Verifier {
    roots: Option<Roots>,
    check_name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("roots", &self.roots.as_ref().map(|r| &r.path))
            .field("check_name", &self.check_name)
            .finish_non_exhaustive()
    }
}

/// A refusal in words that name what the user can change.
#[derive(Debug)]
struct Refusal(String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// A refused certificate as an error whose text is ours alone (a certificate error of rustls
/// would print our text through its `Debug`, quotes escaped). The server then gets a
/// `handshake_failure` alert rather than `bad_certificate`; it logs either as a failed handshake.
fn refuse(why: String) -> TlsError {
    TlsError::Other(OtherError(Arc::new(Refusal(why))))
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        let Some(roots) = &self.roots else {
            return Ok(ServerCertVerified::assertion());
        };
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &roots.store,
            intermediates,
            now,
            self.algorithms.all,
        )
        .map_err(|e| {
            refuse(format!(
                "the server's certificate is not signed by a CA of sslrootcert={} ({e})",
                roots.path
            ))
        })?;
        if self.check_name {
            verify_server_name(&cert, server_name).map_err(|e| {
                refuse(format!(
                    "the server's certificate does not name the host {:?} that was connected \
                     to, which sslmode=verify-full requires ({e})",
                    server_name.to_str()
                ))
            })?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
