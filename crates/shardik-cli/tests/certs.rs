//! `shardik certs`: the files it writes exist, parse, follow the identity rule and chain to
//! its CA (proven by a TLS handshake between two nodes using them), and a second run issues
//! from the same CA.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use shardik_runtime::config::{Settings, TlsSettings};
use shardik_runtime::tls::TlsContext;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn certs(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardik"))
        .arg("certs")
        .args(args)
        .output()
        .expect("runs")
}

fn context(dir: &Path, node: &str, cluster: &str) -> TlsContext {
    let mut settings: TlsSettings = Settings::reference().transport.tls;
    settings.enabled = true;
    settings.cert_file = dir.join(format!("{node}.pem")).display().to_string();
    settings.key_file = dir.join(format!("{node}-key.pem")).display().to_string();
    settings.ca_cert_file = dir.join("ca.pem").display().to_string();
    settings.require_mutual_authentication = true;
    settings.trust_domain = "shardik".to_string();
    settings.ssl_context_cache_ttl = Duration::from_secs(60);
    TlsContext::new(&settings, cluster).unwrap_or_else(|e| panic!("{node}: {e}"))
}

/// A mutual TLS handshake and one round trip from `client` to `server`, dialled as `host`.
async fn handshake(server: &TlsContext, client: &TlsContext, host: &str) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = server.clone();
    let accepted = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let (mut stream, peer) = server.accept(tcp).await.expect("server accepts");
        let mut buf = [0u8; 4];
        stream.read_exact(&mut buf).await.unwrap();
        stream.write_all(b"pong").await.unwrap();
        stream.flush().await.unwrap();
        peer.expect("client certificate")
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut stream, _) = client.connect(tcp, host).await.expect("client connects");
    stream.write_all(b"ping").await.unwrap();
    stream.flush().await.unwrap();
    let mut buf = [0u8; 4];
    stream.read_exact(&mut buf).await.expect("server answers");
    assert_eq!(&buf, b"pong");
    let client_cert = tokio::time::timeout(Duration::from_secs(20), accepted)
        .await
        .expect("in time")
        .unwrap();
    assert_eq!(client_cert.serial(), client.own_certificate().serial());
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn certs_writes_a_ca_and_node_files_that_chain_and_reuses_the_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tls");
    let d = dir.to_str().unwrap();

    let out = certs(&[
        "--dir",
        d,
        "--cluster-name",
        "demo",
        "--days",
        "30",
        "127.0.0.1",
        "localhost",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("made a new CA"));
    for file in [
        "ca.pem",
        "ca-key.pem",
        "127.0.0.1.pem",
        "127.0.0.1-key.pem",
        "localhost.pem",
        "localhost-key.pem",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    #[cfg(unix)]
    for key in ["ca-key.pem", "127.0.0.1-key.pem", "localhost-key.pem"] {
        assert_eq!(mode(&dir.join(key)), 0o600, "{key}");
    }

    let ip = context(&dir, "127.0.0.1", "demo");
    let name = context(&dir, "localhost", "demo");
    let ip_cert = ip.own_certificate();
    assert_eq!(ip_cert.uris(), ["spiffe://shardik/cluster/demo"]);
    assert!(ip_cert.names_host("127.0.0.1"));
    assert!(name.own_certificate().names_host("localhost"));
    let lifetime = ip_cert
        .not_after()
        .duration_since(ip_cert.not_before())
        .unwrap();
    assert!(
        lifetime > Duration::from_secs(29 * 86_400) && lifetime < Duration::from_secs(32 * 86_400)
    );
    // Both chain to the CA and carry the identity: they accept each other, both ways.
    handshake(&ip, &name, "127.0.0.1").await;
    handshake(&name, &ip, "localhost").await;
    // Another cluster's name makes a context that refuses them (wrong identity).
    let other = context(&dir, "127.0.0.1", "other");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let refusing = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        other.accept(tcp).await.err().map(|e| e.reason())
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let _ = name.connect(tcp, "127.0.0.1").await;
    assert_eq!(
        refusing.await.unwrap(),
        Some(shardik_runtime::tls::FailureReason::WrongCluster)
    );

    // A second run issues from the same CA.
    let ca_before = std::fs::read(dir.join("ca.pem")).unwrap();
    let out = certs(&["--dir", d, "--cluster-name", "demo", "127.0.0.2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("using the CA"));
    assert_eq!(std::fs::read(dir.join("ca.pem")).unwrap(), ca_before);
    let newcomer = context(&dir, "127.0.0.2", "demo");
    handshake(&ip, &newcomer, "127.0.0.1").await;
    handshake(&newcomer, &ip, "127.0.0.2").await;
}

#[test]
fn certs_refuses_bad_arguments_and_half_a_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    let out = certs(&["--dir", d, "--cluster-name", "bad name", "127.0.0.1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cluster-name"));

    let out = certs(&["--dir", d, "--cluster-name", "demo", "not a host"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a host"));

    assert!(!tmp.path().join("ca.pem").exists(), "nothing written");
    std::fs::write(tmp.path().join("ca.pem"), "x").unwrap();
    let out = certs(&["--dir", d, "--cluster-name", "demo", "127.0.0.1"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ca-key.pem"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `*.DOMAIN` makes one certificate that every pod of a Deployment can share: a node holding
/// it is accepted when dialled at any name one label below DOMAIN, and at no other.
#[tokio::test]
async fn a_wildcard_certificate_serves_every_host_of_its_domain() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    let out = certs(&["--dir", d, "--cluster-name", "shop", "*.pods.example"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shared = context(tmp.path(), "wildcard.pods.example", "shop");
    for host in ["node-0.pods.example", "node-7.pods.example"] {
        handshake(&shared, &shared, host).await;
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = shared.clone();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = server.accept(tcp).await;
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    assert!(
        shared.connect(tcp, "pods.example").await.is_err(),
        "the wildcard does not name its domain itself"
    );

    let out = certs(&["--dir", d, "--cluster-name", "shop", "*.10.0.0.1"]);
    assert!(!out.status.success(), "a wildcard never covers addresses");
    assert!(String::from_utf8_lossy(&out.stderr).contains("*.10.0.0.1"));
}
