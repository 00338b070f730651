//! A member whose process is gone refuses connections on its port, and the survivors take the
//! refusal as evidence: the member is unreachable at once, not after the failure detector's
//! silence. Here the detector tolerates a minute without heartbeats, so only the refusal can
//! have marked the crashed node unreachable within the test's bound.

mod common;

use std::time::Duration;

use common::{fast_membership, free_port};
use shardik_core::membership::{Address, ClusterEvent, MembershipConfig};
use shardik_runtime::node::{self, NodeOptions, RunningNode, StopRequest};

/// Membership whose failure detector would wait a minute before it marks a silent node.
fn patient_membership() -> MembershipConfig {
    let mut m = fast_membership("refused", &[]);
    m.failure_detector.phi.acceptable_heartbeat_pause = Duration::from_secs(60);
    m
}

async fn start(port: u16, seed: u16) -> RunningNode {
    node::start(NodeOptions {
        bind: Address::new("127.0.0.1", port),
        advertise: None,
        seeds: vec![Address::new("127.0.0.1", seed)],
        membership: patient_membership(),
        transport: shardik_runtime::transport::TransportConfig::default(),
        leave_timeout: Duration::from_secs(10),
    })
    .await
    .expect("node starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_members_refused_port_marks_it_unreachable_long_before_the_detector_would() {
    let (pa, pb) = (free_port(), free_port());
    let a = start(pa, pa).await;
    let b = start(pb, pa).await;
    common::wait_up(&[&a, &b], 2).await;
    let b_node = b.self_node.clone();
    let mut events = a.handle.subscribe();

    // b stops as a crash would: no leave; its port closes with it.
    let _ = b.stop.send(StopRequest::Now).await;
    let _ = b.finished.await;
    let marked = async {
        loop {
            match events.recv().await {
                Ok(ClusterEvent::UnreachableMember(m)) if m.addr == b_node => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("events ended: {e}"),
            }
        }
    };
    // The detector alone would take more than 60 s; heartbeats go every second, and the first
    // one after the crash finds the port closed.
    tokio::time::timeout(Duration::from_secs(20), marked)
        .await
        .expect("b is unreachable from a within 20 s of its crash");
    let _ = a.stop.send(StopRequest::Now).await;
}
