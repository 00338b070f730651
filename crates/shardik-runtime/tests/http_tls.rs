//! HTTPS on the management port (`management.http.tls.*`) as clients meet it: probes without a
//! certificate read, a client certificate from the cluster's CA authorises the state-changing
//! routes like the bearer token, certificates from another CA or cluster fail the handshake,
//! plain HTTP gets a 400, a stalled handshake is closed, the files are re-read, and unusable
//! files stop the start with the key and file named. A fake node (a snapshot of two members and
//! a command responder that counts what reaches it) stands behind the API, which is built from
//! `Settings` as `shardik node` builds it.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use shardik_runtime::config::Settings;
use shardik_runtime::http::{self, HttpLimits, ManagementApi, WriteGuard};
use shardik_runtime::metrics::HTTP_REFUSED_TOTAL;
use shardik_runtime::tls::certs::{CertificateAuthority, IssuedCert};
use shardik_runtime::tls::{PemFile, TlsContext, TlsError, https_client_config};
use shardik_runtime::{MembershipSnapshot, NodeHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};

use common::fake_node::two_up_members;
use common::pki::{new_ca, node_cert_for, put};

const CLUSTER: &str = "orders";
const TOKEN: &str = "a-test-token-0123456789";

/// Every state-changing request the API has: method, path, form body.
const WRITES: [(&str, &str, &str); 4] = [
    ("POST", "/cluster/members", "address=127.0.0.1:2551"),
    ("PUT", "/cluster/members/127.0.0.1:2552", "operation=Leave"),
    ("PUT", "/cluster/members/127.0.0.1:2552", "operation=Down"),
    ("DELETE", "/cluster/members/127.0.0.1:2552", ""),
];

/// The cluster's CA and the node's files in a temporary directory; the node certificate names
/// 127.0.0.1, where the tests connect.
struct Pki {
    ca: CertificateAuthority,
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    ca_file: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let ca = new_ca("cluster ca");
        let dir = tempfile::tempdir().unwrap();
        let node = node_cert_for(&ca, CLUSTER, "127.0.0.1");
        let (cert, key, ca_file) = (
            dir.path().join("node.pem"),
            dir.path().join("node-key.pem"),
            dir.path().join("ca.pem"),
        );
        put(&cert, &node.cert_pem);
        put(&key, &node.key_pem);
        put(&ca_file, ca.cert_pem());
        Pki {
            ca,
            dir,
            cert,
            key,
            ca_file,
        }
    }

    /// Settings with HTTPS on the management port, its files given as the transport's (which
    /// the empty `management.http.tls.*` keys stand for); TLS between nodes stays off.
    fn settings(&self, hostname: &str, read_only: bool, token: Option<&Path>) -> Settings {
        let mut s = Settings::reference();
        s.cluster.name = CLUSTER.to_string();
        s.transport.tls.cert_file = self.cert.display().to_string();
        s.transport.tls.key_file = self.key.display().to_string();
        s.transport.tls.ca_cert_file = self.ca_file.display().to_string();
        let http = &mut s.management.http;
        http.hostname = hostname.to_string();
        http.port = 0;
        http.route_providers_read_only = read_only;
        http.auth_token_file = token.map(|t| t.display().to_string()).unwrap_or_default();
        http.tls.enabled = true;
        s.validate().expect("a valid configuration");
        s
    }

    fn token_file(&self) -> PathBuf {
        let path = self.dir.path().join("token");
        std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
        path
    }
}

/// The API of `settings` served over HTTPS on `management.http.hostname`, port 0, as
/// `shardik node` serves it (guard and TLS context from the settings).
struct Served {
    port: u16,
    commands: Arc<AtomicUsize>,
    tls: TlsContext,
    _shutdown: oneshot::Sender<()>,
    _snapshot: watch::Sender<Arc<MembershipSnapshot>>,
}

async fn serve(settings: &Settings, limits: HttpLimits) -> Served {
    let (snap_tx, snap_rx) = watch::channel(Arc::new(two_up_members()));
    let (cmd_tx, commands) = common::fake_node::accepting_control();
    let guard = WriteGuard::from_settings(&settings.management.http).unwrap();
    let tls = TlsContext::for_management(settings)
        .unwrap()
        .expect("management.http.tls.enabled is on");
    let router = ManagementApi::new(NodeHandle::new(snap_rx, cmd_tx))
        .settings(settings)
        .write_guard(guard)
        .metrics(Some(common::metrics()))
        .router();
    let listener = tokio::net::TcpListener::bind(settings.management.http.bind_address())
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    tokio::spawn(http::serve_https(
        listener,
        router,
        limits,
        tls.clone(),
        async {
            let _ = shutdown_rx.await;
        },
    ));
    Served {
        port,
        commands,
        tls,
        _shutdown: shutdown_tx,
        _snapshot: snap_tx,
    }
}

/// An HTTPS client that trusts `ca_pem` and presents `identity` if given (reqwest's own
/// rustls setup, independent of ours).
fn client(ca_pem: &str, identity: Option<&IssuedCert>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .timeout(Duration::from_secs(10));
    if let Some(id) = identity {
        let pem = format!("{}{}", id.cert_pem, id.key_pem);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

impl Served {
    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    async fn send(
        &self,
        client: &reqwest::Client,
        (method, path, body): (&str, &str, &str),
        token: Option<&str>,
    ) -> Result<(StatusCode, reqwest::header::HeaderMap, Value), reqwest::Error> {
        let mut request = client
            .request(method.parse().unwrap(), self.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_string());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await?;
        let status = r.status();
        let headers = r.headers().clone();
        Ok((status, headers, r.json().await?))
    }

    async fn get(&self, client: &reqwest::Client, path: &str) -> StatusCode {
        client.get(self.url(path)).send().await.unwrap().status()
    }

    fn commands(&self) -> usize {
        self.commands.load(Ordering::SeqCst)
    }
}

fn refused(reason: &str) -> f64 {
    common::counter(
        &common::metrics(),
        HTTP_REFUSED_TOTAL,
        &format!("reason=\"{reason}\""),
    )
}

/// Waits until `shardik_http_refused_total{reason}` is above `before` (the server counts a
/// failed handshake in its own task, possibly after the client has seen the failure).
async fn refused_more_than(reason: &str, before: f64) {
    common::eventually(&format!("a refusal counted as {reason}"), || {
        refused(reason) > before
    })
    .await;
}

fn message(v: &Value) -> &str {
    v["message"].as_str().expect("error bodies have a message")
}

/// Reads until the server closes the connection (or resets it), at most 30 s.
async fn read_until_closed(conn: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Err(_) => panic!(
                "the server did not close the connection within 30 s; read so far: {}",
                String::from_utf8_lossy(&out)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&out).into_owned(),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn probes_without_a_certificate_read_and_plain_http_is_told_to_use_https() {
    let pki = Pki::new();
    let s = serve(
        &pki.settings("127.0.0.1", true, None),
        HttpLimits::default(),
    )
    .await;
    let probe = client(pki.ca.cert_pem(), None);
    for path in ["/alive", "/ready", "/metrics", "/cluster/members"] {
        assert_eq!(s.get(&probe, path).await, StatusCode::OK, "{path}");
    }

    let before = refused("tls-not-tls");
    let mut plain = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    plain
        .write_all(b"GET /alive HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut plain).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("https://"), "{answer}");
    assert!(answer.contains("management.http.tls.enabled"), "{answer}");
    refused_more_than("tls-not-tls", before).await;

    // The port serves on, and TLS 1.2 clients are served too.
    assert_eq!(s.get(&probe, "/alive").await, StatusCode::OK);
    let tls12 = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS12])
    .unwrap()
    .with_root_certificates({
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        roots
            .add(
                rustls::pki_types::CertificateDer::from_pem_slice(pki.ca.cert_pem().as_bytes())
                    .unwrap(),
            )
            .unwrap();
        roots
    })
    .with_no_client_auth();
    let tcp = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    let mut conn = tokio_rustls::TlsConnector::from(Arc::new(tls12))
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await
        .expect("a TLS 1.2 handshake");
    assert_eq!(
        conn.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    conn.write_all(b"GET /alive HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn beyond_loopback_a_client_certificate_from_the_cluster_ca_authorises_writes() {
    let pki = Pki::new();
    // Writes enabled on an address other hosts reach, with no token: the configuration is
    // accepted because client certificates guard the writes.
    let s = serve(&pki.settings("0.0.0.0", false, None), HttpLimits::default()).await;
    let probe = client(pki.ca.cert_pem(), None);

    let before = refused("no-client-certificate");
    for write in WRITES {
        let (status, _, v) = s.send(&probe, write, None).await.unwrap();
        assert_eq!(status, StatusCode::FORBIDDEN, "{write:?}: {v}");
        assert!(message(&v).contains("client certificate"), "{v}");
        // A token is no credential where none is configured.
        let (status, _, _) = s.send(&probe, write, Some(TOKEN)).await.unwrap();
        assert_eq!(status, StatusCode::FORBIDDEN, "{write:?}");
    }
    assert_eq!(s.commands(), 0, "nothing reached the node");
    assert!(refused("no-client-certificate") >= before + 8.0);

    // A certificate of the cluster (an operator's, issued like a node's by `shardik certs`).
    let operator = client(
        pki.ca.cert_pem(),
        Some(&node_cert_for(&pki.ca, CLUSTER, "operator")),
    );
    for write in WRITES {
        let (status, _, v) = s.send(&operator, write, None).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{write:?}: {v}");
    }
    assert_eq!(s.commands(), WRITES.len());

    // The CLI's client configuration (our PEM loading), with the node's own files.
    let ours = https_client_config(
        &PemFile::new("--management-ca", &pki.ca_file),
        Some((
            &PemFile::new("--management-cert", &pki.cert),
            &PemFile::new("--management-key", &pki.key),
        )),
    )
    .unwrap();
    let ours = reqwest::Client::builder()
        .no_proxy()
        .use_preconfigured_tls(ours)
        .build()
        .unwrap();
    let (status, _, v) = s.send(&ours, WRITES[1], None).await.unwrap();
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(s.commands(), WRITES.len() + 1);

    // Certificates from another CA, or from ours for another cluster, fail the handshake:
    // nothing reaches the node, and the refusals are counted by reason.
    let other_ca = new_ca("other ca");
    for (cert, reason) in [
        (
            node_cert_for(&other_ca, CLUSTER, "operator"),
            "tls-unknown-ca",
        ),
        (
            node_cert_for(&pki.ca, "billing", "operator"),
            "tls-wrong-cluster",
        ),
    ] {
        let before = refused(reason);
        let stranger = client(pki.ca.cert_pem(), Some(&cert));
        for write in WRITES {
            let result = s.send(&stranger, write, None).await;
            assert!(result.is_err(), "{reason} {write:?}: {result:?}");
        }
        assert!(stranger.get(s.url("/alive")).send().await.is_err());
        refused_more_than(reason, before).await;
    }
    assert_eq!(
        s.commands(),
        WRITES.len() + 1,
        "no stranger's write arrived"
    );
    assert_eq!(s.get(&probe, "/cluster/members").await, StatusCode::OK);
}

#[tokio::test]
async fn with_a_token_too_either_credential_authorises_writes() {
    let pki = Pki::new();
    let token = pki.token_file();
    let s = serve(
        &pki.settings("0.0.0.0", false, Some(&token)),
        HttpLimits::default(),
    )
    .await;
    let probe = client(pki.ca.cert_pem(), None);
    let (status, headers, v) = s.send(&probe, WRITES[2], None).await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
    assert!(headers.contains_key("www-authenticate"));
    assert!(message(&v).contains("client certificate"), "{v}");
    assert!(message(&v).contains("Bearer"), "{v}");
    let (status, _, _) = s
        .send(&probe, WRITES[2], Some("a-wrong-token-0123456789"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(s.commands(), 0);

    let (status, _, v) = s.send(&probe, WRITES[2], Some(TOKEN)).await.unwrap();
    assert_eq!(status, StatusCode::OK, "token: {v}");
    let operator = client(
        pki.ca.cert_pem(),
        Some(&node_cert_for(&pki.ca, CLUSTER, "operator")),
    );
    let (status, _, v) = s.send(&operator, WRITES[2], None).await.unwrap();
    assert_eq!(status, StatusCode::OK, "certificate: {v}");
    assert_eq!(s.commands(), 2);
}

#[tokio::test]
async fn a_certificate_does_not_lift_route_providers_read_only() {
    let pki = Pki::new();
    let s = serve(&pki.settings("0.0.0.0", true, None), HttpLimits::default()).await;
    let operator = client(
        pki.ca.cert_pem(),
        Some(&node_cert_for(&pki.ca, CLUSTER, "operator")),
    );
    for write in WRITES {
        let (status, _, v) = s.send(&operator, write, None).await.unwrap();
        assert_eq!(status, StatusCode::FORBIDDEN, "{write:?}: {v}");
        assert!(
            message(&v).contains("management.http.route-providers-read-only"),
            "{v}"
        );
    }
    assert_eq!(s.commands(), 0);
    assert_eq!(s.get(&operator, "/cluster/members").await, StatusCode::OK);
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_closed_within_the_head_timeout() {
    let pki = Pki::new();
    let limits = HttpLimits {
        header_read_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    };
    let s = serve(&pki.settings("127.0.0.1", true, None), limits).await;
    let before = refused("header-timeout");
    // The start of a TLS record, then nothing.
    let mut stalled = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    assert_eq!(read_until_closed(&mut stalled).await, "");
    // Nothing at all.
    let mut silent = TcpStream::connect(("127.0.0.1", s.port)).await.unwrap();
    assert_eq!(read_until_closed(&mut silent).await, "");
    refused_more_than("header-timeout", before + 1.0).await;
    let probe = client(pki.ca.cert_pem(), None);
    assert_eq!(s.get(&probe, "/alive").await, StatusCode::OK);
}

/// A TLS 1.3 connection to the management port at `port`, trusting `ca_pem`, without a client
/// certificate (rustls directly, not reqwest: the test writes the request by hand).
async fn tls_connect(port: u16, ca_pem: &str) -> tokio_rustls::client::TlsStream<TcpStream> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await
        .expect("a TLS handshake")
}

#[tokio::test]
async fn beyond_the_cap_https_probes_are_answered_and_other_requests_refused_at_once() {
    const CAP: usize = 2;
    let pki = Pki::new();
    let limits = HttpLimits {
        max_connections: CAP,
        // Nothing here is closed by a timeout within the test.
        header_read_timeout: Duration::from_secs(120),
        health_check_head_timeout: Duration::from_secs(120),
        ..HttpLimits::default()
    };
    let s = serve(&pki.settings("127.0.0.1", true, None), limits).await;
    // Strangers that say nothing hold every ordinary slot and, twice over, the reserve's
    // places (in its TLS handshake a connection is waiting too).
    let mut strangers = Vec::new();
    for _ in 0..CAP + 2 * http::HEALTH_CHECK_RESERVE {
        strangers.push(TcpStream::connect(("127.0.0.1", s.port)).await.unwrap());
    }
    // Past its handshake, a request that starts as anything but a health check is answered
    // 503 at its first bytes, without the rest of its head.
    let mut half_sent = tls_connect(s.port, pki.ca.cert_pem()).await;
    half_sent
        .write_all(b"GET /cluster/members HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(30),
        half_sent.read_to_string(&mut answer),
    )
    .await
    .expect("answered before the head timeout");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("management.http.max-connections"),
        "{answer}"
    );
    // A probe pushes the oldest stranger out and is answered.
    let probe = client(pki.ca.cert_pem(), None);
    for path in ["/alive", "/ready"] {
        assert_eq!(s.get(&probe, path).await, StatusCode::OK, "{path}");
    }
    drop(strangers);
}

/// The serial of the certificate the server presents on a new connection.
async fn served_serial(port: u16, ca_file: &Path) -> Vec<u8> {
    let config = https_client_config(&PemFile::new("ca", ca_file), None).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let conn = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let der = conn.get_ref().1.peer_certificates().unwrap()[0].clone();
    shardik_runtime::tls::PeerCertificate::from_der(der)
        .unwrap()
        .serial()
        .to_vec()
}

#[tokio::test]
async fn the_management_port_rereads_its_files() {
    let pki = Pki::new();
    let mut settings = pki.settings("127.0.0.1", true, None);
    settings.transport.tls.ssl_context_cache_ttl = Duration::from_millis(20);
    let s = serve(&settings, HttpLimits::default()).await;
    let first = served_serial(s.port, &pki.ca_file).await;

    let renewed = node_cert_for(&pki.ca, CLUSTER, "127.0.0.1");
    put(&pki.key, &renewed.key_pem);
    put(&pki.cert, &renewed.cert_pem);
    let deadline = tokio::time::Instant::now() + common::BOUND;
    loop {
        let serial = served_serial(s.port, &pki.ca_file).await;
        if serial != first {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never reloaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.tls.stats().reloads, 1);
    assert!(
        common::counter(
            &common::metrics(),
            shardik_runtime::metrics::TLS_RELOADS_TOTAL,
            "port=\"management\""
        ) >= 1.0
    );
}

#[test]
fn unusable_files_stop_the_start_naming_the_key_and_the_file() {
    let pki = Pki::new();
    let base = pki.settings("127.0.0.1", true, None);
    TlsContext::for_management(&base).unwrap().expect("enabled");
    let mut off = base.clone();
    off.management.http.tls.enabled = false;
    assert!(TlsContext::for_management(&off).unwrap().is_none());

    // A missing file of its own is named by its own key...
    let mut own = base.clone();
    own.management.http.tls.cert_file = pki.dir.path().join("nope.pem").display().to_string();
    let e = TlsContext::for_management(&own).unwrap_err();
    assert!(
        matches!(&e, TlsError::ReadFile { key: "management.http.tls.cert-file", path, .. } if path.ends_with("nope.pem")),
        "{e:?}"
    );
    assert!(e.to_string().contains("nope.pem"), "{e}");

    // ...and a transport file it falls back to by the transport's key.
    let mut fallback = base.clone();
    fallback.transport.tls.key_file = pki.dir.path().join("gone.pem").display().to_string();
    let e = TlsContext::for_management(&fallback).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::ReadFile {
                key: "transport.tls.key-file",
                ..
            }
        ),
        "{e:?}"
    );

    // A key that is not the certificate's.
    let other_key = pki.dir.path().join("other-key.pem");
    put(
        &other_key,
        &node_cert_for(&pki.ca, CLUSTER, "127.0.0.1").key_pem,
    );
    let mut mismatch = base.clone();
    mismatch.management.http.tls.key_file = other_key.display().to_string();
    let e = TlsContext::for_management(&mismatch).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::KeyMismatch {
                key_key: "management.http.tls.key-file",
                cert_key: "transport.tls.cert-file",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("management.http.tls.key-file")
            && e.to_string().contains("does not belong"),
        "{e}"
    );

    // A CA file without a certificate.
    let empty_ca = pki.dir.path().join("empty-ca.pem");
    put(&empty_ca, "# nothing here\n");
    let mut no_ca = base.clone();
    no_ca.management.http.tls.ca_cert_file = empty_ca.display().to_string();
    let e = TlsContext::for_management(&no_ca).unwrap_err();
    assert!(
        matches!(
            e,
            TlsError::NoCertificate {
                key: "management.http.tls.ca-cert-file",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("empty-ca.pem"), "{e}");
}
