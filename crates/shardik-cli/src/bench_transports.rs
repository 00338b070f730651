//! Plain TCP beside mutual TLS in one run (`bench sharding remote --transport both`): each
//! transport's run is reported as on its own, then one line (one JSON member) of ratios
//! TLS/plain, against issue 20's aims: proxy tells at least [`TELLS_AIM`] of plain, and the
//! median of an ask with one in flight at most [`ASK1_P50_AIM`] times plain. The cost of a
//! new connection has no aim; it is reported as the difference TLS makes.
//!
//! The ratios of tells and asks come from [`Interleaved`] turns when there are some: on a
//! shared machine both move more from one run to the next than TLS moves them, so both
//! transports are measured again in alternating turns (`bench_sharding/turns.rs`).

use std::time::Duration;

use serde_json::json;

use crate::bench_handshake::HandshakeCost;
use crate::bench_support::{ClosedLoop, Throughput};
use crate::bench_tls::Transport;

/// Proxy tells over TLS, as a share of plain TCP's rate, that the aim asks for at least.
pub(crate) const TELLS_AIM: f64 = 0.8;
/// The median ask (one in flight) over TLS, as a multiple of plain TCP's, that the aim allows
/// at most.
pub(crate) const ASK1_P50_AIM: f64 = 1.2;

/// One transport's run of `bench sharding remote`.
pub(crate) struct RemoteRun {
    pub(crate) transport: Transport,
    /// The JSON object the run prints on its own.
    pub(crate) value: serde_json::Value,
    /// The text lines the run prints on its own.
    pub(crate) lines: Vec<String>,
    /// What the comparison needs, for the parts that ran.
    pub(crate) figures: RemoteFigures,
}

/// The figures of one run that are compared across transports.
#[derive(Default)]
pub(crate) struct RemoteFigures {
    /// Proxy tells per second (to the async entity kind).
    pub(crate) tells_per_s: Option<f64>,
    /// Asks with one in flight: p50 and p99 in microseconds.
    pub(crate) ask1_us: Option<(f64, f64)>,
    /// Fresh connections, one at a time.
    pub(crate) handshake: Option<HandshakeCost>,
}

/// Both transports measured again in alternating turns, per part.
pub(crate) struct Interleaved {
    pub(crate) tells: Option<TellTurns>,
    pub(crate) ask1: Option<AskTurns>,
}

/// Proxy tells through both transports in alternating turns.
pub(crate) struct TellTurns {
    /// Turns of each transport.
    pub(crate) rounds: u64,
    /// Tells per turn.
    pub(crate) per_turn: u64,
    /// Plain TCP's turns, added up.
    pub(crate) plain: Throughput,
    /// TLS's turns, added up.
    pub(crate) tls: Throughput,
}

/// Asks with one in flight through both transports in alternating turns.
pub(crate) struct AskTurns {
    /// Turns of each transport.
    pub(crate) rounds: u64,
    /// Length of one turn.
    pub(crate) slice: Duration,
    /// Plain TCP's turns, merged.
    pub(crate) plain: ClosedLoop,
    /// TLS's turns, merged.
    pub(crate) tls: ClosedLoop,
}

impl TellTurns {
    fn summary(&self) -> serde_json::Value {
        let side = |t: &Throughput| {
            json!({
                "received": t.received,
                "elapsed_s": t.elapsed.as_secs_f64(),
                "msgs_per_s": t.per_second(),
                "buffer_full_retries": t.retries,
            })
        };
        json!({
            "rounds": self.rounds,
            "tells_per_turn": self.per_turn,
            "plain": side(&self.plain),
            "tls": side(&self.tls),
        })
    }
}

impl AskTurns {
    fn summary(&self) -> serde_json::Value {
        json!({
            "rounds": self.rounds,
            "slice_s": self.slice.as_secs_f64(),
            "plain": self.plain.summary(),
            "tls": self.tls.summary(),
        })
    }
}

/// p50 and p99 in microseconds.
fn p50_p99(c: &ClosedLoop) -> (f64, f64) {
    (c.latencies.quantile_us(0.5), c.latencies.quantile_us(0.99))
}

/// Both runs as they print alone, then their ratios: one JSON object
/// (`sharding-remote-tls-vs-plain`, with the runs under their transports' names) and the
/// text, the last line headed `header`. The ratios of the parts `interleaved` has turns of
/// come from those turns.
pub(crate) fn side_by_side(
    header: &str,
    plain: RemoteRun,
    tls: RemoteRun,
    interleaved: Option<Interleaved>,
) -> (serde_json::Value, String) {
    let (mut plain_figures, mut tls_figures) = (plain.figures, tls.figures);
    let Interleaved { tells, ask1 } = interleaved.unwrap_or(Interleaved {
        tells: None,
        ask1: None,
    });
    if let Some(turns) = &tells {
        plain_figures.tells_per_s = Some(turns.plain.per_second());
        tls_figures.tells_per_s = Some(turns.tls.per_second());
    }
    if let Some(turns) = &ask1 {
        plain_figures.ask1_us = Some(p50_p99(&turns.plain));
        tls_figures.ask1_us = Some(p50_p99(&turns.tls));
    }
    let (mut ratios, mut summary) = compare(&plain_figures, &tls_figures);
    if let Some(turns) = &tells {
        ratios["tells_from"] = json!("interleaved");
        summary = summary.replace(
            "proxy tells",
            &format!(
                "proxy tells ({} alternating turns of {} each)",
                turns.rounds, turns.per_turn
            ),
        );
    }
    if let Some(turns) = &ask1 {
        ratios["ask1_from"] = json!("interleaved");
        summary = summary.replace(
            "ask with 1 in flight",
            &format!(
                "ask with 1 in flight ({} alternating turns of {:?} each)",
                turns.rounds, turns.slice
            ),
        );
    }
    let mut value = json!({
        "benchmark": "sharding-remote-tls-vs-plain",
        "tls_to_plain": ratios,
    });
    if let Some(turns) = &tells {
        value["tells_interleaved"] = turns.summary();
    }
    if let Some(turns) = &ask1 {
        value["ask1_interleaved"] = turns.summary();
    }
    let mut lines = Vec::new();
    for (transport, run_value, run_lines) in [
        (plain.transport, plain.value, plain.lines),
        (tls.transport, tls.value, tls.lines),
    ] {
        value[transport.name()] = run_value;
        lines.extend(run_lines);
    }
    lines.push(format!("{header} TLS beside plain TCP: {summary}"));
    (value, lines.join("\n"))
}

/// The ratios TLS/plain of the parts both runs have (JSON) and a sentence of them.
fn compare(plain: &RemoteFigures, tls: &RemoteFigures) -> (serde_json::Value, String) {
    let mut ratios = json!({});
    let mut parts = Vec::new();
    if let (Some(p), Some(t)) = (plain.tells_per_s, tls.tells_per_s) {
        let r = t / p;
        ratios["tell_msgs_per_s"] = json!(r);
        ratios["tells_aim_met"] = json!(r >= TELLS_AIM);
        parts.push(format!(
            "proxy tells {:.2} M/s, plain {:.2} M/s: {r:.3} (aim at least {TELLS_AIM}: {})",
            t / 1e6,
            p / 1e6,
            met(r >= TELLS_AIM)
        ));
    }
    if let (Some((p50, p99)), Some((t50, t99))) = (plain.ask1_us, tls.ask1_us) {
        let (r50, r99) = (t50 / p50, t99 / p99);
        ratios["ask1_p50"] = json!(r50);
        ratios["ask1_p99"] = json!(r99);
        ratios["ask1_p50_aim_met"] = json!(r50 <= ASK1_P50_AIM);
        parts.push(format!(
            "ask with 1 in flight p50 {t50:.1} µs, plain {p50:.1} µs: {r50:.2} (aim at most {ASK1_P50_AIM}: {}); p99 {t99:.1} µs, plain {p99:.1} µs: {r99:.2}",
            met(r50 <= ASK1_P50_AIM)
        ));
    }
    if let (Some(p), Some(t)) = (&plain.handshake, &tls.handshake) {
        let (p50, t50) = (p.latencies.quantile_us(0.5), t.latencies.quantile_us(0.5));
        let (p_client, p_node) = p.cpu_us_per_connection();
        let (t_client, t_node) = t.cpu_us_per_connection();
        ratios["handshake_p50"] = json!(t50 / p50);
        ratios["handshake_connections_per_s"] = json!(t.per_second() / p.per_second());
        ratios["handshake_extra_p50_us"] = json!(t50 - p50);
        ratios["handshake_extra_client_cpu_us"] = json!(t_client - p_client);
        ratios["handshake_extra_server_cpu_us"] = json!(t_node - p_node);
        parts.push(format!(
            "new connection p50 {t50:.0} µs ({:.0}/s), plain {p50:.0} µs ({:.0}/s); CPU per connection {t_client:.0} µs dialling + {t_node:.0} µs on the node, plain {p_client:.0} + {p_node:.0} µs",
            t.per_second(),
            p.per_second(),
        ));
    }
    if parts.is_empty() {
        parts.push("no part to compare (run tells, ask1 or handshake)".to_string());
    }
    (ratios, parts.join("; "))
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(transport: Transport, tells: f64, ask1: (f64, f64)) -> RemoteRun {
        RemoteRun {
            transport,
            value: json!({ "transport": transport.name() }),
            lines: vec![format!("{} line", transport.name())],
            figures: RemoteFigures {
                tells_per_s: Some(tells),
                ask1_us: Some(ask1),
                handshake: None,
            },
        }
    }

    #[test]
    fn ratios_are_tls_over_plain_against_the_aims() {
        let (value, text) = side_by_side(
            "hdr",
            run(Transport::Plain, 4e6, (50.0, 80.0)),
            run(Transport::Tls, 3e6, (65.0, 100.0)),
            None,
        );
        let r = &value["tls_to_plain"];
        assert_eq!(r["tell_msgs_per_s"], 0.75);
        assert_eq!(r["tells_aim_met"], false);
        assert_eq!(r["ask1_p50"], 1.3);
        assert_eq!(r["ask1_p99"], 1.25);
        assert_eq!(r["ask1_p50_aim_met"], false);
        assert_eq!(value["plain"]["transport"], "plain");
        assert_eq!(value["tls"]["transport"], "tls");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[..2], ["plain line", "tls line"]);
        assert!(lines[2].starts_with("hdr TLS beside plain TCP: proxy tells 3.00 M/s"));
        assert!(lines[2].contains("NOT met"), "{}", lines[2]);
    }

    #[test]
    fn aims_met_at_their_bounds() {
        let (value, text) = side_by_side(
            "hdr",
            run(Transport::Plain, 1e6, (50.0, 80.0)),
            run(Transport::Tls, 0.8e6, (60.0, 80.0)),
            None,
        );
        assert_eq!(value["tls_to_plain"]["tells_aim_met"], true);
        assert_eq!(value["tls_to_plain"]["ask1_p50_aim_met"], true);
        assert!(!text.contains("NOT met"), "{text}");
    }

    /// `received` tells in `ms` milliseconds.
    fn tells(received: u64, ms: u64) -> Throughput {
        Throughput {
            sent: received,
            received,
            elapsed: Duration::from_millis(ms),
            send_time: Duration::from_millis(ms),
            retries: 0,
        }
    }

    /// Turns of `us` microseconds each.
    fn turns(us: &[u64]) -> ClosedLoop {
        let mut latencies = crate::bench_support::Latencies::new();
        for &v in us {
            latencies.record(v * 1000);
        }
        ClosedLoop {
            slots: 1,
            completed: us.len() as u64,
            failed: 0,
            elapsed: Duration::from_secs(1),
            latencies,
        }
    }

    /// With interleaved turns, the ratios are theirs, not the runs'.
    #[test]
    fn interleaved_turns_decide_the_asks_ratio() {
        let interleaved = Interleaved {
            tells: Some(TellTurns {
                rounds: 2,
                per_turn: 500,
                plain: tells(1000, 1000),
                tls: tells(1000, 1250),
            }),
            ask1: Some(AskTurns {
                rounds: 3,
                slice: Duration::from_secs(1),
                plain: turns(&[40, 50, 60]),
                tls: turns(&[44, 55, 66]),
            }),
        };
        let (value, text) = side_by_side(
            "hdr",
            run(Transport::Plain, 1e6, (50.0, 80.0)),
            run(Transport::Tls, 1e6, (90.0, 200.0)),
            Some(interleaved),
        );
        let r = &value["tls_to_plain"];
        assert_eq!(r["ask1_from"], "interleaved");
        // (Percentiles are the upper ends of their histogram buckets, within 0.1 %.)
        let p50 = r["ask1_p50"].as_f64().unwrap();
        assert!((p50 - 1.1).abs() < 0.003, "{p50}");
        assert_eq!(r["ask1_p50_aim_met"], true);
        assert_eq!(value["ask1_interleaved"]["rounds"], 3);
        assert_eq!(value["ask1_interleaved"]["tls"]["completed"], 3);
        assert!(text.contains("3 alternating turns of 1s each"), "{text}");
        // Tells: 1000 in 1 s against 1000 in 1.25 s, not the runs' equal rates.
        assert_eq!(r["tells_from"], "interleaved");
        assert_eq!(r["tell_msgs_per_s"], 0.8);
        assert_eq!(value["tells_interleaved"]["tls"]["received"], 1000);
        assert!(text.contains("2 alternating turns of 500 each"), "{text}");
    }
}
