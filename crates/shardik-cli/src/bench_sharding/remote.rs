//! `bench sharding remote`: tells and asks from a proxy node to entities in a peer process, each
//! part beside its raw TCP baseline, over plain TCP, TLS or both.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use shardik_runtime::sharding::{Entity, EntityRef};

use super::asks::{ClosedLoopComparison, ask_latency, closed_loop_asks};
use super::common::{CLUSTER, Common, REMOTE_KIND, SendMode, report};
use super::entities::{activate, entity_refs, share, tell_round_robin, verify_shares};
use super::nodes::{Ref, Region, RemoteSetup};
use super::tally::{Probe, TallyCmd};
use super::turns;
use crate::bench_frames::{self, OpSizes, TYPICAL_ASK_ID, op_sizes};
use crate::bench_handshake;
use crate::bench_raw::{self, Exchange};
use crate::bench_support::{LATE, Latencies, Peer, Throughput, load_average};
use crate::bench_tls::{BenchCerts, TlsSessions, Transport, TransportChoice};
use crate::bench_transports::{RemoteFigures, RemoteRun};

/// Arguments of `shardik bench sharding remote`.
#[derive(Args, Debug)]
pub(super) struct RemoteArgs {
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
    pub(super) common: Common,
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

pub(super) async fn remote_bench(a: RemoteArgs) -> anyhow::Result<()> {
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
