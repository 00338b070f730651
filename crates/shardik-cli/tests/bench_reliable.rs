//! `shardik bench reliable` runs to its end with tiny counts and reports each path's rates
//! and their ratio; with `--paths`, only the pair asked for.

mod support;

use support::run_to_end;

/// The one JSON line of `shardik bench reliable` with tiny counts and `extra`.
fn reliable(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        "reliable",
        "--messages",
        "2000",
        "--entities",
        "10",
        "--senders",
        "4",
        "--rounds",
        "1",
        "--held",
        "200",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = run_to_end(&args);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not one JSON line ({e}): {out}"))
}

/// The pair `prefix` was measured: rates, and the ratio of one to the other.
fn assert_pair(v: &serde_json::Value, prefix: &str) {
    let tell = v[format!("{prefix}_tell_per_s")].as_f64().unwrap();
    let reliable = v[format!("{prefix}_reliable_per_s")].as_f64().unwrap();
    assert!(tell > 0.0 && reliable > 0.0, "{v}");
    let reported = v[format!("{prefix}_ratio_to_tell")].as_f64().unwrap();
    assert!(
        (reported - reliable / tell).abs() <= 1e-12 * reported,
        "{v}"
    );
}

#[test]
fn both_pairs_are_measured_by_default_and_one_with_paths() {
    let both = reliable(&[]);
    assert_eq!(both["messages"], 2000);
    assert_pair(&both, "durable");
    assert_pair(&both, "memory");
    assert!(both["bytes_per_unconfirmed"].as_f64().is_some(), "{both}");

    let memory = reliable(&["--paths", "memory"]);
    assert_pair(&memory, "memory");
    assert!(memory["durable_ratio_to_tell"].is_null(), "{memory}");
    assert!(memory["durable_tell_per_s"].is_null(), "{memory}");
}
