//! [`TlsContext`]: the loaded certificate, key and CA files as rustls configurations, re-read
//! for rotation, and the handshakes that use them.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, InconsistentKeys, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};
use tracing::{info, warn};

use super::error::TlsError;
use super::failure::FailureReason;
use super::identity::{
    PeerCertificate, cluster_uri, is_trust_domain, is_uri_cluster_name, server_name,
};
use super::verifier::{ClusterClientVerifier, ClusterServerVerifier};
use super::{RELOAD_FAILURES_TOTAL, RELOADS_TOTAL};
use crate::config::{Settings, TlsSettings};

const CERT_KEY: &str = "transport.tls.cert-file";
const KEY_KEY: &str = "transport.tls.key-file";
const CA_KEY: &str = "transport.tls.ca-cert-file";

/// The TLS side of the transport: a [`TlsAcceptor`] and a [`TlsConnector`] built from
/// `transport.tls.*`, following the identity rule of [`crate::tls`], and kept up to date with
/// the files on disk. Cheap to clone (one `Arc`).
///
/// Rotation: when `ssl-context-cache-ttl` has passed since the files were last looked at, the
/// next call that needs a configuration (a new connection) re-reads them (and, when they
/// changed, reads them again until two reads agree, so that a replacement in progress is not
/// seen half done). Changed files that load are used for new connections from then on
/// (logged at info, counted in [`RELOADS_TOTAL`]); changed files that do not load leave the
/// current configuration in use, with one warning and one count of [`RELOAD_FAILURES_TOTAL`]
/// per change, not per connection.
/// Connections already open are not touched: they keep what they negotiated.
///
/// Session resumption is off on both sides, so every connection verifies the peer's
/// certificate against the CA file in force when it opens; connections between nodes are few
/// and long-lived, so a full handshake each time costs nothing worth saving.
#[derive(Clone)]
pub struct TlsContext {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("cert_file", &self.inner.paths.cert)
            .field("ca_cert_file", &self.inner.paths.ca)
            .field("cluster_uri", &self.inner.cluster_uri)
            .finish_non_exhaustive()
    }
}

struct Inner {
    paths: Paths,
    cluster_uri: String,
    mutual: bool,
    ttl: Duration,
    state: Mutex<State>,
    checks: AtomicU64,
    reloads: AtomicU64,
    failures: AtomicU64,
}

struct Paths {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

struct State {
    loaded: Arc<Loaded>,
    /// The file contents last looked at, loaded or not: a change is a difference from these,
    /// so a broken file is reported once, not at every check.
    seen: Snapshot,
    last_check: Instant,
}

/// What one configuration gives the handshakes.
struct Loaded {
    acceptor: TlsAcceptor,
    connector: TlsConnector,
    own: PeerCertificate,
}

/// A file's bytes, or why it could not be read (kind and message, comparable).
type FileRead = Result<Vec<u8>, (io::ErrorKind, String)>;

#[derive(PartialEq, Eq)]
struct Snapshot {
    cert: FileRead,
    key: FileRead,
    ca: FileRead,
}

/// Reads of the files, at most, before [`settled`] gives up waiting for them to stop changing.
const SETTLE_READS: usize = 4;

impl Snapshot {
    /// The files as they are once they stop changing: read again until two reads in a row
    /// agree (see [`settled`]), starting from `first`, an earlier read.
    fn settled(paths: &Paths, first: Snapshot) -> Snapshot {
        settled(first, || Snapshot::read(paths))
    }

    fn read(paths: &Paths) -> Snapshot {
        let read = |p: &Path| std::fs::read(p).map_err(|e| (e.kind(), e.to_string()));
        Snapshot {
            cert: read(&paths.cert),
            key: read(&paths.key),
            ca: read(&paths.ca),
        }
    }
}

/// `first`, or what `read` returns once two reads in a row agree (after at most
/// [`SETTLE_READS`] further reads, the last one).
///
/// The three files are read one after the other, so a read that overlaps a replacement can
/// pair the old certificate with the new key even when the replacement itself is atomic (the
/// kubelet swaps a whole directory of Secret files at once): such a pair would be refused as
/// a mismatch, warned about and counted, and the new files used only one TTL later. When two
/// reads agree, no replacement overlapped the second one, so it is taken.
fn settled<T: PartialEq>(first: T, mut read: impl FnMut() -> T) -> T {
    let mut last = first;
    for _ in 0..SETTLE_READS {
        let next = read();
        if next == last {
            return next;
        }
        last = next;
    }
    last
}

/// Counts of [`TlsContext`]'s file checks, for tests and diagnostics (the same events are
/// also metrics).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadStats {
    /// Times the files were read to look for a change (once per TTL at most).
    pub checks: u64,
    /// Changes loaded and in use for new connections.
    pub reloads: u64,
    /// Changes that could not be loaded.
    pub failures: u64,
}

/// Why a TLS handshake with a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The host to dial cannot be named by a certificate (not an IP address or DNS name).
    #[error("`{host}` is not an IP address or DNS name that a certificate can name")]
    InvalidHost {
        /// The host as given.
        host: String,
    },
    /// The handshake failed: refused by us or by the peer, or the connection broke.
    #[error("TLS handshake failed ({reason}): {source}")]
    Tls {
        /// The classified reason (a metric label).
        reason: FailureReason,
        /// The error from rustls or the socket.
        #[source]
        source: io::Error,
    },
    /// The handshake succeeded but the peer's certificate could not be read back (should not
    /// happen: rustls verified it).
    #[error("the peer's verified certificate could not be read")]
    UnreadablePeerCertificate,
}

impl HandshakeError {
    fn tls(source: io::Error) -> Self {
        HandshakeError::Tls {
            reason: FailureReason::of_io(&source),
            source,
        }
    }

    /// The reason as a short label for metrics and logs.
    pub fn reason(&self) -> FailureReason {
        match self {
            HandshakeError::InvalidHost { .. } => FailureReason::BadName,
            HandshakeError::Tls { reason, .. } => *reason,
            HandshakeError::UnreadablePeerCertificate => FailureReason::BadCertificate,
        }
    }
}

impl TlsContext {
    /// The context for a node's settings, or `None` when `transport.tls.enabled` is off.
    pub fn from_settings(settings: &Settings) -> Result<Option<TlsContext>, TlsError> {
        let tls = &settings.transport.tls;
        if !tls.enabled {
            return Ok(None);
        }
        TlsContext::new(tls, &settings.cluster.name).map(Some)
    }

    /// Loads the files named in `tls` for cluster `cluster_name` (whether or not `enabled` is
    /// set). Fails with an error naming the key and the file for a file that is missing or
    /// unreadable, not PEM, without a certificate or key, or a key that does not belong to
    /// its certificate.
    pub fn new(tls: &TlsSettings, cluster_name: &str) -> Result<TlsContext, TlsError> {
        check_identity_parts(&tls.trust_domain, cluster_name)?;
        let paths = Paths {
            cert: tls.cert_path().to_owned(),
            key: tls.key_path().to_owned(),
            ca: tls.ca_cert_path().to_owned(),
        };
        let cluster_uri = cluster_uri(&tls.trust_domain, cluster_name);
        let mutual = tls.require_mutual_authentication;
        let seen = Snapshot::settled(&paths, Snapshot::read(&paths));
        let loaded = build(&paths, &seen, &cluster_uri, mutual)?;
        info!(
            cert_file = %paths.cert.display(),
            serial = %loaded.own.serial_hex(),
            identity = %cluster_uri,
            mutual,
            "TLS between nodes: certificate loaded"
        );
        Ok(TlsContext {
            inner: Arc::new(Inner {
                paths,
                cluster_uri,
                mutual,
                ttl: tls.ssl_context_cache_ttl,
                state: Mutex::new(State {
                    loaded: Arc::new(loaded),
                    seen,
                    last_check: Instant::now(),
                }),
                checks: AtomicU64::new(0),
                reloads: AtomicU64::new(0),
                failures: AtomicU64::new(0),
            }),
        })
    }

    /// The acceptor for a new inbound connection (after checking the files for changes if the
    /// TTL has passed).
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current().acceptor.clone()
    }

    /// The connector for a new outbound connection (after checking the files for changes if
    /// the TTL has passed).
    pub fn connector(&self) -> TlsConnector {
        self.current().connector.clone()
    }

    /// This node's certificate as new connections present it.
    pub fn own_certificate(&self) -> PeerCertificate {
        self.current().own.clone()
    }

    /// The URI SAN peers must carry: `spiffe://{trust-domain}/cluster/{cluster.name}`.
    pub fn cluster_uri(&self) -> &str {
        &self.inner.cluster_uri
    }

    /// Whether inbound connections must present a client certificate.
    pub fn requires_client_certificate(&self) -> bool {
        self.inner.mutual
    }

    /// How often the files were checked, reloaded, or refused.
    pub fn stats(&self) -> ReloadStats {
        ReloadStats {
            checks: self.inner.checks.load(Ordering::Relaxed),
            reloads: self.inner.reloads.load(Ordering::Relaxed),
            failures: self.inner.failures.load(Ordering::Relaxed),
        }
    }

    /// The TLS handshake of an inbound connection. Returns the stream and the client's
    /// verified certificate (`None` only when `require-mutual-authentication` is off and the
    /// client sent none). The caller bounds it with its handshake timeout, and afterwards
    /// checks with [`PeerCertificate::names_host`] that the certificate names the host the
    /// client claims in shardik's handshake.
    pub async fn accept<IO>(
        &self,
        io: IO,
    ) -> Result<(server::TlsStream<IO>, Option<PeerCertificate>), HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let stream = self
            .acceptor()
            .accept(io)
            .await
            .map_err(HandshakeError::tls)?;
        let chain = stream.get_ref().1.peer_certificates();
        let peer = match chain {
            None => None,
            Some(_) => Some(
                PeerCertificate::from_chain(chain)
                    .ok_or(HandshakeError::UnreadablePeerCertificate)?,
            ),
        };
        Ok((stream, peer))
    }

    /// The TLS handshake of an outbound connection to `host` (the host part of the address
    /// dialled: an IP literal or DNS name), which the server's certificate must name. Returns
    /// the stream and the server's verified certificate. The caller bounds it with its
    /// handshake timeout.
    ///
    /// In TLS 1.3 the server checks our certificate after we consider the handshake done, so
    /// a refusal of ours shows up as an error on the first read (classify it with
    /// [`FailureReason::of_io`]).
    pub async fn connect<IO>(
        &self,
        io: IO,
        host: &str,
    ) -> Result<(client::TlsStream<IO>, PeerCertificate), HandshakeError>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = server_name(host).ok_or_else(|| HandshakeError::InvalidHost {
            host: host.to_string(),
        })?;
        let stream = self
            .connector()
            .connect(name, io)
            .await
            .map_err(HandshakeError::tls)?;
        let peer = PeerCertificate::from_chain(stream.get_ref().1.peer_certificates())
            .ok_or(HandshakeError::UnreadablePeerCertificate)?;
        Ok((stream, peer))
    }

    /// The configuration for a new connection, re-reading the files first if the TTL has
    /// passed. The files are small and read at most once per TTL, so reading them under the
    /// lock (and on the caller's thread) holds up at most the connections opened meanwhile.
    fn current(&self) -> Arc<Loaded> {
        let inner = &*self.inner;
        let mut st = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if now.saturating_duration_since(st.last_check) >= inner.ttl {
            st.last_check = now;
            inner.checks.fetch_add(1, Ordering::Relaxed);
            if let Some(snapshot) = inner.changed_files(&st.seen) {
                match build(&inner.paths, &snapshot, &inner.cluster_uri, inner.mutual) {
                    Ok(loaded) => {
                        info!(
                            cert_file = %inner.paths.cert.display(),
                            serial = %loaded.own.serial_hex(),
                            "TLS files changed: new connections use the new certificate, key and CA"
                        );
                        metrics::counter!(RELOADS_TOTAL).increment(1);
                        inner.reloads.fetch_add(1, Ordering::Relaxed);
                        st.loaded = Arc::new(loaded);
                    }
                    Err(error) => {
                        warn!(
                            %error,
                            serial = %st.loaded.own.serial_hex(),
                            "TLS files changed but cannot be used; new connections keep the \
                             previous certificate, key and CA until the files are fixed"
                        );
                        metrics::counter!(RELOAD_FAILURES_TOTAL).increment(1);
                        inner.failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                st.seen = snapshot;
            }
        }
        Arc::clone(&st.loaded)
    }
}

impl Inner {
    /// The files, if they differ from `seen`: read once and, when they differ, read until
    /// they stop changing, so that a check during a replacement does not see half of it.
    fn changed_files(&self, seen: &Snapshot) -> Option<Snapshot> {
        let first = Snapshot::read(&self.paths);
        if first == *seen {
            return None;
        }
        Some(Snapshot::settled(&self.paths, first)).filter(|settled| settled != seen)
    }
}

/// The trust domain and cluster name must form a URI a certificate can carry.
fn check_identity_parts(trust_domain: &str, cluster_name: &str) -> Result<(), TlsError> {
    if !is_trust_domain(trust_domain) {
        return Err(TlsError::Identity {
            key: "transport.tls.trust-domain",
            value: trust_domain.to_string(),
            reason: "a trust domain has only lower-case ASCII letters, digits, `.`, `-` and `_`",
        });
    }
    if !is_uri_cluster_name(cluster_name) {
        return Err(TlsError::Identity {
            key: "cluster.name",
            value: cluster_name.to_string(),
            reason: "a cluster name in a certificate has only ASCII letters, digits, `.`, `-` and `_`",
        });
    }
    Ok(())
}

fn file_bytes<'a>(
    key: &'static str,
    path: &Path,
    read: &'a FileRead,
) -> Result<&'a [u8], TlsError> {
    read.as_deref()
        .map_err(|(kind, message)| TlsError::ReadFile {
            key,
            path: path.to_owned(),
            source: io::Error::new(*kind, message.clone()),
        })
}

fn certificates(
    key: &'static str,
    path: &Path,
    read: &FileRead,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = file_bytes(key, path, read)?;
    let certs = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(key, path, e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            key,
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

fn private_key(path: &Path, read: &FileRead) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = file_bytes(KEY_KEY, path, read)?;
    PrivateKeyDer::from_pem_slice(bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            path: path.to_owned(),
        },
        e => pem_error(KEY_KEY, path, e),
    })
}

fn pem_error(key: &'static str, path: &Path, e: pem::Error) -> TlsError {
    TlsError::Pem {
        key,
        path: path.to_owned(),
        cause: e.to_string(),
    }
}

/// Builds both configurations from one snapshot of the files.
fn build(
    paths: &Paths,
    files: &Snapshot,
    cluster_uri: &str,
    mutual: bool,
) -> Result<Loaded, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(CERT_KEY, &paths.cert, &files.cert)?;
    let key = private_key(&paths.key, &files.key)?;
    let cas = certificates(CA_KEY, &paths.ca, &files.ca)?;

    let own =
        PeerCertificate::from_der(chain[0].clone()).ok_or_else(|| TlsError::BadCertificate {
            key: CERT_KEY,
            path: paths.cert.clone(),
            cause: "not an X.509 certificate".to_string(),
        })?;
    check_key_matches(paths, &provider, &chain, &key)?;

    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots.add(ca).map_err(|e| TlsError::BadCertificate {
            key: CA_KEY,
            path: paths.ca.clone(),
            cause: e.to_string(),
        })?;
    }
    let roots = Arc::new(roots);

    let server_verifier =
        WebPkiServerVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
            .build()
            .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
    let mut client_verifier =
        WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(&provider));
    if !mutual {
        client_verifier = client_verifier.allow_unauthenticated();
    }
    let client_verifier = client_verifier
        .build()
        .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;

    let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Rustls)?
        .with_client_cert_verifier(Arc::new(ClusterClientVerifier::new(
            client_verifier,
            cluster_uri.to_string(),
        )))
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(TlsError::Rustls)?;
    server.session_storage = Arc::new(NoServerSessionStorage {});
    server.send_tls13_tickets = 0;

    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Rustls)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ClusterServerVerifier::new(
            server_verifier,
            cluster_uri.to_string(),
        )))
        .with_client_auth_cert(chain, key)
        .map_err(TlsError::Rustls)?;
    client.resumption = Resumption::disabled();

    Ok(Loaded {
        acceptor: TlsAcceptor::from(Arc::new(server)),
        connector: TlsConnector::from(Arc::new(client)),
        own,
    })
}

/// Loads the key and compares its public half with the certificate's, so a mismatch is
/// reported as such rather than as a handshake failure later.
fn check_key_matches(
    paths: &Paths,
    provider: &CryptoProvider,
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), TlsError> {
    let signing = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| TlsError::BadPrivateKey {
            path: paths.key.clone(),
            cause: e.to_string(),
        })?;
    match CertifiedKey::new(chain.to_vec(), signing).keys_match() {
        // `Unknown`: the key type cannot tell its public key; rustls accepts it too.
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(TlsError::KeyMismatch {
            cert_path: paths.cert.clone(),
            key_path: paths.key.clone(),
        }),
        Err(e) => Err(TlsError::BadCertificate {
            key: CERT_KEY,
            path: paths.cert.clone(),
            cause: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that returns `reads` in turn, then repeats the last, counting its calls.
    fn reader(
        reads: Vec<&'static str>,
    ) -> (
        impl FnMut() -> &'static str,
        std::rc::Rc<std::cell::Cell<usize>>,
    ) {
        let calls = std::rc::Rc::new(std::cell::Cell::new(0));
        let counted = std::rc::Rc::clone(&calls);
        let read = move || {
            let i = counted.get();
            counted.set(i + 1);
            reads[i.min(reads.len() - 1)]
        };
        (read, calls)
    }

    #[test]
    fn files_that_do_not_change_are_read_once_more() {
        let (read, calls) = reader(vec!["new"]);
        assert_eq!(settled("new", read), "new");
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn a_read_that_overlapped_a_replacement_is_read_again_until_two_agree() {
        // The first read got the old certificate with the new key; the replacement is done
        // by the second read.
        let (read, calls) = reader(vec!["new", "new"]);
        assert_eq!(settled("old cert, new key", read), "new");
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn files_that_keep_changing_are_read_a_bounded_number_of_times() {
        let (read, calls) = reader(vec!["a", "b", "c", "d", "e", "f"]);
        assert_eq!(settled("first", read), "d");
        assert_eq!(calls.get(), SETTLE_READS);
    }
}
