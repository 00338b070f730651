//! What fences cost a batch append: the same batches with and without a fence, on one store.
//!
//! ```text
//! cargo run --release -p shardik-persistence --example fence_overhead -- STORE_URL [BATCHES]
//! ```
//!
//! Each batch holds 256 writes of one event each (64-byte payloads, one journal per write),
//! as the node's journal writer sends them; fenced, the writes carry tokens of 16 scopes
//! (16 shards' leases). Runs alternate, unfenced then fenced, three times, and each prints its
//! mean time per batch and writes per second.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use shardik_persistence::{AtomicWrite, Fence, NewEvent, Store, open_store};

const WRITES: usize = 256;
const SCOPES: usize = 16;

fn batch(run: &str, seq: u64, fenced: bool) -> Vec<AtomicWrite> {
    (0..WRITES)
        .map(|i| AtomicWrite {
            persistence_id: format!("{run}|{i}").into(),
            events: vec![NewEvent {
                seq,
                payload: Bytes::from(vec![7u8; 64]),
                manifest: "".into(),
                tags: vec![],
            }],
            fence: fenced.then(|| Fence::new(format!("{run}|{}", i % SCOPES), 1)),
            marks: Vec::new(),
        })
        .collect()
}

async fn measure(store: &dyn Store, run: &str, batches: u64, fenced: bool) -> f64 {
    let started = Instant::now();
    for seq in 1..=batches {
        let answers = store.append(batch(run, seq, fenced)).await.expect("append");
        assert!(answers.iter().all(|a| a.is_ok()), "{answers:?}");
    }
    started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .expect("usage: fence_overhead STORE_URL [BATCHES]");
    let batches: u64 = args
        .next()
        .map_or(200, |b| b.parse().expect("BATCHES is a number"));
    let store: Arc<dyn Store> = open_store(&url).await.expect("the store opens");
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    for round in 0..3 {
        for fenced in [false, true] {
            let run = format!("fo-{stamp}-{round}-{fenced}");
            let secs = measure(&*store, &run, batches, fenced).await;
            println!(
                "{:8} round {round}: {:7.2} ms per batch of {WRITES}, {:9.0} writes/s",
                if fenced { "fenced" } else { "unfenced" },
                secs * 1000.0 / batches as f64,
                (batches as usize * WRITES) as f64 / secs
            );
        }
    }
    store.close().await.expect("close");
}
