//! [`TlsContext`]: the loaded certificate, key and CA files as rustls configurations, re-read
//! for rotation, and the handshakes that use them.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::{ClientConfig, ServerConfig, SupportedProtocolVersion};
use shardik_config::{Settings, TlsSettings};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};
use tracing::{info, warn};

use super::error::TlsError;
use super::failure::FailureReason;
use super::identity::{
    PeerCertificate, cluster_uri, is_trust_domain, is_uri_cluster_name, server_name,
};
use super::pem::{self, FileRead, PemFile};
use super::verifier::{ClusterClientVerifier, ClusterServerVerifier};
use crate::metrics::{
    TLS_RELOAD_FAILURES_TOTAL as RELOAD_FAILURES_TOTAL, TLS_RELOADS_TOTAL as RELOADS_TOTAL,
};

/// Logs under the target this code had in the runtime (see the crate's "Log targets").
const LOG_TARGET: &str = "shardik_runtime::tls::context";

/// Whether a context's accepting side asks clients for a certificate they must present, or
/// one they may present.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client without a certificate fails the handshake (`no-certificate`).
    Required,
    /// A client may present none; one it presents must still pass the identity rule, or the
    /// handshake fails.
    Optional,
}

/// The `port` label of the reload metrics and the subject of the log lines.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Port {
    Cluster,
    Management,
}

impl Port {
    fn label(self) -> &'static str {
        match self {
            Port::Cluster => "cluster",
            Port::Management => "management",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Port::Cluster => "TLS between nodes",
            Port::Management => "TLS on the management port",
        }
    }
}

/// Everything that makes one context: its files and the rules its handshakes follow.
struct Profile {
    port: Port,
    files: Files,
    cluster_uri: String,
    client_auth: ClientAuth,
    versions: &'static [&'static SupportedProtocolVersion],
    ttl: Duration,
}

/// Between nodes: TLS 1.3 only, since both ends are shardik nodes.
static CLUSTER_VERSIONS: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// On the management port: TLS 1.3, and 1.2 for HTTP clients that have nothing newer (some
/// load balancers' health checks, older JVMs). rustls offers only AEAD suites with forward
/// secrecy in 1.2, so this adds no weak cipher.
static MANAGEMENT_VERSIONS: &[&SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// A TLS configuration kept up to date with the files on disk: a [`TlsAcceptor`] and a
/// [`TlsConnector`] following the identity rule of [`crate::tls`]. Two kinds exist: the
/// transport's ([`TlsContext::new`], from `transport.tls.*`: TLS 1.3, client certificates
/// required unless `require-mutual-authentication` is off) and the management port's
/// ([`TlsContext::for_management`]: TLS 1.3 and 1.2, client certificates optional, accept
/// only). Cheap to clone (one `Arc`).
///
/// Rotation: when `ssl-context-cache-ttl` has passed since the files were last looked at, the
/// next call that needs a configuration (a new connection) re-reads them (and, when they
/// changed, reads them again until two reads agree, so that a replacement in progress is not
/// seen half done). Changed files that load are used for new connections from then on (logged
/// at info, counted in [`RELOADS_TOTAL`] with the label `port` = `cluster` or `management`);
/// changed files that
/// do not load leave the current configuration in use, with one warning and one count of
/// [`RELOAD_FAILURES_TOTAL`] per change, not per connection. Connections already open are not
/// touched: they keep what they negotiated.
///
/// Session resumption is off on both sides, so every connection verifies the peer's
/// certificate against the CA file in force when it opens; connections between nodes are few
/// and long-lived, and management requests are rare, so a full handshake each time costs
/// nothing worth saving.
#[derive(Clone)]
pub struct TlsContext {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("port", &self.inner.profile.port.label())
            .field("cert_file", &self.inner.profile.files.cert.path)
            .field("ca_cert_file", &self.inner.profile.files.ca.path)
            .field("cluster_uri", &self.inner.profile.cluster_uri)
            .finish_non_exhaustive()
    }
}

struct Inner {
    profile: Profile,
    state: Mutex<State>,
    checks: AtomicU64,
    reloads: AtomicU64,
    failures: AtomicU64,
}

/// The three files of a context.
struct Files {
    cert: PemFile,
    key: PemFile,
    ca: PemFile,
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
    fn settled(files: &Files, first: Snapshot) -> Snapshot {
        settled(first, || Snapshot::read(files))
    }

    fn read(files: &Files) -> Snapshot {
        Snapshot {
            cert: files.cert.read(),
            key: files.key.read(),
            ca: files.ca.read(),
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
    /// set), for TLS between nodes. Fails with an error naming the key and the file for a file
    /// that is missing or unreadable, not PEM, without a certificate or key, or a key that
    /// does not belong to its certificate.
    pub fn new(tls: &TlsSettings, cluster_name: &str) -> Result<TlsContext, TlsError> {
        check_identity_parts(&tls.trust_domain, cluster_name)?;
        TlsContext::load(Profile {
            port: Port::Cluster,
            files: Files {
                cert: PemFile::new("transport.tls.cert-file", tls.cert_path()),
                key: PemFile::new("transport.tls.key-file", tls.key_path()),
                ca: PemFile::new("transport.tls.ca-cert-file", tls.ca_cert_path()),
            },
            cluster_uri: cluster_uri(&tls.trust_domain, cluster_name),
            client_auth: if tls.require_mutual_authentication {
                ClientAuth::Required
            } else {
                ClientAuth::Optional
            },
            versions: CLUSTER_VERSIONS,
            ttl: tls.ssl_context_cache_ttl,
        })
    }

    /// The context of the management port (`management.http.tls.*`, each empty file key
    /// standing for the transport's), or `None` when `management.http.tls.enabled` is off.
    ///
    /// Clients may present a certificate, and need not (probes do not); one they present must
    /// follow the identity rule of the nodes' client certificates (it chains to the CA file,
    /// is valid, carries this cluster's URI SAN of `transport.tls.trust-domain` and
    /// `cluster.name`, and allows `clientAuth`), or the handshake fails. TLS 1.3 and 1.2. The
    /// files are re-read every `transport.tls.ssl-context-cache-ttl`, as the transport's are.
    /// Errors name the key that named the file (the management key, or the transport key it
    /// fell back to).
    pub fn for_management(settings: &Settings) -> Result<Option<TlsContext>, TlsError> {
        let http_tls = &settings.management.http.tls;
        if !http_tls.enabled {
            return Ok(None);
        }
        let transport = &settings.transport.tls;
        check_identity_parts(&transport.trust_domain, &settings.cluster.name)?;
        let file = |(key, path): (&'static str, &str)| PemFile::new(key, path);
        TlsContext::load(Profile {
            port: Port::Management,
            files: Files {
                cert: file(http_tls.cert_file_or(transport)),
                key: file(http_tls.key_file_or(transport)),
                ca: file(http_tls.ca_cert_file_or(transport)),
            },
            cluster_uri: cluster_uri(&transport.trust_domain, &settings.cluster.name),
            client_auth: ClientAuth::Optional,
            versions: MANAGEMENT_VERSIONS,
            ttl: transport.ssl_context_cache_ttl,
        })
        .map(Some)
    }

    fn load(profile: Profile) -> Result<TlsContext, TlsError> {
        let seen = Snapshot::settled(&profile.files, Snapshot::read(&profile.files));
        let loaded = build(&profile, &seen)?;
        info!(target: LOG_TARGET,
            cert_file = %profile.files.cert.path.display(),
            serial = %loaded.own.serial_hex(),
            identity = %profile.cluster_uri,
            client_certificates = ?profile.client_auth,
            "{}: certificate loaded",
            profile.port.what()
        );
        Ok(TlsContext {
            inner: Arc::new(Inner {
                profile,
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
        &self.inner.profile.cluster_uri
    }

    /// Whether inbound connections must present a client certificate.
    pub fn requires_client_certificate(&self) -> bool {
        self.inner.profile.client_auth == ClientAuth::Required
    }

    /// Whether clients must or may present a certificate.
    pub fn client_auth(&self) -> ClientAuth {
        self.inner.profile.client_auth
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
    /// verified certificate (`None` only when client certificates are optional, see
    /// [`ClientAuth`], and the client sent none). The caller bounds it with its handshake
    /// timeout; the transport afterwards checks with [`PeerCertificate::names_host`] that the
    /// certificate names the host the client claims in shardik's handshake.
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
        let profile = &inner.profile;
        let mut st = inner.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if now.saturating_duration_since(st.last_check) >= profile.ttl {
            st.last_check = now;
            inner.checks.fetch_add(1, Ordering::Relaxed);
            if let Some(snapshot) = inner.changed_files(&st.seen) {
                let port = profile.port.label();
                match build(profile, &snapshot) {
                    Ok(loaded) => {
                        info!(target: LOG_TARGET,
                            cert_file = %profile.files.cert.path.display(),
                            serial = %loaded.own.serial_hex(),
                            "{}: files changed; new connections use the new certificate, key \
                             and CA",
                            profile.port.what()
                        );
                        metrics::counter!(RELOADS_TOTAL, "port" => port).increment(1);
                        inner.reloads.fetch_add(1, Ordering::Relaxed);
                        st.loaded = Arc::new(loaded);
                    }
                    Err(error) => {
                        warn!(target: LOG_TARGET,
                            %error,
                            serial = %st.loaded.own.serial_hex(),
                            "{}: files changed but cannot be used; new connections keep the \
                             previous certificate, key and CA until the files are fixed",
                            profile.port.what()
                        );
                        metrics::counter!(RELOAD_FAILURES_TOTAL, "port" => port).increment(1);
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
        let files = &self.profile.files;
        let first = Snapshot::read(files);
        if first == *seen {
            return None;
        }
        Some(Snapshot::settled(files, first)).filter(|settled| settled != seen)
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

/// Builds both configurations from one snapshot of the files.
fn build(profile: &Profile, files: &Snapshot) -> Result<Loaded, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let paths = &profile.files;
    let (chain, key) = pem::identity(&paths.cert, &files.cert, &paths.key, &files.key, &provider)?;
    let roots = Arc::new(pem::root_store(&paths.ca, &files.ca)?);
    let own =
        PeerCertificate::from_der(chain[0].clone()).ok_or_else(|| TlsError::BadCertificate {
            key: paths.cert.key,
            path: paths.cert.path.clone(),
            cause: "not an X.509 certificate".to_string(),
        })?;

    let server_verifier =
        WebPkiServerVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
            .build()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let mut client_verifier =
        WebPkiClientVerifier::builder_with_provider(roots, Arc::clone(&provider));
    if profile.client_auth == ClientAuth::Optional {
        client_verifier = client_verifier.allow_unauthenticated();
    }
    let client_verifier = client_verifier
        .build()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;

    let mut server = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(profile.versions)
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_client_cert_verifier(Arc::new(ClusterClientVerifier::new(
            client_verifier,
            profile.cluster_uri.clone(),
        )))
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    server.session_storage = Arc::new(NoServerSessionStorage {});
    server.send_tls13_tickets = 0;

    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(profile.versions)
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ClusterServerVerifier::new(
            server_verifier,
            profile.cluster_uri.clone(),
        )))
        .with_client_auth_cert(chain, key)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    client.resumption = Resumption::disabled();

    Ok(Loaded {
        acceptor: TlsAcceptor::from(Arc::new(server)),
        connector: TlsConnector::from(Arc::new(client)),
        own,
    })
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
