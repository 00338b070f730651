//! `shardik bench sharding cores --remote`: the same CPU-bound entities, asked from another
//! process.
//!
//! The entities run in a peer process (the hidden `shardik bench-cores-peer`), on a runtime of
//! the worker count being measured; this process runs a node without the host role, so it
//! reaches them through a proxy over loopback TCP, and keeps `--in-flight` asks outstanding,
//! each asked again as soon as it is answered. Every command burns `--work-us` in its handler
//! and is answered after. What is counted is answers per second, against the same plain-task
//! ceiling as the local measurement.
//!
//! Both processes share the machine: the asking side's own work (encoding, the sockets,
//! decoding the answers) takes CPU the entities' node does not get. The figure is what a
//! cluster of one host and one client on the same machine does, not the host alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde::{Deserialize, Serialize};
use shardik_core::membership::Address;
use shardik_runtime::sharding::{Entity, EntityContext, EntityKind, EntityRef, ReplyTo};

use super::common::{ASK_TIMEOUT, HOST_ROLE};
use super::cores_work::{burn, count_over};
use super::nodes::BenchNode;
use crate::bench_support::{Peer, exit_with_parent, free_port};

/// The kind the peer hosts.
const REMOTE_CORES_KIND: &str = "bench-cores-remote";

/// Burn, then answer.
#[derive(Serialize, Deserialize)]
pub(super) struct Burn(ReplyTo<()>);

/// An entity whose every command burns the same CPU time, then answers.
struct AskedBurner {
    work: Duration,
}

impl Entity for AskedBurner {
    type Command = Burn;

    async fn handle(&mut self, Burn(reply_to): Burn, _ctx: &mut EntityContext<Self>) {
        burn(self.work);
        reply_to.send(());
    }
}

/// The kind on either side: `work` is what the host's entities burn (the proxy runs none).
fn burner_kind(work: Duration) -> EntityKind<AskedBurner> {
    EntityKind::new(REMOTE_CORES_KIND, move |_| AskedBurner { work })
        .with_role(HOST_ROLE)
        .with_idle_timeout(None)
}

/// What the asking side measured.
pub(super) struct RemoteRate {
    /// Answers per second.
    pub answered_per_s: f64,
    /// Asks that failed (timed out or were refused) during the whole run.
    pub failed: u64,
}

/// Answers per second from `entities` entities on a peer of `workers` worker threads, with
/// `in_flight` asks outstanding from this process.
pub(super) async fn remote_rate(
    workers: usize,
    work_us: u64,
    entities: u64,
    in_flight: usize,
    window: Duration,
) -> anyhow::Result<RemoteRate> {
    let peer_args = [
        "--workers".to_string(),
        workers.to_string(),
        "--work-us".to_string(),
        work_us.to_string(),
    ];
    let peer_args: Vec<&str> = peer_args.iter().map(String::as_str).collect();
    let peer = Peer::start("bench-cores-peer", &peer_args).await?;
    let bind = Address::new("127.0.0.1", free_port()?);
    let node = BenchNode::start_at(bind, vec![peer.addr.clone()], &[], None).await?;
    node.wait_up(2).await?;
    let region = node.sharding.init(burner_kind(Duration::ZERO))?;
    let refs: Arc<[EntityRef<AskedBurner>]> = (0..entities)
        .map(|i| region.entity_ref(&format!("e{i}")))
        .collect();
    // Every entity once, answered: created on the peer, and its shard's home known here.
    for r in refs.iter() {
        r.ask(Burn, ASK_TIMEOUT)
            .await
            .with_context(|| format!("activating {}", r.entity_id()))?;
    }
    let answered = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut askers = Vec::with_capacity(in_flight);
    for slot in 0..in_flight {
        let (refs, answered, failed, stop) = (
            Arc::clone(&refs),
            Arc::clone(&answered),
            Arc::clone(&failed),
            Arc::clone(&stop),
        );
        askers.push(tokio::spawn(async move {
            let n = refs.len();
            // Each slot starts at another entity and steps by the number of slots, so that
            // no two slots ask the same entity at once unless there are more slots than
            // entities.
            let mut i = slot % n;
            while !stop.load(Ordering::Relaxed) {
                match refs[i].ask(Burn, ASK_TIMEOUT).await {
                    Ok(()) => answered.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
                i = (i + in_flight) % n;
            }
        }));
    }
    let rate = count_over(&answered, window).await;
    stop.store(true, Ordering::Relaxed);
    for a in askers {
        a.await.context("an asking task failed")?;
    }
    node.crash().await;
    node.stopped(Duration::from_secs(10)).await?;
    drop(peer);
    Ok(RemoteRate {
        answered_per_s: rate,
        failed: failed.load(Ordering::Relaxed),
    })
}

/// Arguments of the hidden `shardik bench-cores-peer`.
#[derive(Args, Debug)]
pub struct CoresPeerArgs {
    /// HOST:PORT of the peer's node.
    #[arg(long)]
    bind: Address,
    /// Worker threads of the peer's runtime.
    #[arg(long)]
    workers: usize,
    /// CPU time each command burns in its handler, in microseconds.
    #[arg(long = "work-us")]
    work_us: u64,
}

/// Runs the hidden `shardik bench-cores-peer`: hosts the CPU-bound entities until the parent
/// goes away.
pub fn run_peer(args: CoresPeerArgs) -> anyhow::Result<std::process::ExitCode> {
    exit_with_parent();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.max(1))
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let node = BenchNode::start_at(args.bind.clone(), Vec::new(), &[HOST_ROLE], None).await?;
        node.wait_up(1).await?;
        let _region = node
            .sharding
            .init(burner_kind(Duration::from_micros(args.work_us)))?;
        println!("READY");
        // Serve until the parent goes away (exit_with_parent ends the process).
        std::future::pending::<anyhow::Result<std::process::ExitCode>>().await
    })
}
