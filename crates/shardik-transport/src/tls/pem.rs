//! Reading the PEM files of a TLS configuration (certificate chain, private key, CA
//! certificates) into rustls types, with errors that name the configuration key (or
//! command-line option) and the file, so the operator knows which file to fix.
//!
//! Shared by every TLS context (between nodes, the management port) and by the management
//! API's HTTPS client.

use std::io;
use std::path::PathBuf;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, RootCertStore};

use super::error::TlsError;

/// A file of a TLS configuration and the configuration key (or command-line option) that
/// names it, which every error about the file quotes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PemFile {
    /// The key or option, e.g. `transport.tls.cert-file` or `--management-ca`.
    pub key: &'static str,
    /// The file.
    pub path: PathBuf,
}

impl PemFile {
    /// `path`, named by `key`.
    pub fn new(key: &'static str, path: impl Into<PathBuf>) -> Self {
        PemFile {
            key,
            path: path.into(),
        }
    }

    /// The file's bytes, or why it could not be read.
    pub(super) fn read(&self) -> FileRead {
        std::fs::read(&self.path).map_err(|e| (e.kind(), e.to_string()))
    }
}

/// A file's bytes, or why it could not be read (kind and message, comparable, so that a
/// rotation check can tell a changed error from the same one).
pub(super) type FileRead = Result<Vec<u8>, (io::ErrorKind, String)>;

fn file_bytes<'a>(file: &PemFile, read: &'a FileRead) -> Result<&'a [u8], TlsError> {
    read.as_deref()
        .map_err(|(kind, message)| TlsError::ReadFile {
            key: file.key,
            path: file.path.clone(),
            source: io::Error::new(*kind, message.clone()),
        })
}

/// Every `CERTIFICATE` block of `read` (the contents of `file`); at least one.
pub(super) fn certificates(
    file: &PemFile,
    read: &FileRead,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = file_bytes(file, read)?;
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(file, e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            key: file.key,
            path: file.path.clone(),
        });
    }
    Ok(certs)
}

/// The first private key block of `read` (the contents of `file`).
pub(super) fn private_key(
    file: &PemFile,
    read: &FileRead,
) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = file_bytes(file, read)?;
    PrivateKeyDer::from_pem_slice(bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            key: file.key,
            path: file.path.clone(),
        },
        e => pem_error(file, e),
    })
}

/// The CA certificates of `read` (the contents of `file`) as a root store.
pub(super) fn root_store(file: &PemFile, read: &FileRead) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for ca in certificates(file, read)? {
        roots.add(ca).map_err(|e| TlsError::BadCertificate {
            key: file.key,
            path: file.path.clone(),
            cause: e.to_string(),
        })?;
    }
    Ok(roots)
}

fn pem_error(file: &PemFile, e: pem::Error) -> TlsError {
    TlsError::Pem {
        key: file.key,
        path: file.path.clone(),
        cause: e.to_string(),
    }
}

/// Loads `key` (read from `key_file`) and compares its public half with the first
/// certificate of `chain` (read from `cert_file`), so a mismatch is reported as such rather
/// than as a handshake failure later.
pub(super) fn check_key_matches(
    cert_file: &PemFile,
    key_file: &PemFile,
    provider: &CryptoProvider,
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), TlsError> {
    let signing = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| TlsError::BadPrivateKey {
            key: key_file.key,
            path: key_file.path.clone(),
            cause: e.to_string(),
        })?;
    match CertifiedKey::new(chain.to_vec(), signing).keys_match() {
        // `Unknown`: the key type cannot tell its public key; rustls accepts it too.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::KeyMismatch {
            cert_key: cert_file.key,
            cert_path: cert_file.path.clone(),
            key_key: key_file.key,
            key_path: key_file.path.clone(),
        }),
        Err(e) => Err(TlsError::BadCertificate {
            key: cert_file.key,
            path: cert_file.path.clone(),
            cause: e.to_string(),
        }),
    }
}

/// A certificate chain and its private key, read from two files and checked to belong
/// together.
pub(super) fn identity(
    cert_file: &PemFile,
    cert_read: &FileRead,
    key_file: &PemFile,
    key_read: &FileRead,
    provider: &CryptoProvider,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let chain = certificates(cert_file, cert_read)?;
    let key = private_key(key_file, key_read)?;
    check_key_matches(cert_file, key_file, provider, &chain, &key)?;
    Ok((chain, key))
}
