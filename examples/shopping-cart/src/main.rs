//! `shopping-cart`: one cluster node running shopping carts, serving the carts' HTTP API and
//! the management API (`/cluster/members`, `/ready`, `/metrics`, …) on one address, in the
//! foreground until SIGINT or SIGTERM, which make it leave the cluster gracefully.
//!
//! Exit codes: 0 after a graceful leave, 2 for a startup error (bad arguments or
//! configuration, an address in use, a store that cannot be opened), 3 when the cluster downed
//! or removed this node, 4 when the cluster refused its configuration.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use shardik::{Address, Node, Settings, ShutdownReason};
use tracing::{info, warn};

use shopping_cart::{api, cart_kind};

/// One node of a shopping-cart cluster.
#[derive(Parser, Debug)]
#[command(name = "shopping-cart", version, about)]
struct Args {
    /// HOST:PORT to listen on for cluster traffic; also this node's address in the cluster.
    #[arg(long)]
    bind: Address,
    /// A seed node to join through (repeatable); the first seed forms the cluster. Overrides
    /// `cluster.seed-nodes`.
    #[arg(long = "seed")]
    seeds: Vec<Address>,
    /// HOST:PORT of the HTTP API: the carts and the management routes.
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: String,
    /// Where the carts' events are stored: `sqlite:PATH` (one file all nodes of a machine
    /// share), `postgres://user@host:port/db`, or `memory:` (lost at exit). Overrides
    /// `persistence.store`; without either, `sqlite:{persistence.data-dir}/shopping-cart.db`,
    /// that is `sqlite:data/shopping-cart.db` in the working directory.
    #[arg(long)]
    store: Option<String>,
    /// How long a request waits for its cart's answer before answering 504.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    ask_timeout: Duration,
    /// A TOML file of shardik settings layered over the built-in defaults (then `SHARDIK_*`
    /// environment variables over both).
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Connections the carts' HTTP port serves at once: it is the application's port as well as
/// the management API's, and the load tool keeps up to `--max-in-flight` (1024) requests
/// outstanding, so `management.http.max-connections` (256) would be too few.
const CART_MAX_CONNECTIONS: usize = 4096;

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut settings = Settings::load(args.config.as_deref()).context("invalid configuration")?;
    // The carts' routes are served on the management API's port, `--http`: the write guard's
    // rules (a token beyond loopback) apply to that address.
    let http_addr: Address = args
        .http
        .parse()
        .with_context(|| format!("--http {} is not HOST:PORT", args.http))?;
    settings.management.http.hostname = http_addr.host.to_string();
    settings.management.http.port = http_addr.port;
    settings.management.http.max_connections = CART_MAX_CONNECTIONS;
    settings.validate().context("invalid configuration")?;
    if args.ask_timeout.is_zero() {
        anyhow::bail!("--ask-timeout must be positive");
    }
    let store = match &args.store {
        Some(url) => url.clone(),
        None if settings.persistence.store.is_empty() => {
            // The data directory is the one a store may be created in (SQLite paths elsewhere
            // must exist, so that a typo is an error).
            let dir = PathBuf::from(&settings.persistence.data_dir);
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
            let file = dir.join("shopping-cart.db");
            format!("sqlite:{}", file.display())
        }
        None => settings.persistence.store.clone(),
    };
    // One worker per core unless `runtime.worker-threads` says otherwise, as `shardik node`.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.runtime.worker_thread_count())
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let reason = runtime.block_on(run_node(args, settings, store))?;
    if reason == ShutdownReason::Interrupted {
        // Stopped a second time while leaving: tasks still leaving must not hold the process.
        runtime.shutdown_background();
    }
    Ok(ExitCode::from(reason.exit_code()))
}

async fn run_node(
    args: Args,
    mut settings: Settings,
    store: String,
) -> anyhow::Result<ShutdownReason> {
    // Everything that can fail for a local reason fails before the node joins (the store, the
    // HTTP port, token and TLS files, all in `start`): a node that joined and then stopped
    // would make the cluster move shards twice for nothing.
    settings.persistence.store = store.clone();
    let mut builder = Node::builder(settings)
        .bind(args.bind.clone())
        .logging()
        .metrics()
        .management()
        .persistence();
    if !args.seeds.is_empty() {
        builder = builder.seeds(args.seeds);
    }
    let node = builder
        .start()
        .await
        .with_context(|| format!("cannot start the node on {}", args.bind))?;
    // Opened by `start`: this hands it over.
    let persistence = node.persistence().await?;
    info!(store = %store, "store opened");
    node.sharding()
        .init(cart_kind(&persistence))
        .context("cannot register the cart kind")?;
    node.merge_routes(api::routes(node.sharding().clone(), args.ask_timeout))?;
    info!(node = %node.self_node(), http = %args.http, "carts served over HTTP");

    // The carts answered every change only once it was durable, so nothing is lost when the
    // HTTP port stops after the node: requests still in flight get 503s.
    let reason = node.run_until_signal().await;
    if reason != ShutdownReason::Interrupted
        && let Err(e) = persistence.store().close().await
    {
        warn!(error = %e, "the store did not close cleanly");
    }
    Ok(reason)
}
