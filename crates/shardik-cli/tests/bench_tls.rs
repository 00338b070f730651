//! `shardik bench sharding remote --transport both` really measures TLS beside plain TCP: with
//! tiny counts, the plain run establishes no TLS session and the TLS run establishes them both
//! ways (counted by the transport in `shardik_transport_tls_handshakes_total`), both runs
//! verify their tells and answer their asks (also in alternating turns afterwards), and the
//! ratios TLS/plain are reported.

mod support;

use support::run_to_end as run;

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
