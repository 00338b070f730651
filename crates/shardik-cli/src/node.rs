//! `shardik node`: one cluster node in the foreground until SIGINT/SIGTERM.
//!
//! Exit codes: 0 after a graceful leave (or a stop before joining), 2 for a startup error
//! (bad configuration, address in use), 3 when the cluster downed or removed this node, 4
//! when the cluster refused its configuration.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use shardik_core::membership::{Address, ShutdownReason};
use shardik_runtime::config::Settings;
use shardik_runtime::{Node, logging};

use crate::counter::{counter_kind, counter_routes, counters_not_started_routes};
use crate::evolving::{self, EvolvingVersion};
use crate::reliable_counters;
use tracing::info;

/// Arguments of `shardik node`.
#[derive(Args, Debug)]
pub struct NodeArgs {
    /// HOST:PORT to listen on for cluster traffic, e.g. 0.0.0.0:2552; also this node's
    /// address in the cluster unless `--advertise` is given. Overrides `cluster.bind-address`.
    #[arg(long)]
    bind: Option<Address>,
    /// HOST:PORT that other nodes dial to reach this one, its identity in the cluster (a DNS
    /// name such as pod-7.shop.svc:2552, or the address NAT forwards). Overrides
    /// `cluster.canonical-address`; without it, the bind address is the identity.
    #[arg(long)]
    advertise: Option<Address>,
    /// A seed node to join through (repeatable). Overrides `cluster.seed-nodes`.
    #[arg(long = "seed")]
    seeds: Vec<Address>,
    /// Roles of this node, comma separated. Overrides `cluster.roles`.
    #[arg(long, value_delimiter = ',')]
    roles: Option<Vec<String>>,
    /// HOST:PORT of the management HTTP API (default from `management.http.*`, port 8558).
    #[arg(long)]
    management: Option<Address>,
    /// A TOML configuration file layered over the built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Directory of the embedded store's default file `shardik.db` (created if missing).
    /// Overrides `persistence.data-dir`.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The store of durable entities: `sqlite:PATH`, `postgres://user@host:port/db` or
    /// `memory:`. Overrides `persistence.store` (default: `sqlite:{data-dir}/shardik.db`).
    #[arg(long)]
    store: Option<String>,
    /// Register the built-in demo entity kind `counter` and serve
    /// `POST /demo/counter/{id}/increment`, `GET /demo/counter/{id}` and
    /// `GET /demo/counters/live` (the counters running here, since when) on the management API.
    /// On a loopback management address this enables the increment route even while
    /// `management.http.route-providers-read-only` is true; elsewhere it follows that setting
    /// (and needs the bearer token of `management.http.auth-token-file`, or a client
    /// certificate with `management.http.tls.enabled`).
    #[arg(long)]
    demo_counters: bool,
    /// With `--demo-counters`: run a reliable producer with this id (its durable queue in the
    /// node's store) and serve `POST /demo/producer/increment/{id}?times=N` and
    /// `GET /demo/producer`; what an earlier run with the same id left unconfirmed is sent
    /// again. Every demo node serves `GET /demo/reliable-counter/{id}`.
    #[arg(long, requires = "demo_counters")]
    demo_producer: Option<String>,
    /// Register the hidden demo kind `evolving` with its command type at this version, and
    /// serve `POST /demo/evolving/{id}` (see `src/evolving.rs`): what the two-version test of
    /// a rolling update runs.
    #[arg(long, value_enum, hide = true)]
    demo_evolving: Option<EvolvingVersion>,
}

/// Runs the command.
pub fn run(args: NodeArgs) -> anyhow::Result<ExitCode> {
    let mut settings = Settings::load(args.config.as_deref()).context("invalid configuration")?;
    if !args.seeds.is_empty() {
        settings.cluster.seed_nodes = args.seeds.clone();
    }
    if let Some(bind) = &args.bind {
        settings.cluster.bind_address = Some(bind.clone());
    }
    if let Some(advertise) = &args.advertise {
        settings.cluster.canonical_address = Some(advertise.clone());
    }
    if let Some(roles) = &args.roles {
        settings.cluster.roles = roles.iter().filter(|r| !r.is_empty()).cloned().collect();
    }
    if let Some(m) = &args.management {
        settings.management.http.hostname = m.host.to_string();
        settings.management.http.port = m.port;
    }
    if let Some(dir) = &args.data_dir {
        settings.persistence.data_dir = dir.display().to_string();
    }
    if let Some(store) = &args.store {
        settings.persistence.store = store.clone();
    }
    // Again after the command line: `--management` decides whether writes need a token.
    settings.validate().context("invalid configuration")?;
    // Where to listen and who this node is: neither given, or an identity peers cannot dial
    // (0.0.0.0 without --advertise), stops it here with the key to set.
    let addresses = settings
        .cluster
        .node_addresses()
        .context("invalid configuration")?;
    logging::init(settings.logging.format, &settings.logging.level)
        .context("cannot set up logging")?;
    // One worker per core unless `runtime.worker-threads` says otherwise.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.runtime.worker_thread_count())
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let reason = runtime.block_on(run_node(
        addresses.bind,
        settings,
        args.demo_counters,
        args.demo_producer,
        args.demo_evolving,
    ))?;
    if reason == ShutdownReason::Interrupted {
        // Asked twice: tasks still leaving must not hold the process.
        runtime.shutdown_background();
    }
    Ok(ExitCode::from(reason.exit_code()))
}

async fn run_node(
    bind: Address,
    settings: Settings,
    demo_counters: bool,
    demo_producer: Option<String>,
    demo_evolving: Option<EvolvingVersion>,
) -> anyhow::Result<ShutdownReason> {
    // The settings carry `--advertise` (cluster.canonical-address) and `--management`
    // (management.http.*) too; the management port is bound, and its token and TLS files
    // read, before the node joins.
    let mut builder = Node::builder(settings.clone())
        .bind(bind.clone())
        .metrics()
        .management();
    if demo_counters {
        // The node's store (persistence.store) is opened before the node joins, so that a
        // store that cannot be reached, parsed or read stops the process at startup with the
        // cause, before it is a member. The resolver's lease (lease-majority) lives there too.
        builder = builder.persistence();
    }
    let node = builder
        .start()
        .await
        .with_context(|| format!("cannot start the node on {bind}"))?;
    let persistence = if demo_counters {
        // Opened at start: this only hands it over. The URL may hold a password: logs show it
        // redacted.
        let shown = shardik_persistence::redact_store_url(&settings.persistence.store_url());
        let persistence = node
            .persistence()
            .await
            .with_context(|| format!("cannot open the store {shown}"))?;
        info!(store = %shown, "store opened");
        Some(persistence)
    } else {
        None
    };
    let guard = node
        .write_guard()
        .expect("the builder was asked for the management API")
        .clone();
    let sharding = node.sharding().clone();
    // A demo is asked for explicitly: on loopback its own write route is open (the README's
    // curl lines work as written); elsewhere it follows the API's rule.
    let demo_guard = if settings.management.http.listens_on_loopback() {
        guard.enable_writes()
    } else {
        guard
    };
    if let Some(persistence) = &persistence {
        // Like any kind, the counters follow remember-entities in their own store.
        let counters = counter_kind(persistence);
        sharding
            .init(counters)
            .context("cannot register the demo counters")?;
        node.merge_routes(counter_routes(sharding.clone(), &demo_guard))?;
        let reliable = reliable_counters::register(&sharding, persistence)
            .context("cannot register the demo's reliable counters")?;
        let producer = match &demo_producer {
            Some(id) => {
                let producer = reliable_counters::start_producer(id, &reliable, persistence)
                    .await
                    .with_context(|| format!("cannot start the reliable producer {id:?}"))?;
                info!(producer = %id, resumed = producer.unconfirmed(), "reliable producer started");
                Some(producer)
            }
            None => None,
        };
        node.merge_routes(reliable_counters::routes(reliable, producer, &demo_guard))?;
        info!(
            increments_enabled = demo_guard.writes_enabled(),
            "demo counters enabled: POST /demo/counter/{{id}}/increment, GET /demo/counter/{{id}}, GET /demo/counters/live"
        );
    } else {
        node.merge_routes(counters_not_started_routes())?;
    }
    if let Some(version) = demo_evolving {
        let routes = evolving::register(version, &sharding, &demo_guard)
            .context("cannot register the demo kind `evolving`")?;
        node.merge_routes(routes)?;
        info!(
            ?version,
            "demo kind `evolving` enabled: POST /demo/evolving/{{id}}"
        );
    }
    Ok(node.run_until_signal().await)
}
