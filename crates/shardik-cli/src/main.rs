//! `shardik`: the command-line program.
//!
//! Subcommands:
//! - `demo`: a short narrated cluster run a newcomer can watch.
//! - `node`: one cluster node (TCP transport, management HTTP API).
//! - `simulate`: a seeded, replayable whole-cluster scenario on the real protocol core.
//! - `certs`: a cluster CA and node certificates for mutual TLS between nodes.
//! - `members`, `join`, `leave`, `down`: a running node's management API (HTTP or HTTPS).
//! - `passivation-sim`: replays access traces through passivation strategies.
//! - `bench`: transport throughput/latency against a raw TCP baseline, idle cost, cluster
//!   sharding (local and remote throughput, ask latency, memory per entity, first message), and
//!   durable entities (persisted commands against plain appends, recovery, a full-cluster
//!   restart bringing back remembered entities).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod admin;
mod bench;
mod bench_codecs;
mod bench_coordinator;
mod bench_failover;
mod bench_frames;
mod bench_handshake;
mod bench_persistence;
mod bench_raw;
mod bench_reliable;
mod bench_remembered;
mod bench_sharding;
mod bench_support;
mod bench_tls;
mod bench_transports;
mod certs;
mod counter;
mod counter_nodes;
mod demo;
mod demo_reliable;
mod demo_sim;
mod evolving;
mod manage;
mod mgmt_client;
mod node;
mod passivation;
mod ports;
mod reliable_counters;
mod simulate;

#[derive(Parser)]
#[command(name = "shardik", version, about = "Cluster sharding for Rust")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a narrated demonstration cluster on this machine.
    Demo(demo::DemoArgs),
    /// Run one cluster node in the foreground until SIGINT/SIGTERM (graceful leave).
    Node(node::NodeArgs),
    /// Make a cluster CA and node certificates for mutual TLS between nodes.
    Certs(certs::CertsArgs),
    /// List the cluster's members as a node's management API sees them.
    Members(manage::MembersArgs),
    /// Make the node at --management join the cluster through ADDRESS.
    Join(manage::MemberArgs),
    /// Make the member at ADDRESS leave the cluster gracefully.
    Leave(manage::MemberArgs),
    /// Mark the member at ADDRESS as Down (it is removed without handing off).
    Down(manage::MemberArgs),
    /// Prepare the whole cluster for a full shutdown: no member is moved up, no node joins,
    /// no shard moves; stop the nodes once every member is ReadyForShutdown.
    #[command(name = "prepare-for-full-shutdown")]
    PrepareForFullShutdown(manage::ClusterArgs),
    /// Run a deterministic whole-cluster simulation and print its timeline.
    Simulate(simulate::SimulateArgs),
    /// Replay access patterns through passivation strategies and print hit rates.
    #[command(name = "passivation-sim", disable_help_flag = true)]
    PassivationSim {
        /// Arguments for the simulator (`--help` lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Measure the transport, the idle cost of a cluster, cluster sharding and persistence.
    Bench(bench::BenchArgs),
    /// Operations on a stopped cluster's store (`remove-internal-data`).
    Admin(admin::AdminArgs),
    /// The far side of `bench transport` (started by it; not for direct use).
    #[command(name = "bench-peer", hide = true)]
    BenchPeer(bench::PeerArgs),
    /// The far side of `bench sharding remote|first-message --remote` (started by them).
    #[command(name = "bench-sharding-peer", hide = true)]
    BenchShardingPeer(bench_sharding::PeerArgs),
    /// The far side of `bench sharding cores --remote` (started by it).
    #[command(name = "bench-cores-peer", hide = true)]
    BenchCoresPeer(bench_sharding::CoresPeerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Demo(args) => demo::run(args),
        Cmd::Node(args) => node::run(args),
        Cmd::Certs(args) => certs::run(args),
        Cmd::Members(args) => manage::members(args),
        Cmd::Join(args) => manage::join(args),
        Cmd::Leave(args) => manage::leave(args),
        Cmd::Down(args) => manage::down(args),
        Cmd::PrepareForFullShutdown(args) => manage::prepare_for_full_shutdown(args),
        Cmd::Simulate(args) => simulate::run(args),
        Cmd::PassivationSim { args } => passivation::run(&args),
        Cmd::Bench(args) => bench::run(args),
        Cmd::Admin(args) => admin::run(args),
        Cmd::BenchPeer(args) => bench::run_peer(args),
        Cmd::BenchShardingPeer(args) => bench_sharding::run_peer(args),
        Cmd::BenchCoresPeer(args) => bench_sharding::run_cores_peer(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
