//! `shardik bench sharding`: measurements of cluster sharding on real nodes.
//!
//! - `local`: `tell` throughput to already-active entities on a single-node cluster, against
//!   a raw tokio baseline doing the same work (a bounded channel into one task that looks the
//!   entity up in a `HashMap` and increments it).
//! - `remote`: from a node that runs only a proxy to a second process that hosts the
//!   entities, so every message crosses loopback TCP: one-way `tell` throughput (to an async
//!   entity, then to the same entity as a
//!   [`SyncEntity`](shardik_runtime::sharding::SyncEntity)), `ask` in a closed loop with one
//!   and with 64 requests in flight (one task per in-flight request, each asking again once
//!   answered), and `ask` at a fixed rate (open loop). Each runs beside a
//!   raw TCP baseline in the same run ([`crate::bench_raw`], against the raw
//!   `bench-peer`): the same operation, the same number in flight, with frames of exactly the
//!   sizes sharding sends ([`crate::bench_frames`]), and the ratios. `--only` picks parts;
//!   `handshake` (not run by default) times fresh connections to the peer's node
//!   ([`crate::bench_handshake`]). `--transport tls` runs it all over mutual TLS, `both` over
//!   plain TCP and then TLS in the same run, with the ratios TLS/plain
//!   ([`crate::bench_transports`]).
//! - `memory`: resident memory per idle entity (u64 state, passivation off) and the rate at
//!   which entities are created in shards that already run.
//! - `first-message`: latency of the first message to an entity whose shard is not allocated
//!   yet (a coordinator round trip), against the second message to the same entity.
//!
//! Every benchmark prints one human-readable line (`remote`: one per part), or one JSON object
//! with `--json`. Nodes use the built-in configuration of `shardik node` (with `SHARDIK_…`
//! environment overrides; `remote` and `first-message --remote` set `transport.tls`
//! themselves) and, like it, record metrics into the Prometheus recorder.
//!
//! The remote peer is `shardik bench-sharding-peer` (hidden). It hosts the entities (it alone
//! has the role [`HOST_ROLE`]) and reports on its stdout, one line each: `READY` once its node
//! is Up, and `DONE <count> <first-unix-ns> <last-unix-ns>` once its entities have handled the
//! expected number of tells: first those of the async kind, then those of the sync kind.
//!
//! This file holds the command and its dispatch; each benchmark has a file of its own beside it
//! in `bench_sharding/` (`local.rs`, `remote.rs` with `turns.rs`, `memory.rs`,
//! `first_message.rs`, `cores.rs` with `cores_remote.rs`), as have the remote peer (`peer.rs`)
//! and what they share: names and options (`common.rs`), the entity (`tally.rs`), nodes
//! (`nodes.rs`), driving entities (`entities.rs`) and ask measurements (`asks.rs`).

use std::process::ExitCode;

use clap::{Args, Subcommand};

use crate::bench_support::{runtime, set_runtime_kind};

mod asks;
mod common;
mod cores;
mod cores_remote;
mod cores_work;
mod entities;
mod first_message;
mod local;
mod memory;
mod nodes;
mod peer;
mod remote;
mod tally;
mod turns;

pub use cores_remote::{CoresPeerArgs, run_peer as run_cores_peer};
pub(crate) use nodes::BenchNode;
pub use peer::{PeerArgs, run_peer};

use first_message::{FirstArgs, first_message_bench};
use local::{LocalArgs, local_bench};
use memory::{MemoryArgs, memory_bench};
use remote::{RemoteArgs, remote_bench};

/// Arguments of `shardik bench sharding`.
#[derive(Args, Debug)]
pub struct ShardingArgs {
    #[command(subcommand)]
    what: ShardingCmd,
}

#[derive(Subcommand, Debug)]
enum ShardingCmd {
    /// Local tell throughput to active entities, against a raw tokio channel baseline.
    Local(LocalArgs),
    /// Tell throughput and ask latency through a proxy to entities in another process.
    Remote(RemoteArgs),
    /// Memory per idle entity and the entity creation rate.
    Memory(MemoryArgs),
    /// Latency of the first message to an entity in a shard that is not allocated yet.
    FirstMessage(FirstArgs),
    /// How much of the machine's cores one kind uses: CPU-bound handlers against the same
    /// work on plain tasks, for each worker count.
    Cores(cores::CoresArgs),
}

/// Runs `shardik bench sharding ...`.
pub fn run(args: ShardingArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        ShardingCmd::Local(a) => on_runtime(a.common.runtime.clone(), local_bench(a))?,
        ShardingCmd::Remote(a) => on_runtime(a.common.runtime.clone(), remote_bench(a))?,
        ShardingCmd::Memory(a) => on_runtime(a.common.runtime.clone(), memory_bench(a))?,
        ShardingCmd::FirstMessage(a) => {
            on_runtime(a.common.runtime.clone(), first_message_bench(a))?
        }
        // A runtime per worker count, built by the benchmark itself.
        ShardingCmd::Cores(a) => cores::run(a)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `bench` on the runtime `kind` names (`--runtime`; the peers it starts inherit it).
fn on_runtime(kind: String, bench: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    set_runtime_kind(&kind);
    runtime()?.block_on(bench)
}

// ---------------------------------------------------------------------------------------------
// The benchmark entity.
