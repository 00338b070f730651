//! `shardik bench sharding`: measurements of cluster sharding on real nodes.
//!
//! - `local`: `tell` throughput to already-active entities on a single-node cluster, against
//!   a raw tokio baseline doing the same work (a bounded channel into one task that looks the
//!   entity up in a `HashMap` and increments it).
//! - `remote`: from a node that runs only a proxy to a second process that hosts the
//!   entities, so every message crosses loopback TCP: one-way `tell` throughput (to an async
//!   entity, then to the same entity as a [`SyncEntity`]), `ask` in a
//!   closed loop with one and with 64 requests in flight (one task per in-flight request, each
//!   asking again once answered), and `ask` at a fixed rate (open loop). Each runs beside a
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

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use serde_json::json;
use shardik_core::membership::{Address, MemberStatus};
use shardik_runtime::config::Settings;
use shardik_runtime::metrics::Metrics;
use shardik_runtime::node::{self, NodeOptions, RunningNode};
use shardik_runtime::sharding::{
    Entity, EntityContext, EntityKind, EntityRef, EntityRegion, ReplyTo, Sharding, ShardingConfig,
    SyncEntity, TellError,
};
use shardik_runtime::tls::TlsContext;
use shardik_runtime::transport::TransportConfig;
use tokio::sync::{Notify, mpsc};

use crate::bench_frames::{self, OpSizes, TYPICAL_ASK_ID, op_sizes};
use crate::bench_handshake;
use crate::bench_raw::{self, Exchange};
use crate::bench_support::{
    ClosedLoop, LATE, Latencies, Peer, Throughput, entity_of, exit_with_parent, free_port,
    load_average, open_loop, runtime, set_runtime_kind, unix_ns,
};
use crate::bench_tls::{BenchCerts, TlsSessions, Transport, TransportChoice};
use crate::bench_transports::{RemoteFigures, RemoteRun};

mod cores;
mod cores_remote;
mod cores_work;
mod turns;

pub use cores_remote::{CoresPeerArgs, run_peer as run_cores_peer};

/// The role only the remote peer has: entities of the remote kinds run there alone.
const HOST_ROLE: &str = "bench-host";
const LOCAL_KIND: &str = "bench-local";
const LOCAL_SYNC_KIND: &str = "bench-local-sync";
const REMOTE_KIND: &str = "bench-remote";
const REMOTE_SYNC_KIND: &str = "bench-remote-sync";
const FIRST_KIND: &str = "bench-first";
const MEMORY_KIND: &str = "bench-memory";
/// Cluster name of the benchmark nodes (never the default, so they cannot meet real nodes).
const CLUSTER: &str = "shardik-bench-sharding";
/// Timeout of every ask the benchmarks make.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for all tells of a throughput run to be handled.
const DONE_LIMIT: Duration = Duration::from_secs(300);
/// Batch size of the raw baseline's consumer (the same as the entity kind task's).
const RAW_BATCH: usize = 256;

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

/// Options every sharding benchmark takes.
#[derive(Args, Debug)]
struct Common {
    /// Print one JSON object instead of a line of text.
    #[arg(long)]
    json: bool,
    /// Runtime of every process: `multi` (two worker threads, as `shardik node`) or `current`
    /// (one thread).
    #[arg(long, default_value = "multi", value_parser = ["multi", "current"])]
    runtime: String,
}

/// Arguments of `shardik bench sharding local`.
#[derive(Args, Debug)]
struct LocalArgs {
    /// Entities, activated before the measurement.
    #[arg(long, default_value_t = 1000)]
    entities: u64,
    /// Tells, spread round-robin over the entities from one producer task.
    #[arg(long, default_value_t = 5_000_000)]
    messages: u64,
    /// How the producer waits when the queue is full.
    #[arg(long, value_enum, default_value = "retry")]
    send: SendMode,
    #[command(flatten)]
    common: Common,
}

/// How a producer meets a full queue.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SendMode {
    /// `tell` (`try_send` for the baseline); on `BufferFull` yield and retry (counted).
    Retry,
    /// `tell(..).await` (`send().await` for the baseline): wait for room.
    Wait,
}

impl SendMode {
    fn name(self) -> &'static str {
        match self {
            SendMode::Retry => "retry",
            SendMode::Wait => "wait",
        }
    }
}

/// Arguments of `shardik bench sharding remote`.
#[derive(Args, Debug)]
struct RemoteArgs {
    /// Entities on the peer, activated before the measurements.
    #[arg(long, default_value_t = 1000)]
    entities: u64,
    /// One-way tells of the throughput measurement (and of its raw baseline).
    #[arg(long, default_value_t = 1_000_000)]
    messages: u64,
    /// How the producer waits when the queue is full.
    #[arg(long, value_enum, default_value = "retry")]
    send: SendMode,
    /// Asks per second of the open-loop latency measurement.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Seconds of each ask measurement (closed loops and open loop alike).
    #[arg(long = "duration-s", default_value_t = 10)]
    duration_s: u64,
    /// The parts to run, comma-separated (all but `handshake` by default).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "tells,ask1,ask64,open"
    )]
    only: Vec<RemotePart>,
    /// How the two nodes talk: plain TCP, mutual TLS (certificates made in a temporary
    /// directory), or both one after the other with the ratios TLS/plain.
    #[arg(long, value_enum, default_value = "plain")]
    transport: TransportChoice,
    /// Fresh connections of the `handshake` part.
    #[arg(long, default_value_t = 2000)]
    connections: u64,
    #[command(flatten)]
    common: Common,
}

/// One part of `bench sharding remote`, each beside its raw TCP baseline.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
enum RemotePart {
    /// One-way tells, against raw one-way frames of the tells' sizes.
    Tells,
    /// Asks with one in flight (closed loop), against a raw ping-pong of the same sizes.
    Ask1,
    /// Asks with 64 in flight (closed loop), against 64 raw requests pipelined on one
    /// connection.
    Ask64,
    /// Asks at a fixed rate (open loop, `--rate`), against raw requests at the same rate
    /// pipelined on one connection.
    Open,
    /// Fresh connections to the peer's node, one at a time (`--connections`): connect and
    /// handshakes (TLS's too with `--transport tls`), timed; no raw baseline.
    Handshake,
}

/// Requests in flight of the `ask64` part.
const MANY_IN_FLIGHT: usize = 64;

/// Arguments of `shardik bench sharding memory`.
#[derive(Args, Debug)]
struct MemoryArgs {
    /// Entities created (one tell each).
    #[arg(long, default_value_t = 1_000_000)]
    entities: u64,
    #[command(flatten)]
    common: Common,
}

/// Arguments of `shardik bench sharding first-message`.
#[derive(Args, Debug)]
struct FirstArgs {
    /// Fresh shards measured (each gets one entity).
    #[arg(long, default_value_t = 300)]
    shards: usize,
    /// Measure from a proxy node to a coordinator in a second process instead of on one node.
    #[arg(long)]
    remote: bool,
    #[command(flatten)]
    common: Common,
}

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

/// Told [`TallyCmd::Add`]: adds. Asked [`TallyCmd::Read`]: answers the value. `P` observes
/// handled tells; `()` observes nothing and takes no space, so `Tally<()>` is a plain u64
/// counter.
struct Tally<P> {
    value: u64,
    probe: P,
}

/// What a [`Tally`] reports each handled tell to.
trait Probe: Clone + Send + Sync + 'static {
    fn told(&self);
}

impl Probe for () {
    fn told(&self) {}
}

impl Probe for Arc<Progress> {
    fn told(&self) {
        self.hit();
    }
}

/// What a [`Tally`] is told (a number to add) or asked (its value). As small as a tell of a
/// bare `u64` plus its tag: the `ReplyTo` is one pointer.
#[derive(Serialize, Deserialize)]
enum TallyCmd {
    Add(u64),
    Read(ReplyTo<u64>),
}

impl<P: Probe> Entity for Tally<P> {
    type Command = TallyCmd;

    async fn handle(&mut self, cmd: TallyCmd, _ctx: &mut EntityContext<Self>) {
        self.handle(cmd)
    }
}

impl<P: Probe> Tally<P> {
    /// A tally at zero.
    fn new(probe: P) -> Self {
        Tally { value: 0, probe }
    }

    /// Adds, or answers the total.
    fn handle(&mut self, cmd: TallyCmd) {
        match cmd {
            TallyCmd::Add(add) => {
                self.value += add;
                self.probe.told();
            }
            TallyCmd::Read(reply_to) => reply_to.send(self.value),
        }
    }
}

/// [`Tally`] as a [`SyncEntity`]: the same handler, called without a future.
struct SyncTally<P>(Tally<P>);

impl<P: Probe> SyncEntity for SyncTally<P> {
    type Command = TallyCmd;

    fn handle(&mut self, cmd: TallyCmd, _ctx: &mut EntityContext<Self>) {
        self.0.handle(cmd)
    }
}

/// The kind `name` of [`Tally`] entities that report to `probe`, never passivated.
fn tally_kind<P: Probe>(name: &str, probe: P) -> EntityKind<Tally<P>> {
    EntityKind::new(name, move |_| Tally::new(probe.clone())).with_idle_timeout(None)
}

/// The kind `name` of [`SyncTally`] entities that report to `probe`, never passivated.
fn sync_tally_kind<P: Probe>(name: &str, probe: P) -> EntityKind<SyncTally<P>> {
    EntityKind::new(name, move |_| SyncTally(Tally::new(probe.clone()))).with_idle_timeout(None)
}

/// Counts handled messages towards a target and wakes a waiter when it is reached.
struct Progress {
    target: u64,
    handled: AtomicU64,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    done: Notify,
}

impl Progress {
    fn new(target: u64) -> Arc<Progress> {
        Arc::new(Progress {
            target,
            handled: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            done: Notify::new(),
        })
    }

    fn hit(&self) {
        let n = self.handled.fetch_add(1, Ordering::Relaxed) + 1;
        if n == 1 {
            self.first_ns.store(unix_ns(), Ordering::Relaxed);
        }
        if n == self.target {
            self.last_ns.store(unix_ns(), Ordering::Release);
            self.done.notify_one();
        }
    }

    /// Waits until the target is reached; the unix time (ns) the last message was handled.
    async fn wait(&self, limit: Duration) -> anyhow::Result<u64> {
        if tokio::time::timeout(limit, self.done.notified())
            .await
            .is_err()
        {
            bail!(
                "only {} of {} messages handled after {limit:?}",
                self.handled.load(Ordering::Relaxed),
                self.target
            );
        }
        Ok(self.last_ns.load(Ordering::Acquire))
    }
}

// ---------------------------------------------------------------------------------------------
// Nodes.

/// A node with sharding attached, configured as `shardik node` is by default (also the node
/// of `bench persistence`).
pub(crate) struct BenchNode {
    running: RunningNode,
    pub(crate) sharding: Sharding,
    config: ShardingConfig,
    /// The node's TLS configuration, when `transport.tls` is on.
    tls: Option<TlsContext>,
}

impl BenchNode {
    /// Starts a node on a free loopback port that joins `seeds` (none: it forms a cluster of
    /// its own), with `roles`.
    pub(crate) async fn start(seeds: Vec<Address>, roles: &[&str]) -> anyhow::Result<BenchNode> {
        let bind = Address::new("127.0.0.1", free_port()?);
        BenchNode::start_with(bind, seeds, roles, |_| {}).await
    }

    /// Starts a node on `bind` over mutual TLS with `certs`, or over plain TCP without
    /// (whatever `transport.tls` says otherwise).
    async fn start_at(
        bind: Address,
        seeds: Vec<Address>,
        roles: &[&str],
        certs: Option<&BenchCerts>,
    ) -> anyhow::Result<BenchNode> {
        BenchNode::start_with(bind, seeds, roles, |s| match certs {
            Some(certs) => certs.apply(s),
            None => s.transport.tls.enabled = false,
        })
        .await
    }

    /// Starts a node on `bind` as [`start`](Self::start) does, with its settings changed by
    /// `tweak` after they are loaded (a benchmark that needs, say, a minimum number of
    /// members).
    pub(crate) async fn start_with(
        bind: Address,
        seeds: Vec<Address>,
        roles: &[&str],
        tweak: impl FnOnce(&mut Settings),
    ) -> anyhow::Result<BenchNode> {
        // As `shardik node` does; the recorder is process-wide, so a second call is a no-op.
        let _ = Metrics::install();
        let mut settings = Settings::load(None).context("invalid configuration")?;
        settings.cluster.name = CLUSTER.to_string();
        settings.cluster.roles = roles.iter().map(|r| r.to_string()).collect();
        tweak(&mut settings);
        let seeds = if seeds.is_empty() {
            vec![bind.clone()]
        } else {
            seeds
        };
        settings.cluster.seed_nodes = seeds.clone();
        // As `shardik node` does: bad TLS files stop the node here, naming the file.
        let tls = TlsContext::from_settings(&settings)?;
        let running = node::start(NodeOptions {
            bind: bind.clone(),
            advertise: None,
            seeds,
            membership: settings.membership_config(),
            transport: TransportConfig {
                tls: tls.clone(),
                ..node::transport_config(&settings.transport)
            },
            leave_timeout: Duration::from_secs(10),
        })
        .await
        .with_context(|| format!("cannot start a node on {bind}"))?;
        let config = settings.node_settings().sharding;
        let sharding = Sharding::start(&running, config.clone())?;
        Ok(BenchNode {
            running,
            sharding,
            config,
            tls,
        })
    }

    /// Waits until this node is Up and sees `members` members Up.
    pub(crate) async fn wait_up(&self, members: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.running.handle.snapshot();
            let up = s
                .members
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count();
            if s.self_status == Some(MemberStatus::Up) && up >= members {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the cluster did not reach {members} members Up within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many members this node sees Up, or `None` while it is not Up itself.
    pub(crate) fn members_up(&self) -> Option<usize> {
        let s = self.running.handle.snapshot();
        (s.self_status == Some(MemberStatus::Up)).then(|| {
            s.members
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count()
        })
    }

    /// This node's address.
    pub(crate) fn address(&self) -> &Address {
        &self.running.self_node.address
    }

    /// Asks the node to stop at once, without leaving (a crash, as the others see it).
    pub(crate) async fn crash(&self) {
        // A closed channel means the node has stopped already.
        let _ = self.running.stop.send(node::StopRequest::Now).await;
    }

    /// Waits (at most `limit`) until the node's task has ended, after [`crash`](Self::crash).
    pub(crate) async fn stopped(self, limit: Duration) -> anyhow::Result<()> {
        let addr = self.address().clone();
        tokio::time::timeout(limit, self.running.finished)
            .await
            .with_context(|| format!("the node on {addr} did not stop within {limit:?}"))?
            .with_context(|| format!("the task of the node on {addr} failed"))?;
        Ok(())
    }

    /// Registers `kind`.
    fn init<P: Probe>(&self, kind: EntityKind<Tally<P>>) -> anyhow::Result<Region<P>> {
        Ok(self.sharding.init(kind)?)
    }
}

type Region<P> = EntityRegion<Tally<P>>;
type Ref<P> = EntityRef<Tally<P>>;

/// A proxy node joined to a peer process that hosts the entities.
struct RemoteSetup {
    peer: Peer,
    node: BenchNode,
}

impl RemoteSetup {
    /// Starts the peer (which counts `expect` tells, then turns of `turn_tells` of the turn
    /// kind) and a node without the host role that joins it, both over mutual TLS with
    /// `certs`, or plain TCP without.
    async fn start(
        expect: u64,
        certs: Option<&BenchCerts>,
        turn_tells: u64,
    ) -> anyhow::Result<RemoteSetup> {
        let expect = expect.to_string();
        let mut args = vec!["--expect".to_string(), expect];
        if turn_tells > 0 {
            args.push("--turn-tells".to_string());
            args.push(turn_tells.to_string());
        }
        if let Some(certs) = certs {
            args.push("--tls-dir".to_string());
            args.push(certs.dir().display().to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let peer = Peer::start("bench-sharding-peer", &args).await?;
        let bind = Address::new("127.0.0.1", free_port()?);
        let node = BenchNode::start_at(bind, vec![peer.addr.clone()], &[], certs).await?;
        node.wait_up(2).await?;
        Ok(RemoteSetup { peer, node })
    }

    /// The proxy of a kind that runs on the peer only.
    fn proxy(&self, name: &str) -> anyhow::Result<Region<()>> {
        self.node.init(tally_kind(name, ()).with_role(HOST_ROLE))
    }

    /// The proxy of the [`SyncTally`] kind that runs on the peer only.
    fn sync_proxy(&self) -> anyhow::Result<EntityRegion<SyncTally<()>>> {
        Ok(self
            .node
            .sharding
            .init(sync_tally_kind(REMOTE_SYNC_KIND, ()).with_role(HOST_ROLE))?)
    }
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

// ---------------------------------------------------------------------------------------------
// Helpers.

/// References to entities `<prefix>0 .. <prefix><n-1>`.
fn entity_refs<E: Entity<Command = TallyCmd>>(
    region: &EntityRegion<E>,
    prefix: &str,
    n: u64,
) -> Vec<EntityRef<E>> {
    (0..n)
        .map(|i| region.entity_ref(&format!("{prefix}{i}")))
        .collect()
}

/// Asks every entity once (read only): creates them and allocates their shards.
async fn activate<E: Entity<Command = TallyCmd>>(refs: &[EntityRef<E>]) -> anyhow::Result<()> {
    for r in refs {
        r.ask(TallyCmd::Read, ASK_TIMEOUT)
            .await
            .with_context(|| format!("entity {} did not answer", r.entity_id()))?;
    }
    Ok(())
}

/// Tells of a round-robin run of `messages` over `entities` that entity `k` gets.
fn share(k: u64, entities: u64, messages: u64) -> u64 {
    messages / entities + u64::from(k < messages % entities)
}

/// Checks that every entity handled exactly its share of the round-robin tells.
async fn verify_shares<E: Entity<Command = TallyCmd>>(
    refs: &[EntityRef<E>],
    messages: u64,
) -> anyhow::Result<()> {
    let n = refs.len() as u64;
    for (k, r) in refs.iter().enumerate() {
        let value = r.ask(TallyCmd::Read, ASK_TIMEOUT).await?;
        let want = share(k as u64, n, messages);
        if value != want {
            bail!(
                "entity {} handled {value} tells, expected {want}",
                r.entity_id()
            );
        }
    }
    Ok(())
}

/// Sends `messages` one after the other: `send(i)` returns false when a bounded queue is full,
/// and is then retried after yielding. Returns the number of retries.
async fn produce(
    messages: u64,
    mut send: impl FnMut(u64) -> anyhow::Result<bool>,
) -> anyhow::Result<u64> {
    let mut retries = 0;
    for i in 0..messages {
        while !send(i)? {
            retries += 1;
            tokio::task::yield_now().await;
        }
    }
    Ok(retries)
}

/// Sends `messages` one after the other, each waiting for room in its queue.
async fn produce_waiting<F: Future<Output = anyhow::Result<()>>>(
    messages: u64,
    mut send: impl FnMut(u64) -> F,
) -> anyhow::Result<u64> {
    for i in 0..messages {
        send(i).await?;
    }
    Ok(0)
}

/// A `tell` as [`produce`] wants it: false when the region's queue is full.
fn tell<E: Entity<Command = TallyCmd>>(r: &EntityRef<E>, add: u64) -> anyhow::Result<bool> {
    match r.try_tell(TallyCmd::Add(add)) {
        Ok(()) => Ok(true),
        Err(TellError::BufferFull) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Tells `messages` round-robin to `refs` from one spawned producer task; returns the refs,
/// the unix time (ns) of the first tell, how long sending took and the retries.
async fn tell_round_robin<E: Entity<Command = TallyCmd>>(
    refs: Vec<EntityRef<E>>,
    messages: u64,
    mode: SendMode,
) -> anyhow::Result<(Vec<EntityRef<E>>, u64, Duration, u64)> {
    let producer = tokio::spawn(async move {
        let n = refs.len() as u64;
        let pick = |i: u64| &refs[(i % n) as usize];
        let first = unix_ns();
        let started = Instant::now();
        let retries = match mode {
            SendMode::Retry => produce(messages, |i| tell(pick(i), 1)).await?,
            SendMode::Wait => {
                produce_waiting(messages, |i| async move {
                    Ok(pick(i).tell(TallyCmd::Add(1)).await?)
                })
                .await?
            }
        };
        anyhow::Ok((refs, first, started.elapsed(), retries))
    });
    producer.await?
}

/// This process's resident memory in bytes (`VmRSS` of `/proc/self/status`).
fn rss_bytes() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kb * 1024)
}

/// Prints `value` as one JSON object, or `line` as text.
fn report(json: bool, value: serde_json::Value, line: String) {
    if json {
        println!("{value}");
    } else {
        println!("{line}");
    }
}

// ---------------------------------------------------------------------------------------------
// `local`

async fn local_bench(a: LocalArgs) -> anyhow::Result<()> {
    if a.entities == 0 || a.messages == 0 {
        bail!("--entities and --messages must be positive");
    }
    let load = load_average();
    let node = BenchNode::start(Vec::new(), &[]).await?;
    node.wait_up(1).await?;
    let progress = Progress::new(a.messages);
    let kind = tally_kind(LOCAL_KIND, Arc::clone(&progress));
    let sharding = sharding_local(node.sharding.init(kind)?, &progress, &a).await?;
    let progress = Progress::new(a.messages);
    let kind = sync_tally_kind(LOCAL_SYNC_KIND, Arc::clone(&progress));
    let sync = sharding_local(node.sharding.init(kind)?, &progress, &a).await?;
    let raw = raw_local(&a, node.config.region.buffer_size.max(1)).await?;
    let ratio = sharding.per_second() / raw.per_second();
    let sync_ratio = sync.per_second() / raw.per_second();
    let value = json!({
        "benchmark": "sharding-local",
        "runtime": a.common.runtime,
        "send": a.send.name(),
        "entities": a.entities,
        "messages": a.messages,
        "sharding_msgs_per_s": sharding.per_second(),
        "sharding_elapsed_s": sharding.elapsed.as_secs_f64(),
        "sharding_send_s": sharding.send_time.as_secs_f64(),
        "sharding_buffer_full_retries": sharding.retries,
        "sync_msgs_per_s": sync.per_second(),
        "sync_elapsed_s": sync.elapsed.as_secs_f64(),
        "sync_buffer_full_retries": sync.retries,
        "sync_ratio_to_raw": sync_ratio,
        "raw_msgs_per_s": raw.per_second(),
        "raw_elapsed_s": raw.elapsed.as_secs_f64(),
        "raw_full_retries": raw.retries,
        "ratio_to_raw": ratio,
        "verified": true,
        "load1_before": load,
    });
    let line = format!(
        "sharding local ({}, {}): {} tells to {} entities: sharding {:.0} msgs/s ({} BufferFull retries), SyncEntity {:.0} msgs/s, raw tokio {:.0} msgs/s, ratios {ratio:.3} and {sync_ratio:.3} (load {load:.2})",
        a.common.runtime,
        a.send.name(),
        a.messages,
        a.entities,
        sharding.per_second(),
        sharding.retries,
        sync.per_second(),
        raw.per_second(),
    );
    report(a.common.json, value, line);
    Ok(())
}

/// Tells through sharding to active entities of `region`, whose handlers report to
/// `progress`; every entity's count is checked.
async fn sharding_local<E: Entity<Command = TallyCmd>>(
    region: EntityRegion<E>,
    progress: &Progress,
    a: &LocalArgs,
) -> anyhow::Result<Throughput> {
    let refs = entity_refs(&region, "e", a.entities);
    activate(&refs).await?;
    let (refs, first, send_time, retries) = tell_round_robin(refs, a.messages, a.send).await?;
    let last = progress.wait(DONE_LIMIT).await?;
    verify_shares(&refs, a.messages).await?;
    Ok(Throughput {
        sent: a.messages,
        received: a.messages,
        elapsed: Duration::from_nanos(last.saturating_sub(first)),
        send_time,
        retries,
    })
}

/// The same work without sharding: (entity id, command) through a bounded channel of the
/// region's capacity into one task that keeps the states in a `HashMap`.
async fn raw_local(a: &LocalArgs, capacity: usize) -> anyhow::Result<Throughput> {
    let ids: Vec<Arc<str>> = (0..a.entities)
        .map(|i| Arc::from(format!("e{i}")))
        .collect();
    let (tx, rx) = mpsc::channel::<(Arc<str>, u64)>(capacity);
    let progress = Progress::new(a.messages);
    let consumer = tokio::spawn(raw_consumer(rx, Arc::clone(&progress)));
    for id in &ids {
        tx.send((Arc::clone(id), 0)).await?;
    }
    let (messages, mode) = (a.messages, a.send);
    let producer = tokio::spawn(async move {
        let n = ids.len() as u64;
        let pick = |i: u64| (Arc::clone(&ids[(i % n) as usize]), 1);
        let first = unix_ns();
        let started = Instant::now();
        let retries = match mode {
            SendMode::Retry => {
                produce(messages, |i| match tx.try_send(pick(i)) {
                    Ok(()) => Ok(true),
                    Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
                    Err(mpsc::error::TrySendError::Closed(_)) => bail!("the consumer stopped"),
                })
                .await?
            }
            SendMode::Wait => {
                let tx = &tx;
                produce_waiting(messages, |i| async move {
                    tx.send(pick(i)).await.context("the consumer stopped")
                })
                .await?
            }
        };
        anyhow::Ok((ids, first, started.elapsed(), retries))
    });
    let (ids, first, send_time, retries) = producer.await??;
    let last = progress.wait(DONE_LIMIT).await?;
    let states = consumer.await?;
    for (k, id) in ids.iter().enumerate() {
        let want = share(k as u64, ids.len() as u64, a.messages);
        if states.get(id) != Some(&want) {
            bail!(
                "raw baseline: {id} counted {:?}, expected {want}",
                states.get(id)
            );
        }
    }
    Ok(Throughput {
        sent: a.messages,
        received: a.messages,
        elapsed: Duration::from_nanos(last.saturating_sub(first)),
        send_time,
        retries,
    })
}

async fn raw_consumer(
    mut rx: mpsc::Receiver<(Arc<str>, u64)>,
    progress: Arc<Progress>,
) -> HashMap<Arc<str>, u64> {
    let mut states: HashMap<Arc<str>, u64> = HashMap::new();
    let mut batch = Vec::with_capacity(RAW_BATCH);
    while rx.recv_many(&mut batch, RAW_BATCH).await > 0 {
        for (id, add) in batch.drain(..) {
            *states.entry(id).or_insert(0) += add;
            if add > 0 {
                progress.hit();
            }
        }
    }
    states
}

// ---------------------------------------------------------------------------------------------
// `remote`

async fn remote_bench(a: RemoteArgs) -> anyhow::Result<()> {
    if a.entities == 0 || a.messages == 0 || a.rate == 0 || a.duration_s == 0 {
        bail!("--entities, --messages, --rate and --duration-s must be positive");
    }
    if a.connections == 0 {
        bail!("--connections must be positive");
    }
    let (mut runs, mut kept) = (Vec::new(), Vec::new());
    for &transport in a.transport.transports() {
        let (run, setup) = remote_run(&a, transport).await?;
        runs.push(run);
        kept.extend(setup);
    }
    // With both transports, their nodes still run: measure them again in alternating turns,
    // so that both meet the machine at the same moments (see `turns`).
    let interleaved = match &mut kept[..] {
        [plain, tls] => {
            let ask_rounds = if a.only.contains(&RemotePart::Ask1) {
                a.duration_s
            } else {
                0
            };
            Some(turns::interleave(plain, tls, a.messages, a.send, ask_rounds).await?)
        }
        _ => None,
    };
    for setup in kept {
        setup.setup.peer.stop().await;
    }
    let header = format!("sharding remote ({}, {})", a.common.runtime, a.send.name());
    let mut runs = runs.into_iter();
    match (runs.next(), runs.next()) {
        (Some(run), None) => report(a.common.json, run.value, run.lines.join("\n")),
        (Some(plain), Some(tls)) => {
            let (value, text) =
                crate::bench_transports::side_by_side(&header, plain, tls, interleaved);
            report(a.common.json, value, text);
        }
        _ => bail!("no transport to measure"),
    }
    Ok(())
}

/// Every part of `bench sharding remote` asked for, with the nodes on `transport`. With
/// `--transport both`, the nodes are handed back still running, for the turns.
async fn remote_run(
    a: &RemoteArgs,
    transport: Transport,
) -> anyhow::Result<(RemoteRun, Option<turns::KeptSetup>)> {
    let parts: BTreeSet<RemotePart> = a.only.iter().copied().collect();
    let duration = Duration::from_secs(a.duration_s);
    let load = load_average();
    let tells_expected = if parts.contains(&RemotePart::Tells) {
        a.messages
    } else {
        0
    };
    let certs = match transport {
        Transport::Plain => None,
        Transport::Tls => Some(BenchCerts::generate(CLUSTER)?),
    };
    let sessions_before = TlsSessions::now();
    // Turns of tells follow only when both transports are measured.
    let both = a.transport == TransportChoice::Both;
    let turn_tells = if both && parts.contains(&RemotePart::Tells) {
        turns::tell_turn_size(a.messages)
    } else {
        0
    };
    let mut setup = RemoteSetup::start(tells_expected, certs.as_ref(), turn_tells).await?;
    // The raw peer runs on the same runtime kind as the sharding peer (both inherit ours).
    let expect = a.messages.to_string();
    let mut raw_peer = Peer::start("bench-peer", &["--mode", "raw", "--expect", &expect]).await?;
    let region = setup.proxy(REMOTE_KIND)?;
    let refs = entity_refs(&region, "e", a.entities);
    activate(&refs).await?;
    // Plain keeps the header it had before TLS was measured.
    let header = match transport {
        Transport::Plain => format!("sharding remote ({}, {})", a.common.runtime, a.send.name()),
        Transport::Tls => format!(
            "sharding remote ({}, {}, tls)",
            a.common.runtime,
            a.send.name()
        ),
    };
    let mut value = json!({
        "benchmark": "sharding-remote",
        "transport": transport.name(),
        "runtime": a.common.runtime,
        "send": a.send.name(),
        "entities": a.entities,
        "messages": a.messages,
        "duration_s": a.duration_s,
        "parts": parts.iter().map(|p| part_name(*p)).collect::<Vec<_>>(),
        "ask_id_for_sizes": TYPICAL_ASK_ID,
        "load1_before": load,
    });
    let mut lines = Vec::new();
    let mut figures = RemoteFigures::default();

    // What every entity answers to a read: its share of the tells, once they ran.
    let values: Vec<u64> = (0..a.entities)
        .map(|k| share(k, a.entities, tells_expected))
        .collect();
    let sizes = entity_sizes(&region, a.entities, &values)?;

    let refs = if parts.contains(&RemotePart::Tells) {
        let load = load_average();
        let (tells, refs_back) = remote_tells(&mut setup, refs, a.messages, a.send).await?;
        let sync_region = setup.sync_proxy()?;
        let sync_refs = entity_refs(&sync_region, "e", a.entities);
        activate(&sync_refs).await?;
        let (sync, _) = remote_tells(&mut setup, sync_refs, a.messages, a.send).await?;
        let tell_sizes: Vec<usize> = sizes.iter().map(|s| s.tell).collect();
        let raw = bench_raw::one_way(&mut raw_peer, &tell_sizes, a.messages).await?;
        let ratio = tells.per_second() / raw.per_second();
        let sync_ratio = sync.per_second() / raw.per_second();
        let mean_size = bench_frames::mean(&sizes, |s| s.tell);
        figures.tells_per_s = Some(tells.per_second());
        // The names of the fields from before the raw baseline are kept.
        for (k, v) in [
            ("tell_msgs_per_s", json!(tells.per_second())),
            ("tell_received", json!(tells.received)),
            ("tell_elapsed_s", json!(tells.elapsed.as_secs_f64())),
            ("tell_send_s", json!(tells.send_time.as_secs_f64())),
            ("tell_buffer_full_retries", json!(tells.retries)),
            ("tell_raw_msgs_per_s", json!(raw.per_second())),
            ("tell_raw_received", json!(raw.received)),
            ("tell_raw_elapsed_s", json!(raw.elapsed.as_secs_f64())),
            ("tell_ratio_to_raw", json!(ratio)),
            ("tell_sync_msgs_per_s", json!(sync.per_second())),
            ("tell_sync_buffer_full_retries", json!(sync.retries)),
            ("tell_sync_ratio_to_raw", json!(sync_ratio)),
            ("tell_payload_bytes_mean", json!(mean_size)),
            ("tell_load1_before", json!(load)),
            ("verified", json!(true)),
        ] {
            value[k] = v;
        }
        lines.push(format!(
            "{header} tells: {} of {mean_size:.1}-byte payloads (+5 framing): sharding {:.0} msgs/s ({} retries), SyncEntity {:.0} msgs/s ({} retries), raw TCP {:.0} msgs/s, ratios {ratio:.3} and {sync_ratio:.3} (load {load:.2})",
            a.messages,
            tells.per_second(),
            tells.retries,
            sync.per_second(),
            sync.retries,
            raw.per_second(),
        ));
        refs_back
    } else {
        refs
    };
    let refs: Arc<[Ref<()>]> = refs.into();
    let exchanges: Arc<[Exchange]> = sizes
        .iter()
        .map(|s| Exchange {
            request: s.ask,
            answer: s.reply,
        })
        .collect();
    let values: Arc<[u64]> = values.into();
    for (part, slots, key) in [
        (RemotePart::Ask1, 1, "ask1"),
        (RemotePart::Ask64, MANY_IN_FLIGHT, "ask64"),
    ] {
        if !parts.contains(&part) {
            continue;
        }
        let load = load_average();
        let sharding =
            closed_loop_asks(Arc::clone(&refs), slots, duration, Arc::clone(&values)).await?;
        let raw =
            bench_raw::closed_loop(&raw_peer.addr, slots, duration, Arc::clone(&exchanges)).await?;
        let cmp = ClosedLoopComparison::new(&sharding, &raw);
        if slots == 1 {
            figures.ask1_us = Some((
                sharding.latencies.quantile_us(0.5),
                sharding.latencies.quantile_us(0.99),
            ));
        }
        value[key] = json!({
            "in_flight": slots,
            "sharding": sharding.summary(),
            "raw": raw.summary(),
            "p50_ratio_to_raw": cmp.p50,
            "p99_ratio_to_raw": cmp.p99,
            "p999_ratio_to_raw": cmp.p999,
            "requests_per_s_ratio_to_raw": cmp.rate,
            "request_payload_bytes_mean": bench_frames::mean(&sizes, |s| s.ask),
            "answer_payload_bytes_mean": bench_frames::mean(&sizes, |s| s.reply),
            "load1_before": load,
        });
        lines.push(format!(
            "{header} ask, {slots} in flight, {}s: sharding {:.0} req/s, p50 {:.1} / p99 {:.1} / p99.9 {:.1} µs ({} failed); raw TCP {:.0} req/s, p50 {:.1} / p99 {:.1} / p99.9 {:.1} µs; ratios p50 {:.2} / p99 {:.2} / p99.9 {:.2}, req/s {:.3} (load {load:.2})",
            a.duration_s,
            sharding.per_second(),
            sharding.latencies.quantile_us(0.5),
            sharding.latencies.quantile_us(0.99),
            sharding.latencies.quantile_us(0.999),
            sharding.failed,
            raw.per_second(),
            raw.latencies.quantile_us(0.5),
            raw.latencies.quantile_us(0.99),
            raw.latencies.quantile_us(0.999),
            cmp.p50,
            cmp.p99,
            cmp.p999,
            cmp.rate,
        ));
    }

    if parts.contains(&RemotePart::Open) {
        let load = load_average();
        let asks = ask_latency(refs.to_vec(), a.rate, duration).await?;
        let raw =
            bench_raw::open_loop_requests(&raw_peer.addr, a.rate, duration, Arc::clone(&exchanges))
                .await?;
        let (ask, from_send) = (&asks.ask, &asks.from_send);
        // Both from the open-loop send: the raw side has no `ask` call to start from.
        let q = |l: &Latencies, q: f64| l.quantile_us(q);
        let (r50, r99) = (
            q(from_send, 0.5) / q(&raw.from_send, 0.5),
            q(from_send, 0.99) / q(&raw.from_send, 0.99),
        );
        for (k, v) in [
            ("ask_rate", json!(a.rate)),
            ("ask_duration_s", json!(a.duration_s)),
            ("asks_sent", json!(asks.sent)),
            ("asks_failed", json!(asks.failed)),
            ("asks_late", json!(asks.late)),
            ("late_threshold_ms", json!(LATE.as_millis() as u64)),
            ("ask", ask.summary()),
            ("ask_from_send", from_send.summary()),
            (
                "open_raw",
                json!({
                    "sent": raw.sent,
                    "failed": raw.failed,
                    "late": raw.late,
                    "from_send": raw.from_send.summary(),
                }),
            ),
            ("open_from_send_p50_ratio_to_raw", json!(r50)),
            ("open_from_send_p99_ratio_to_raw", json!(r99)),
            ("open_load1_before", json!(load)),
        ] {
            value[k] = v;
        }
        lines.push(format!(
            "{header} ask at {}/s (open loop): p50 {:.1} / p99 {:.1} / p99.9 {:.1} µs; from the open-loop send, incl. task spawn: p50 {:.1} / p99 {:.1} / p99.9 {:.1} µs ({} failed, {} late); raw TCP from the send: p50 {:.1} / p99 {:.1} / p99.9 {:.1} µs ({} failed, {} late); ratios from the send p50 {r50:.2} / p99 {r99:.2} (load {load:.2})",
            a.rate,
            ask.quantile_us(0.5),
            ask.quantile_us(0.99),
            ask.quantile_us(0.999),
            from_send.quantile_us(0.5),
            from_send.quantile_us(0.99),
            from_send.quantile_us(0.999),
            asks.failed,
            asks.late,
            q(&raw.from_send, 0.5),
            q(&raw.from_send, 0.99),
            q(&raw.from_send, 0.999),
            raw.failed,
            raw.late,
        ));
    }
    if parts.contains(&RemotePart::Handshake) {
        let load = load_average();
        let pid = setup.peer.pid().context("the peer process has no id")?;
        let cost = bench_handshake::open_connections(
            &setup.peer.addr,
            pid,
            setup.node.tls.as_ref(),
            CLUSTER,
            a.connections,
        )
        .await?;
        let (client_cpu, server_cpu) = cost.cpu_us_per_connection();
        let mut summary = cost.summary();
        summary["load1_before"] = json!(load);
        value["handshake"] = summary;
        lines.push(format!(
            "{header} new connections, one at a time: {} in {:.2} s, {:.0}/s; connect to accepted handshake p50 {:.1} / p99 {:.1} µs; CPU per connection {client_cpu:.0} µs dialling, {server_cpu:.0} µs on the node (load {load:.2})",
            cost.connections,
            cost.elapsed.as_secs_f64(),
            cost.per_second(),
            cost.latencies.quantile_us(0.5),
            cost.latencies.quantile_us(0.99),
        ));
        figures.handshake = Some(cost);
    }
    // The proxy's own connections (not the handshake part's, which bypass its transport).
    let sessions = TlsSessions::now().since(sessions_before);
    value["tls_sessions"] = json!({"inbound": sessions.inbound, "outbound": sessions.outbound});
    if transport == Transport::Tls && (sessions.inbound < 1.0 || sessions.outbound < 1.0) {
        bail!("the TLS run established no TLS session both ways: {sessions:?}");
    }
    raw_peer.stop().await;
    let kept = if both {
        let mut regions = vec![region];
        let turn_refs = if turn_tells > 0 {
            let turn_region = setup.proxy(turns::TURN_KIND)?;
            let refs = entity_refs(&turn_region, "e", a.entities);
            turns::activate_turn_entities(&refs).await?;
            regions.push(turn_region);
            Some(refs)
        } else {
            None
        };
        Some(turns::KeptSetup {
            setup,
            refs,
            values,
            turn_refs,
            _regions: regions,
            _certs: certs,
        })
    } else {
        setup.peer.stop().await;
        None
    };
    let run = RemoteRun {
        transport,
        value,
        lines,
        figures,
    };
    Ok((run, kept))
}

/// The name of a part as `--only` takes it.
fn part_name(p: RemotePart) -> &'static str {
    match p {
        RemotePart::Tells => "tells",
        RemotePart::Ask1 => "ask1",
        RemotePart::Ask64 => "ask64",
        RemotePart::Open => "open",
        RemotePart::Handshake => "handshake",
    }
}

/// The frame sizes of entities `e0 .. e<n-1>` of `region`, entity `k` answering `values[k]`.
fn entity_sizes<P: Probe>(
    region: &Region<P>,
    n: u64,
    values: &[u64],
) -> anyhow::Result<Vec<OpSizes>> {
    (0..n)
        .map(|k| {
            let id = format!("e{k}");
            op_sizes(REMOTE_KIND, &id, &region.shard_of(&id), values[k as usize])
        })
        .collect()
}

/// One-way tells through the proxy, timed from the first tell until the peer's entities have
/// handled the last; every entity's count is checked afterwards.
async fn remote_tells<E: Entity<Command = TallyCmd>>(
    setup: &mut RemoteSetup,
    refs: Vec<EntityRef<E>>,
    messages: u64,
    send: SendMode,
) -> anyhow::Result<(Throughput, Vec<EntityRef<E>>)> {
    let (refs, first, send_time, retries) = tell_round_robin(refs, messages, send).await?;
    let (count, _, last) = setup.peer.done().await?;
    let tells = Throughput {
        sent: messages,
        received: count,
        elapsed: Duration::from_nanos(last.saturating_sub(first)),
        send_time,
        retries,
    };
    verify_shares(&refs, messages).await?;
    Ok((tells, refs))
}

/// Sharding against its raw baseline: each figure divided by the raw one.
struct ClosedLoopComparison {
    p50: f64,
    p99: f64,
    p999: f64,
    rate: f64,
}

impl ClosedLoopComparison {
    fn new(sharding: &ClosedLoop, raw: &ClosedLoop) -> Self {
        let q = |c: &ClosedLoop, q: f64| c.latencies.quantile_us(q);
        ClosedLoopComparison {
            p50: q(sharding, 0.5) / q(raw, 0.5),
            p99: q(sharding, 0.99) / q(raw, 0.99),
            p999: q(sharding, 0.999) / q(raw, 0.999),
            rate: sharding.per_second() / raw.per_second(),
        }
    }
}

/// Asks (reads) with `slots` in flight for `duration`: one task per slot in this runtime,
/// each asking, awaiting the answer and asking again, over the entities in the order of
/// [`entity_of`]. Every answer is checked against `values` (what each entity holds).
async fn closed_loop_asks(
    refs: Arc<[Ref<()>]>,
    slots: usize,
    duration: Duration,
    values: Arc<[u64]>,
) -> anyhow::Result<ClosedLoop> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(slots);
    for slot in 0..slots {
        let (refs, values) = (Arc::clone(&refs), Arc::clone(&values));
        tasks.push(tokio::spawn(async move {
            let (mut latencies, mut failed) = (Latencies::new(), 0u64);
            let mut k = 0;
            while Instant::now() < deadline {
                let e = entity_of(slot, k, slots, refs.len());
                let t = Instant::now();
                match refs[e].ask(TallyCmd::Read, ASK_TIMEOUT).await {
                    Ok(v) if v == values[e] => latencies.record(t.elapsed().as_nanos() as u64),
                    Ok(v) => bail!(
                        "entity {} answered {v}, expected {}",
                        refs[e].entity_id(),
                        values[e]
                    ),
                    Err(_) => failed += 1,
                }
                k += 1;
            }
            anyhow::Ok((latencies, failed))
        }));
    }
    let (mut latencies, mut failed) = (Latencies::new(), 0);
    for t in tasks {
        let (l, f) = t.await??;
        latencies.merge(&l)?;
        failed += f;
    }
    Ok(ClosedLoop {
        slots,
        completed: latencies.len(),
        failed,
        elapsed: started.elapsed(),
        latencies,
    })
}

/// Asks at a fixed rate.
struct AskLatency {
    sent: u64,
    failed: u64,
    late: u64,
    /// From the `ask` call to its answer.
    ask: Latencies,
    /// From the open-loop sender's send time (before the task that asks is spawned).
    from_send: Latencies,
}

/// Asks (reads) round-robin over `refs` at `rate` per second for `duration`, in an open loop:
/// the sending thread spawns one task per ask at its slot, whatever earlier asks are doing.
async fn ask_latency<P: Probe>(
    refs: Vec<Ref<P>>,
    rate: u64,
    duration: Duration,
) -> anyhow::Result<AskLatency> {
    let epoch = Instant::now();
    let handle = tokio::runtime::Handle::current();
    let (sent, late, tasks) = tokio::task::spawn_blocking(move || {
        let n = refs.len() as u64;
        let mut tasks = Vec::new();
        let (sent, late, _) = open_loop(rate, duration, epoch, |seq, sent_ns| {
            let r = refs[(seq % n) as usize].clone();
            tasks.push(handle.spawn(async move {
                let asked = Instant::now();
                let answered = r.ask(TallyCmd::Read, ASK_TIMEOUT).await.is_ok();
                let end = Instant::now();
                let from_send = ((end - epoch).as_nanos() as u64).saturating_sub(sent_ns);
                answered.then(|| ((end - asked).as_nanos() as u64, from_send))
            }));
        });
        (sent, late, tasks)
    })
    .await?;
    let mut out = AskLatency {
        sent,
        failed: 0,
        late,
        ask: Latencies::new(),
        from_send: Latencies::new(),
    };
    for t in tasks {
        match t.await? {
            Some((ask, from_send)) => {
                out.ask.record(ask);
                out.from_send.record(from_send);
            }
            None => out.failed += 1,
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// `memory`

async fn memory_bench(a: MemoryArgs) -> anyhow::Result<()> {
    if a.entities == 0 {
        bail!("--entities must be positive");
    }
    let load = load_average();
    let node = BenchNode::start(Vec::new(), &[]).await?;
    node.wait_up(1).await?;
    let region = node.init(tally_kind(MEMORY_KIND, ()))?;
    // Warm every shard with one entity, so that only entities are created below.
    let shards = node.config.number_of_shards as usize;
    let warm: Vec<Ref<()>> = ids_in_distinct_shards(&region, "w", shards, &BTreeSet::new())?
        .iter()
        .map(|id| region.entity_ref(id))
        .collect();
    activate(&warm).await?;
    let expected = a.entities as usize + warm.len();
    drop(warm);
    settle().await;
    let before = rss_bytes()?;

    let started = Instant::now();
    let entities = a.entities;
    let creator = region.clone();
    let retries = tokio::spawn(async move {
        produce(entities, |i| tell(&creator.entity_ref(&format!("m{i}")), 1)).await
    })
    .await??;
    // Commands of one sender are handled in order: once the last entity answers, every
    // entity exists.
    region
        .entity_ref(&format!("m{}", a.entities - 1))
        .ask(TallyCmd::Read, ASK_TIMEOUT)
        .await?;
    let creation = started.elapsed();
    let live = wait_entities(&node.sharding, expected).await?;
    settle().await;
    let after = rss_bytes()?;

    let per_entity = after.saturating_sub(before) as f64 / a.entities as f64;
    let rate = a.entities as f64 / creation.as_secs_f64();
    let value = json!({
        "benchmark": "sharding-memory",
        "runtime": a.common.runtime,
        "entities": a.entities,
        "live_entities": live,
        "shards": shards,
        "rss_before_bytes": before,
        "rss_after_bytes": after,
        "bytes_per_entity": per_entity,
        "creation_s": creation.as_secs_f64(),
        "entities_per_s": rate,
        "buffer_full_retries": retries,
        "load1_before": load,
    });
    let line = format!(
        "sharding memory ({}): {} entities in {shards} warm shards: {per_entity:.1} bytes per entity (RSS {:.1} -> {:.1} MB), created at {rate:.0} entities/s ({retries} retries) (load {load:.2})",
        a.common.runtime,
        a.entities,
        before as f64 / 1e6,
        after as f64 / 1e6,
    );
    report(a.common.json, value, line);
    Ok(())
}

/// Lets finished work settle (freed buffers, idle handlers) before reading RSS.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Waits until `sharding` reports `expected` live entities of the memory kind.
async fn wait_entities(sharding: &Sharding, expected: usize) -> anyhow::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let live: usize = sharding
            .region_stats(MEMORY_KIND, Duration::from_secs(10))
            .await
            .context("the memory kind did not report its statistics")?
            .iter()
            .map(|(_, n)| n)
            .sum();
        if live >= expected {
            return Ok(live);
        }
        if Instant::now() > deadline {
            bail!("only {live} of {expected} entities alive after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Entity ids `<prefix><i>`, one in each of `n` distinct shards none of which is in `exclude`.
fn ids_in_distinct_shards<P: Probe>(
    region: &Region<P>,
    prefix: &str,
    n: usize,
    exclude: &BTreeSet<String>,
) -> anyhow::Result<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut ids = Vec::with_capacity(n);
    for i in 0..10_000_000u64 {
        if ids.len() == n {
            return Ok(ids);
        }
        let id = format!("{prefix}{i}");
        let shard = region.shard_of(&id).to_string();
        if !exclude.contains(&shard) && seen.insert(shard) {
            ids.push(id);
        }
    }
    bail!("could not find {n} distinct shards (is --shards above number-of-shards?)")
}

// ---------------------------------------------------------------------------------------------
// `first-message`

async fn first_message_bench(a: FirstArgs) -> anyhow::Result<()> {
    if a.shards == 0 {
        bail!("--shards must be positive");
    }
    let load = load_average();
    let (first, second) = if a.remote {
        let setup = RemoteSetup::start(0, None, 0).await?;
        let region = setup.proxy(FIRST_KIND)?;
        let samples = first_and_second(&region, a.shards).await?;
        setup.peer.stop().await;
        samples
    } else {
        let node = BenchNode::start(Vec::new(), &[]).await?;
        node.wait_up(1).await?;
        let region = node.init(tally_kind(FIRST_KIND, ()))?;
        first_and_second(&region, a.shards).await?
    };
    let place = if a.remote {
        "proxy, remote coordinator"
    } else {
        "one node, local coordinator"
    };
    let value = json!({
        "benchmark": "sharding-first-message",
        "runtime": a.common.runtime,
        "where": place,
        "shards": a.shards,
        "first": first.summary(),
        "second": second.summary(),
        "load1_before": load,
    });
    let line = format!(
        "sharding first-message ({}, {place}): {} fresh shards: first ask p50 {:.1} / p99 {:.1} / max {:.1} µs; second ask to the same entity p50 {:.1} / p99 {:.1} µs (load {load:.2})",
        a.common.runtime,
        a.shards,
        first.quantile_us(0.5),
        first.quantile_us(0.99),
        first.quantile_us(1.0),
        second.quantile_us(0.5),
        second.quantile_us(0.99),
    );
    report(a.common.json, value, line);
    Ok(())
}

/// Asks one entity in each of `shards` fresh shards twice, one after the other: the first ask
/// waits for the shard's allocation, the second finds it running.
async fn first_and_second<P: Probe>(
    region: &Region<P>,
    shards: usize,
) -> anyhow::Result<(Latencies, Latencies)> {
    // The region registers with its coordinator first; this ask waits for that, and its
    // shard is left out of the measurement.
    let warm = region.entity_ref("warm-up");
    warm.ask(TallyCmd::Read, ASK_TIMEOUT).await?;
    let exclude = BTreeSet::from([region.shard_of("warm-up").to_string()]);
    let ids = ids_in_distinct_shards(region, "f", shards, &exclude)?;
    let (mut first, mut second) = (Latencies::new(), Latencies::new());
    for id in ids {
        let r = region.entity_ref(&id);
        for samples in [&mut first, &mut second] {
            let t = Instant::now();
            r.ask(TallyCmd::Read, ASK_TIMEOUT).await?;
            samples.record(t.elapsed().as_nanos() as u64);
        }
    }
    Ok((first, second))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_messages() {
        for (n, m) in [(1, 5), (3, 10), (1000, 5_000_000), (7, 3)] {
            let total: u64 = (0..n).map(|k| share(k, n, m)).sum();
            assert_eq!(total, m);
        }
    }

    #[test]
    fn a_plain_tally_is_one_u64() {
        assert_eq!(std::mem::size_of::<Tally<()>>(), 8);
    }

    #[test]
    fn a_tally_command_is_a_u64_and_its_tag() {
        assert_eq!(std::mem::size_of::<TallyCmd>(), 16);
    }
}
