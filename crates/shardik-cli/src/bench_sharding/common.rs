//! What every part of `bench sharding` shares: the names the benchmark and its peer agree on
//! (role, kinds, cluster), the ask timeout, the options every benchmark takes, how a producer
//! meets a full queue, and how a result is printed.

use std::time::Duration;

use clap::Args;

/// The role only the remote peer has: entities of the remote kinds run there alone.
pub(super) const HOST_ROLE: &str = "bench-host";
/// The kinds the peer hosts: `remote`'s async and sync entities, and those of
/// `first-message --remote`.
pub(super) const REMOTE_KIND: &str = "bench-remote";
pub(super) const REMOTE_SYNC_KIND: &str = "bench-remote-sync";
pub(super) const FIRST_KIND: &str = "bench-first";

/// Cluster name of the benchmark nodes (never the default, so they cannot meet real nodes).
pub(super) const CLUSTER: &str = "shardik-bench-sharding";

/// Timeout of every ask the benchmarks make.
pub(super) const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// Options every sharding benchmark takes.
#[derive(Args, Debug)]
pub(super) struct Common {
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    pub(super) json: bool,
    /// Runtime of every process: `multi` (two worker threads, as `shardik node`) or `current`
    /// (one thread).
    #[arg(long, default_value = "multi", value_parser = ["multi", "current"])]
    pub(super) runtime: String,
}

/// How a producer meets a full queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum SendMode {
    /// `tell` (`try_send` for the baseline); on `BufferFull` yield and retry (counted).
    Retry,
    /// `tell(..).await` (`send().await` for the baseline): wait for room.
    Wait,
}

impl SendMode {
    pub(super) fn name(self) -> &'static str {
        match self {
            SendMode::Retry => "retry",
            SendMode::Wait => "wait",
        }
    }
}

/// Prints `value` as one JSON object, or `line` as text.
pub(super) fn report(json: bool, value: serde_json::Value, line: String) {
    if json {
        println!("{value}");
    } else {
        println!("{line}");
    }
}
