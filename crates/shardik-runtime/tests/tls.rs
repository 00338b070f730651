//! Mutual TLS between nodes over real loopback TCP: the identity rule (CA, validity, cluster
//! URI SAN, host names), rotation of the files, and the start-up errors.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use shardik_runtime::config::{ConfigError, Settings, TlsSettings};
use shardik_runtime::tls::certs::{IssuedCert, NodeCertRequest, Validity};
use shardik_runtime::tls::{FailureReason, PeerCertificate, TlsContext, TlsError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use common::pki::{new_ca, node_cert_for, put};

/// Generous: a handshake on loopback takes milliseconds; this only stops a broken test.
const DEADLINE: Duration = Duration::from_secs(20);
const CLUSTER: &str = "orders";

/// One node's files in a directory.
struct NodeFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

impl NodeFiles {
    fn write(dir: &Path, name: &str, cert: &IssuedCert, ca_pem: &str) -> NodeFiles {
        let files = NodeFiles {
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}-key.pem")),
            ca: dir.join(format!("{name}-ca.pem")),
        };
        files.install(cert);
        put(&files.ca, ca_pem);
        files
    }

    fn install(&self, cert: &IssuedCert) {
        put(&self.key, &cert.key_pem);
        put(&self.cert, &cert.cert_pem);
    }

    fn settings(&self, ttl: Duration, mutual: bool) -> TlsSettings {
        let mut settings = Settings::reference().transport.tls;
        settings.enabled = true;
        settings.cert_file = self.cert.display().to_string();
        settings.key_file = self.key.display().to_string();
        settings.ca_cert_file = self.ca.display().to_string();
        settings.require_mutual_authentication = mutual;
        settings.trust_domain = "shardik".to_string();
        settings.ssl_context_cache_ttl = ttl;
        settings
    }

    fn context(&self) -> TlsContext {
        TlsContext::new(&self.settings(Duration::from_secs(3600), true), CLUSTER).unwrap()
    }
}

fn serial_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    PeerCertificate::from_der(der).unwrap().serial().to_vec()
}

/// What the accepting side saw of one connection.
type Accepted = Result<Option<PeerCertificate>, FailureReason>;

/// A TLS echo server: every connection's handshake outcome goes to the channel; accepted
/// connections answer each 4-byte `ping` with `pong` until closed.
struct Server {
    addr: SocketAddr,
    outcomes: mpsc::UnboundedReceiver<Accepted>,
}

impl Server {
    async fn start(ctx: TlsContext) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, outcomes) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (ctx, tx) = (ctx.clone(), tx.clone());
                tokio::spawn(async move {
                    match ctx.accept(tcp).await {
                        Err(e) => {
                            let _ = tx.send(Err(e.reason()));
                        }
                        Ok((mut stream, peer)) => {
                            let _ = tx.send(Ok(peer));
                            let mut buf = [0u8; 4];
                            while stream.read_exact(&mut buf).await.is_ok() {
                                if stream.write_all(b"pong").await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Server { addr, outcomes }
    }

    async fn next(&mut self) -> Accepted {
        tokio::time::timeout(DEADLINE, self.outcomes.recv())
            .await
            .expect("the server saw the connection in time")
            .expect("server running")
    }
}

type ClientStream = tokio_rustls::client::TlsStream<TcpStream>;

/// One round trip; in TLS 1.3 a server's refusal of our certificate arrives here.
async fn ping(stream: &mut ClientStream) -> Result<(), FailureReason> {
    let io = async {
        stream.write_all(b"ping").await?;
        stream.flush().await?;
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).await?;
        assert_eq!(&buf, b"pong");
        Ok::<_, std::io::Error>(())
    };
    match tokio::time::timeout(DEADLINE, io).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(FailureReason::of_io(&e)),
        Err(_) => panic!("no answer in time"),
    }
}

/// Dials `addr` as `host` and completes a round trip.
async fn dial(
    ctx: &TlsContext,
    addr: SocketAddr,
    host: &str,
) -> Result<(ClientStream, PeerCertificate), FailureReason> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut stream, peer) = tokio::time::timeout(DEADLINE, ctx.connect(tcp, host))
        .await
        .expect("handshake in time")
        .map_err(|e| e.reason())?;
    ping(&mut stream).await?;
    Ok((stream, peer))
}

/// A client and a server from one CA and cluster, and the handshake between them.
async fn pair(
    server_cert: &IssuedCert,
    client_cert: &IssuedCert,
    server_ca: &str,
    client_ca: &str,
) -> (tempfile::TempDir, TlsContext, TlsContext) {
    let dir = tempfile::tempdir().unwrap();
    let s = NodeFiles::write(dir.path(), "server", server_cert, server_ca).context();
    let c = NodeFiles::write(dir.path(), "client", client_cert, client_ca).context();
    (dir, s, c)
}

#[tokio::test]
async fn nodes_of_one_ca_and_cluster_connect_both_ways_and_see_each_other() {
    let ca = new_ca("ca");
    let a_cert = node_cert_for(&ca, CLUSTER, "127.0.0.1");
    let b_cert = ca
        .issue(&NodeCertRequest {
            hosts: vec!["127.0.0.1".into(), "node-b.test".into()],
            ..NodeCertRequest::for_node("shardik", CLUSTER, "x", 5)
        })
        .unwrap();
    let (_dir, a, b) = pair(&a_cert, &b_cert, ca.cert_pem(), ca.cert_pem()).await;

    for (server_ctx, client_ctx, server_cert, client_cert) in
        [(&a, &b, &a_cert, &b_cert), (&b, &a, &b_cert, &a_cert)]
    {
        let mut server = Server::start(server_ctx.clone()).await;
        let (_stream, seen_server) = dial(client_ctx, server.addr, "127.0.0.1")
            .await
            .expect("handshake accepted");
        assert_eq!(seen_server.serial(), serial_of(&server_cert.cert_pem));
        let seen_client = server.next().await.expect("accepted").expect("client cert");
        assert_eq!(seen_client.serial(), serial_of(&client_cert.cert_pem));
        assert_eq!(seen_client.uris(), ["spiffe://shardik/cluster/orders"]);
        // The accepting side's check of the address the client claims in our handshake.
        assert!(seen_client.names_host("127.0.0.1"));
        assert!(!seen_client.names_host("127.0.0.2"));
        assert!(!seen_client.names_host("elsewhere.test"));
    }
    let b_seen = b.own_certificate();
    assert!(b_seen.names_host("node-b.test"));
    assert!(!a.own_certificate().names_host("node-b.test"));
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused_as_unknown_ca() {
    let ca = new_ca("ca");
    let stranger_ca = new_ca("stranger");
    let (_dir, server, client) = pair(
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        &node_cert_for(&stranger_ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
        // The stranger trusts our CA, so only the server's check can stop it.
        ca.cert_pem(),
    )
    .await;
    let mut s = Server::start(server).await;
    let client_saw = dial(&client, s.addr, "127.0.0.1").await.err();
    assert_eq!(s.next().await.err(), Some(FailureReason::UnknownCa));
    // The refused side learns it from the alert.
    assert_eq!(client_saw, Some(FailureReason::UnknownCa));
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused_by_the_client() {
    let ca = new_ca("ca");
    let stranger_ca = new_ca("stranger");
    let (_dir, server, client) = pair(
        &node_cert_for(&stranger_ca, CLUSTER, "127.0.0.1"),
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
        ca.cert_pem(),
    )
    .await;
    let s = Server::start(server).await;
    let refused = dial(&client, s.addr, "127.0.0.1").await.err();
    assert_eq!(refused, Some(FailureReason::UnknownCa));
}

/// A client that offers no certificate: plain rustls trusting the CA.
fn anonymous_client(ca_pem: &str) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for ca in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn dial_anonymously(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
) -> Result<(), FailureReason> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut stream = tokio::time::timeout(DEADLINE, connector.connect(name, tcp))
        .await
        .expect("handshake in time")
        .map_err(|e| FailureReason::of_io(&e))?;
    ping(&mut stream).await
}

#[tokio::test]
async fn no_client_certificate_is_refused_when_mutual_authentication_is_on() {
    let ca = new_ca("ca");
    let dir = tempfile::tempdir().unwrap();
    let files = NodeFiles::write(
        dir.path(),
        "server",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    );
    let mut s = Server::start(files.context()).await;
    let client_saw = dial_anonymously(&anonymous_client(ca.cert_pem()), s.addr).await;
    assert_eq!(s.next().await.err(), Some(FailureReason::NoCertificate));
    assert_eq!(client_saw, Err(FailureReason::NoCertificate));

    // With mutual authentication off the same client gets in, without an identity.
    let lenient =
        TlsContext::new(&files.settings(Duration::from_secs(3600), false), CLUSTER).unwrap();
    assert!(!lenient.requires_client_certificate());
    let mut s = Server::start(lenient).await;
    dial_anonymously(&anonymous_client(ca.cert_pem()), s.addr)
        .await
        .expect("accepted without a certificate");
    assert_eq!(s.next().await, Ok(None));
}

#[tokio::test]
async fn certificates_naming_another_cluster_or_none_are_refused_as_wrong_cluster() {
    let ca = new_ca("ca");
    let other_cluster = ca
        .issue(&NodeCertRequest::for_node(
            "shardik",
            "payments",
            "127.0.0.1",
            5,
        ))
        .unwrap();
    let other_domain = ca
        .issue(&NodeCertRequest::for_node(
            "example.org",
            CLUSTER,
            "127.0.0.1",
            5,
        ))
        .unwrap();
    let no_uri = ca
        .issue(&NodeCertRequest {
            uris: vec![],
            ..NodeCertRequest::for_node("shardik", CLUSTER, "127.0.0.1", 5)
        })
        .unwrap();
    let good = node_cert_for(&ca, CLUSTER, "127.0.0.1");
    for bad in [&other_cluster, &other_domain, &no_uri] {
        // As a client: the server refuses it.
        let (_dir, server, client) = pair(&good, bad, ca.cert_pem(), ca.cert_pem()).await;
        let mut s = Server::start(server).await;
        let client_saw = dial(&client, s.addr, "127.0.0.1").await.err();
        assert_eq!(s.next().await.err(), Some(FailureReason::WrongCluster));
        assert_eq!(client_saw, Some(FailureReason::BadCertificate));
        // As a server: the client refuses it.
        let (_dir, server, client) = pair(bad, &good, ca.cert_pem(), ca.cert_pem()).await;
        let s = Server::start(server).await;
        let refused = dial(&client, s.addr, "127.0.0.1").await.err();
        assert_eq!(refused, Some(FailureReason::WrongCluster));
    }
}

#[tokio::test]
async fn expired_certificates_are_refused_both_ways() {
    let ca = new_ca("ca");
    let expired = ca
        .issue(&NodeCertRequest {
            validity: Validity::expired(),
            ..NodeCertRequest::for_node("shardik", CLUSTER, "127.0.0.1", 5)
        })
        .unwrap();
    let good = node_cert_for(&ca, CLUSTER, "127.0.0.1");

    let (_dir, server, client) = pair(&good, &expired, ca.cert_pem(), ca.cert_pem()).await;
    let mut s = Server::start(server).await;
    let client_saw = dial(&client, s.addr, "127.0.0.1").await.err();
    assert_eq!(s.next().await.err(), Some(FailureReason::Expired));
    assert_eq!(client_saw, Some(FailureReason::Expired));

    let (_dir, server, client) = pair(&expired, &good, ca.cert_pem(), ca.cert_pem()).await;
    let s = Server::start(server).await;
    assert_eq!(
        dial(&client, s.addr, "127.0.0.1").await.err(),
        Some(FailureReason::Expired)
    );
}

#[tokio::test]
async fn a_server_certificate_for_another_host_than_dialled_is_refused() {
    let ca = new_ca("ca");
    let elsewhere = ca
        .issue(&NodeCertRequest {
            hosts: vec!["127.0.0.2".into(), "node-x.test".into()],
            ..NodeCertRequest::for_node("shardik", CLUSTER, "x", 5)
        })
        .unwrap();
    let good = node_cert_for(&ca, CLUSTER, "127.0.0.1");
    let (_dir, server, client) = pair(&elsewhere, &good, ca.cert_pem(), ca.cert_pem()).await;
    let s = Server::start(server).await;
    // Dialled at 127.0.0.1, or by a name the certificate does not carry.
    for host in ["127.0.0.1", "localhost"] {
        assert_eq!(
            dial(&client, s.addr, host).await.err(),
            Some(FailureReason::BadName),
            "{host}"
        );
    }
    // Not a host a certificate can name at all.
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let e = client.connect(tcp, "not a host").await.err().unwrap();
    assert_eq!(e.reason(), FailureReason::BadName);
}

/// Dials until the server presents `serial`, failing after the deadline.
async fn dial_until_serial(ctx: &TlsContext, addr: SocketAddr, serial: &[u8]) {
    let until = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (_stream, peer) = dial(ctx, addr, "127.0.0.1")
            .await
            .expect("connections keep working during rotation");
        if peer.serial() == serial {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "the new certificate was never presented"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn rotated_node_files_are_used_for_new_connections_and_old_ones_keep_going() {
    let ca = new_ca("ca");
    let dir = tempfile::tempdir().unwrap();
    let old = node_cert_for(&ca, CLUSTER, "127.0.0.1");
    let files = NodeFiles::write(dir.path(), "server", &old, ca.cert_pem());
    let server =
        TlsContext::new(&files.settings(Duration::from_millis(50), true), CLUSTER).unwrap();
    let client = NodeFiles::write(
        dir.path(),
        "client",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    )
    .context();
    let s = Server::start(server.clone()).await;
    let (mut old_conn, first) = dial(&client, s.addr, "127.0.0.1").await.unwrap();
    assert_eq!(first.serial(), serial_of(&old.cert_pem));

    let new = ca
        .issue(&NodeCertRequest {
            validity: Validity::days_from_now(90),
            ..NodeCertRequest::for_node("shardik", CLUSTER, "127.0.0.1", 90)
        })
        .unwrap();
    files.install(&new);
    dial_until_serial(&client, s.addr, &serial_of(&new.cert_pem)).await;
    assert_eq!(server.own_certificate().serial(), serial_of(&new.cert_pem));
    assert!(server.own_certificate().not_after() > first.not_after());
    assert_eq!(server.stats().reloads, 1);
    assert_eq!(server.stats().failures, 0);
    // The connection opened before the rotation is untouched.
    ping(&mut old_conn)
        .await
        .expect("old connection still works");
}

#[tokio::test]
async fn unusable_new_files_keep_the_old_configuration_and_count_one_failure() {
    let handle = shardik_runtime::metrics::Metrics::install().unwrap();
    let ca = new_ca("ca");
    let dir = tempfile::tempdir().unwrap();
    let old = node_cert_for(&ca, CLUSTER, "127.0.0.1");
    let files = NodeFiles::write(dir.path(), "server", &old, ca.cert_pem());
    let server =
        TlsContext::new(&files.settings(Duration::from_millis(20), true), CLUSTER).unwrap();
    let client = NodeFiles::write(
        dir.path(),
        "client",
        &node_cert_for(&ca, CLUSTER, "127.0.0.1"),
        ca.cert_pem(),
    )
    .context();
    let s = Server::start(server.clone()).await;

    put(&files.cert, "this is not a certificate\n");
    // Connections go on with the old certificate while the context notices the change.
    let until = tokio::time::Instant::now() + DEADLINE;
    while server.stats().failures == 0 {
        let (_c, peer) = dial(&client, s.addr, "127.0.0.1").await.unwrap();
        assert_eq!(peer.serial(), serial_of(&old.cert_pem));
        assert!(tokio::time::Instant::now() < until, "failure never noticed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Further checks of the same broken files count nothing more.
    let checks = server.stats().checks;
    while server.stats().checks < checks + 3 {
        let (_c, peer) = dial(&client, s.addr, "127.0.0.1").await.unwrap();
        assert_eq!(peer.serial(), serial_of(&old.cert_pem));
        assert!(tokio::time::Instant::now() < until, "no further checks");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.stats().failures, 1);
    assert_eq!(server.stats().reloads, 0);
    let rendered = handle.render();
    assert!(
        rendered
            .lines()
            .any(|l| l.starts_with("shardik_tls_reload_failures_total{port=\"cluster\"} ")),
        "{rendered}"
    );

    // A key that does not belong to the certificate is a change too, and refused too.
    let other = node_cert_for(&ca, CLUSTER, "127.0.0.1");
    put(&files.cert, &old.cert_pem);
    put(&files.key, &other.key_pem);
    while server.stats().failures < 2 {
        let (_c, peer) = dial(&client, s.addr, "127.0.0.1").await.unwrap();
        assert_eq!(peer.serial(), serial_of(&old.cert_pem));
        assert!(
            tokio::time::Instant::now() < until,
            "mismatch never noticed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Fixed files are picked up.
    files.install(&other);
    dial_until_serial(&client, s.addr, &serial_of(&other.cert_pem)).await;
}

#[tokio::test]
async fn a_ca_bundle_with_old_and_new_cas_accepts_certificates_from_both() {
    let old_ca = new_ca("old");
    let new_ca_ = new_ca("new");
    let bundle = format!("{}{}", old_ca.cert_pem(), new_ca_.cert_pem());
    let dir = tempfile::tempdir().unwrap();
    let server_files = NodeFiles::write(
        dir.path(),
        "server",
        &node_cert_for(&old_ca, CLUSTER, "127.0.0.1"),
        old_ca.cert_pem(),
    );
    let server = TlsContext::new(
        &server_files.settings(Duration::from_millis(20), true),
        CLUSTER,
    )
    .unwrap();
    let old_client = NodeFiles::write(
        dir.path(),
        "old",
        &node_cert_for(&old_ca, CLUSTER, "127.0.0.1"),
        &bundle,
    )
    .context();
    let new_client = NodeFiles::write(
        dir.path(),
        "new",
        &node_cert_for(&new_ca_, CLUSTER, "127.0.0.1"),
        &bundle,
    )
    .context();
    let mut s = Server::start(server.clone()).await;

    // Before: only the old CA is trusted.
    let _ = dial(&new_client, s.addr, "127.0.0.1").await;
    assert_eq!(s.next().await.err(), Some(FailureReason::UnknownCa));

    put(&server_files.ca, &bundle);
    let until = tokio::time::Instant::now() + DEADLINE;
    loop {
        let attempt = dial(&new_client, s.addr, "127.0.0.1").await;
        let seen = s.next().await;
        if attempt.is_ok() {
            assert!(seen.is_ok());
            break;
        }
        assert_eq!(seen.err(), Some(FailureReason::UnknownCa));
        assert!(tokio::time::Instant::now() < until, "bundle never loaded");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    dial(&old_client, s.addr, "127.0.0.1")
        .await
        .expect("the old CA's certificates are still accepted");
    assert!(s.next().await.is_ok());
    assert_eq!(server.stats().reloads, 1);
}

fn start_error(files: &NodeFiles) -> TlsError {
    TlsContext::new(&files.settings(Duration::from_secs(60), true), CLUSTER).unwrap_err()
}

#[test]
fn start_up_errors_name_the_key_the_file_and_the_cause() {
    let ca = new_ca("ca");
    let dir = tempfile::tempdir().unwrap();
    let cert = node_cert_for(&ca, CLUSTER, "127.0.0.1");
    let files = NodeFiles::write(dir.path(), "n", &cert, ca.cert_pem());
    TlsContext::new(&files.settings(Duration::from_secs(60), true), CLUSTER).unwrap();

    // A missing certificate file.
    let missing = NodeFiles {
        cert: dir.path().join("nope.pem"),
        key: files.key.clone(),
        ca: files.ca.clone(),
    };
    let e = start_error(&missing);
    assert!(
        matches!(&e, TlsError::ReadFile { key: "transport.tls.cert-file", path, .. } if path.ends_with("nope.pem")),
        "{e:?}"
    );
    assert!(e.to_string().contains("nope.pem"), "{e}");

    // A key that is not the certificate's.
    put(
        &files.key,
        &node_cert_for(&ca, CLUSTER, "127.0.0.1").key_pem,
    );
    let e = start_error(&files);
    assert!(matches!(e, TlsError::KeyMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("does not belong"), "{e}");
    put(&files.key, &cert.key_pem);

    // A CA file without a certificate.
    put(&files.ca, "# nothing here\n");
    let e = start_error(&files);
    assert!(
        matches!(
            e,
            TlsError::NoCertificate {
                key: "transport.tls.ca-cert-file",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("n-ca.pem"), "{e}");
    put(&files.ca, ca.cert_pem());

    // Unparseable PEM.
    put(
        &files.cert,
        "-----BEGIN CERTIFICATE-----\n!!! not base64 !!!\n-----END CERTIFICATE-----\n",
    );
    let e = start_error(&files);
    assert!(
        matches!(
            e,
            TlsError::Pem {
                key: "transport.tls.cert-file",
                ..
            }
        ),
        "{e:?}"
    );
    put(&files.cert, &cert.cert_pem);

    // A key file without a key.
    put(&files.key, &cert.cert_pem);
    let e = start_error(&files);
    assert!(matches!(e, TlsError::NoPrivateKey { .. }), "{e:?}");
    put(&files.key, &cert.key_pem);

    // A trust domain that cannot be part of a URI.
    let mut bad = files.settings(Duration::from_secs(60), true);
    bad.trust_domain = "Not Valid".into();
    let e = TlsContext::new(&bad, CLUSTER).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::Identity {
                key: "transport.tls.trust-domain",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn tls_settings_defaults_validation_and_environment() {
    let s = Settings::reference();
    let tls = &s.transport.tls;
    assert!(!tls.enabled);
    assert!(tls.require_mutual_authentication);
    assert_eq!(tls.trust_domain, "shardik");
    assert_eq!(tls.ssl_context_cache_ttl, Duration::from_secs(60));
    assert!(TlsContext::from_settings(&s).unwrap().is_none());

    // Enabled without files: the first missing key is named.
    let e = Settings::from_toml_str("[transport.tls]\nenabled = \"on\"\n").unwrap_err();
    match &e {
        ConfigError::InvalidValue { key, expected, .. } => {
            assert_eq!(key, "transport.tls.cert-file");
            assert!(expected.contains("required when"), "{expected}");
        }
        other => panic!("{other:?}"),
    }
    let e = Settings::from_toml_str(
        "[transport.tls]\nenabled = true\ncert-file = \"a.pem\"\nkey-file = \"a-key.pem\"\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("transport.tls.ca-cert-file"), "{e}");
    let e =
        Settings::from_toml_str("[transport.tls]\ntrust-domain = \"Upper Case\"\n").unwrap_err();
    assert!(e.to_string().contains("transport.tls.trust-domain"), "{e}");
    let e =
        Settings::from_toml_str("[transport.tls]\nssl-context-cache-ttl = \"0s\"\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("transport.tls.ssl-context-cache-ttl"),
        "{e}"
    );
    let e = Settings::from_toml_str("[transport.tls]\ncert-fille = \"a\"\n").unwrap_err();
    assert!(e.to_string().contains("transport.tls.cert-file"), "{e}");

    // From the environment, as an operator of a container would set them.
    let env: Vec<(String, String)> = [
        ("SHARDIK_TRANSPORT__TLS__ENABLED", "on"),
        ("SHARDIK_TRANSPORT__TLS__CERT_FILE", "/etc/shardik/node.pem"),
        (
            "SHARDIK_TRANSPORT__TLS__KEY_FILE",
            "/etc/shardik/node-key.pem",
        ),
        (
            "SHARDIK_TRANSPORT__TLS__CA_CERT_FILE",
            "/etc/shardik/ca.pem",
        ),
        ("SHARDIK_TRANSPORT__TLS__SSL_CONTEXT_CACHE_TTL", "10s"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let s = Settings::load_with_env(None, &env).unwrap();
    assert!(s.transport.tls.enabled);
    assert_eq!(s.transport.tls.ca_cert_file, "/etc/shardik/ca.pem");
    assert_eq!(
        s.transport.tls.ssl_context_cache_ttl,
        Duration::from_secs(10)
    );
    // The files do not exist: the context says which one.
    let e = TlsContext::from_settings(&s).unwrap_err();
    assert!(e.to_string().contains("/etc/shardik/node.pem"), "{e}");
}
