//! The idle-close race: a connection both sides close after `idle-timeout` must never swallow
//! a message sent while it closes. Sends are spaced around the idle timeouts of both sides, for
//! many cycles, and the receiver must get every one, in order.

use std::time::Duration;

use shardik_core::membership::{Address, UniqueAddress};
use shardik_runtime::transport::{Receivers, Transport, TransportConfig};
use shardik_wire::LocalIdentity;

async fn transport(config: TransportConfig) -> (Transport, Receivers) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let identity = LocalIdentity {
        cluster_name: "idle-race".into(),
        address: UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) + 7),
    };
    Transport::start_accepting_everyone(&format!("127.0.0.1:{port}"), identity, config)
        .await
        .expect("transport starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_message_is_lost_when_an_idle_connection_closes() {
    let idle = Duration::from_millis(300);
    let config = TransportConfig {
        idle_timeout: idle,
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
