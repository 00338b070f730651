//! Prints (does not assert) encoded gossip sizes, to compare with the simulator's size model
//! (`shardik-sim/src/wire_size.rs`). Run with `--nocapture` to see them.

mod common;

use std::sync::Arc;

use common::*;
use shardik_core::membership::Message;
use shardik_wire::*;

#[test]
fn size_report() {
    for n in [5u16, 100, 1000] {
        let g = converged_gossip(n);
        let raw = encode_gossip(&g).len();
        let gz = encode_gossip_compressed(&g).len();
        let envelope = encode_message(&Message::GossipEnvelope {
            from: node(0),
            to: node(1),
            gossip: Arc::new(g.clone()),
        })
        .len();
        let status = encode_message(&Message::GossipStatus {
            from: node(0),
            version: g.version.clone(),
            seen_digest: g.seen_digest(),
        })
        .len();
        println!(
            "{n:>5}-node converged gossip: raw {raw} B ({:.1} B/node), gzip {gz} B ({:.1} B/node), \
             GossipEnvelope {envelope} B, GossipStatus {status} B",
            raw as f64 / f64::from(n),
            gz as f64 / f64::from(n)
        );
    }
    let hb = encode_message(&Message::Heartbeat {
        from: node(3),
        seq: 1234,
    })
    .len();
    println!("heartbeat: {hb} B (+5 B frame header)");
}
