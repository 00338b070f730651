//! The idle-close race: a connection both sides close after `idle-timeout` must never swallow
//! a message sent while it closes. Sends are spaced around the idle timeouts of both sides, for
//! many cycles, and the receiver must get every one, in order; over plain TCP and over TLS
//! (where both sides also exchange `close_notify`).

use std::time::Duration;

use shardik_core::membership::{Address, UniqueAddress};
use shardik_runtime::config::Settings;
use shardik_runtime::tls::TlsContext;
use shardik_runtime::tls::certs::{CertificateAuthority, NodeCertRequest, Validity};
use shardik_runtime::transport::{Receivers, Transport, TransportConfig};
use shardik_wire::LocalIdentity;

const CLUSTER: &str = "idle-race";

async fn transport(config: TransportConfig) -> (Transport, Receivers) {
    let port = shardik_runtime::testkit::free_port().expect("a free loopback port");
    let identity = LocalIdentity {
        cluster_name: CLUSTER.into(),
        address: UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) + 7),
    };
    Transport::start_accepting_everyone(&format!("127.0.0.1:{port}"), identity, config)
        .await
        .expect("transport starts")
}

/// A TLS context for a node at 127.0.0.1 of [`CLUSTER`], its files in `dir`.
fn tls_context(dir: &std::path::Path) -> TlsContext {
    let ca = CertificateAuthority::generate("idle ca", Validity::days_from_now(1)).unwrap();
    let node = ca
        .issue(&NodeCertRequest::for_node(
            "shardik",
            CLUSTER,
            "127.0.0.1",
            1,
        ))
        .unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    std::fs::write(path("node.pem"), &node.cert_pem).unwrap();
    std::fs::write(path("node-key.pem"), &node.key_pem).unwrap();
    std::fs::write(path("ca.pem"), ca.cert_pem()).unwrap();
    let mut settings = Settings::reference().transport.tls;
    settings.enabled = true;
    settings.cert_file = path("node.pem");
    settings.key_file = path("node-key.pem");
    settings.ca_cert_file = path("ca.pem");
    settings.require_mutual_authentication = true;
    settings.trust_domain = "shardik".to_string();
    settings.ssl_context_cache_ttl = Duration::from_secs(3600);
    TlsContext::new(&settings, CLUSTER).expect("usable TLS files")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_message_is_lost_when_an_idle_connection_closes() {
    idle_cycles(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_message_is_lost_when_an_idle_tls_connection_closes() {
    let dir = tempfile::tempdir().unwrap();
    idle_cycles(Some(tls_context(dir.path()))).await;
}

/// Messages spaced around the idle timeouts of both sides, over TLS with `tls`: every one
/// arrives, in order.
async fn idle_cycles(tls: Option<TlsContext>) {
    let idle = Duration::from_millis(300);
    let config = TransportConfig {
        idle_timeout: idle,
        tls,
        ..TransportConfig::default()
    };
    let (a, _a_rx) = transport(config.clone()).await;
    let (b, mut b_rx) = transport(config).await;
    let to = b.identity().address.clone();
    let sender = a.user_sender();
    // Gaps just under, around and well past the idle timeout of the sending side, and around
    // twice it, where the receiving side may close too.
    let gaps_per_mille = [800u64, 950, 1050, 1150, 1300, 1600, 1900, 2100];
    const CYCLES: u32 = 4;
    let mut sent = 0u32;
    for _ in 0..CYCLES {
        for gap in gaps_per_mille {
            // The spacing is the scenario (a sender that comes back after this long), not a
            // wait for an outcome.
            tokio::time::sleep(idle * gap as u32 / 1000).await;
            assert!(
                sender
                    .send(&to, bytes::Bytes::from(sent.to_be_bytes().to_vec()))
                    .await,
                "the lane takes message {sent}"
            );
            sent += 1;
        }
    }
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < sent as usize {
        match tokio::time::timeout_at(deadline, b_rx.user.recv()).await {
            Ok(Some(m)) => {
                got.push(u32::from_be_bytes(m.payload[..4].try_into().unwrap()));
            }
            Ok(None) => panic!("the receiver's queue closed"),
            Err(_) => break,
        }
    }
    let expected: Vec<u32> = (0..sent).collect();
    assert_eq!(
        got,
        expected,
        "every message sent around the idle close arrives, in order ({} of {sent})",
        got.len()
    );
}
