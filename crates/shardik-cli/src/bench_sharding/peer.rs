//! The hidden `shardik bench-sharding-peer`: the process that hosts the remote benchmarks'
//! entities and reports on its stdout when they have handled what they were sent.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use shardik_core::membership::Address;

use super::common::{FIRST_KIND, HOST_ROLE, REMOTE_KIND, REMOTE_SYNC_KIND};
use super::nodes::BenchNode;
use super::tally::{Progress, sync_tally_kind, tally_kind};
use super::turns;
use crate::bench_support::{exit_with_parent, runtime};
use crate::bench_tls::BenchCerts;

/// Arguments of the hidden `shardik bench-sharding-peer`.
#[derive(Args, Debug)]
pub struct PeerArgs {
    /// HOST:PORT of the peer's node.
    #[arg(long)]
    bind: Address,
    /// Tells to count before reporting `DONE` (0: never report).
    #[arg(long)]
    expect: u64,
    /// Mutual TLS with the certificates the benchmark made in this directory (plain TCP
    /// without).
    #[arg(long)]
    tls_dir: Option<PathBuf>,
    /// After the tells of `--expect`, report every this many tells of the turn kind (0: host
    /// no turn kind).
    #[arg(long, default_value_t = 0)]
    turn_tells: u64,
}

/// Runs the hidden `shardik bench-sharding-peer`.
pub fn run_peer(args: PeerArgs) -> anyhow::Result<ExitCode> {
    exit_with_parent();
    runtime()?.block_on(async move {
        let certs = args.tls_dir.as_deref().map(BenchCerts::in_dir);
        let node = BenchNode::start_at(args.bind.clone(), Vec::new(), &[HOST_ROLE], certs.as_ref())
            .await?;
        node.wait_up(1).await?;
        let progress = Progress::new(args.expect);
        let sync_progress = Progress::new(args.expect);
        // The regions are kept: the peer serves remote traffic only, but a kind whose local
        // handles are all gone is not what a node normally runs.
        let _remote =
            node.init(tally_kind(REMOTE_KIND, Arc::clone(&progress)).with_role(HOST_ROLE))?;
        let _sync = node.sharding.init(
            sync_tally_kind(REMOTE_SYNC_KIND, Arc::clone(&sync_progress)).with_role(HOST_ROLE),
        )?;
        let _first = node.init(tally_kind(FIRST_KIND, ()).with_role(HOST_ROLE))?;
        let turns = (args.turn_tells > 0).then(|| turns::Turns::new(args.turn_tells));
        let _turns = match &turns {
            Some(t) => {
                Some(node.init(tally_kind(turns::TURN_KIND, Arc::clone(t)).with_role(HOST_ROLE))?)
            }
            None => None,
        };
        println!("READY");
        if args.expect > 0 {
            // The benchmark tells the async kind first, then the sync one.
            for progress in [progress, sync_progress] {
                let last = progress.wait(Duration::MAX).await?;
                let first = progress.first_ns.load(Ordering::Relaxed);
                println!("DONE {} {first} {last}", args.expect);
            }
        }
        if let Some(turns) = turns {
            // Then the turns, for as long as the benchmark sends them (the first time is the
            // benchmark's own).
            for turn in 1.. {
                let last = turns.wait(turn).await;
                println!("DONE {} 0 {last}", turns.per_turn());
            }
        }
        // Serve until the parent goes away (exit_with_parent ends the process).
        std::future::pending::<anyhow::Result<ExitCode>>().await
    })
}
