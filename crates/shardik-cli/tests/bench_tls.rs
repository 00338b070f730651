//! `shardik bench sharding remote --transport both` really measures TLS beside plain TCP: with
//! tiny counts, the plain run establishes no TLS session and the TLS run establishes them both
//! ways (counted by the transport in `shardik_transport_tls_handshakes_total`), both runs
//! verify their tells and answer their asks (also in alternating turns afterwards), and the
//! ratios TLS/plain are reported.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous for a debug build on a loaded 2-core machine; the run takes seconds.
const LIMIT: Duration = Duration::from_secs(300);

/// Runs `shardik ARGS` to its end (killed after [`LIMIT`]): its stdout, or a failure with its
/// stderr.
fn run(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardik"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("shardik starts");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).map(|_| s)
    });
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`shardik {}` did not end within {LIMIT:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap().unwrap(), err.join().unwrap().unwrap());
    assert!(status.success(), "{status}: {err}");
    out
}

#[test]
fn both_transports_run_and_only_the_tls_run_uses_tls() {
    let out = run(&[
        "bench",
        "sharding",
        "remote",
        "--transport",
        "both",
        "--only",
        "tells,ask1,handshake",
        "--entities",
        "4",
        "--messages",
        "2000",
        "--duration-s",
        "1",
        "--connections",
        "20",
        "--json",
    ]);
    let last = out.lines().last().expect("some output");
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"));
    assert_eq!(v["benchmark"], "sharding-remote-tls-vs-plain");
    let (plain, tls) = (&v["plain"], &v["tls"]);
    assert_eq!(plain["transport"], "plain");
    assert_eq!(tls["transport"], "tls");

    // Sessions of the benchmark's own node: none over plain TCP; over TLS at least its
    // control and user connections to the peer, and the peer's back to it.
    assert_eq!(plain["tls_sessions"]["outbound"], 0.0);
    assert_eq!(plain["tls_sessions"]["inbound"], 0.0);
    let sessions = |way: &str| tls["tls_sessions"][way].as_f64().unwrap();
    assert!(sessions("outbound") >= 2.0, "{}", tls["tls_sessions"]);
    assert!(sessions("inbound") >= 2.0, "{}", tls["tls_sessions"]);

    for run in [plain, tls] {
        assert_eq!(run["verified"], true, "every entity counted its tells");
        assert_eq!(run["tell_received"], 2000);
        assert!(run["ask1"]["sharding"]["completed"].as_u64().unwrap() > 0);
        assert_eq!(run["ask1"]["sharding"]["failed"], 0);
        assert_eq!(run["handshake"]["connections"], 20);
        assert!(run["handshake"]["latency"]["p50_us"].as_f64().unwrap() > 0.0);
    }
    // Both transports' nodes, which the runs left running, measured again in alternating
    // turns: 10 turns of tells each, adding up to --messages, and asks with one in flight
    // (one turn each with --duration-s 1).
    let tell_turns = &v["tells_interleaved"];
    assert_eq!(tell_turns["rounds"], 10);
    assert_eq!(tell_turns["tells_per_turn"], 200);
    for transport in ["plain", "tls"] {
        assert_eq!(tell_turns[transport]["received"], 2000, "{tell_turns}");
    }
    let turns = &v["ask1_interleaved"];
    assert_eq!(turns["rounds"], 1);
    for transport in ["plain", "tls"] {
        assert!(
            turns[transport]["completed"].as_u64().unwrap() > 0,
            "{turns}"
        );
        assert_eq!(turns[transport]["failed"], 0);
    }
    let ratios = &v["tls_to_plain"];
    assert_eq!(ratios["ask1_from"], "interleaved");
    assert_eq!(ratios["tells_from"], "interleaved");
    for key in ["tell_msgs_per_s", "ask1_p50", "ask1_p99", "handshake_p50"] {
        let r = ratios[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {ratios}"));
        assert!(r.is_finite() && r > 0.0, "{key}: {r}");
    }
    assert!(ratios["tells_aim_met"].is_boolean());
    assert!(ratios["ask1_p50_aim_met"].is_boolean());
}
