//! `shardik bench sharding cores`, local and `--remote`, runs to its end with tiny counts and
//! reports, for each worker count, commands handled by the CPU-bound entities (through a proxy
//! from another process with `--remote`, every ask answered) beside the plain tasks' rate.

mod support;

use support::run_to_end;

/// The JSON lines of `shardik bench sharding cores ARGS --json`, one per worker count.
fn cores(extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec![
        "bench",
        "sharding",
        "cores",
        "--work-us",
        "20",
        "--entities",
        "8",
        "--duration-s",
        "1",
        "--max-workers",
        "2",
        "--json",
    ];
    args.extend_from_slice(extra);
    run_to_end(&args)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn assert_measured(lines: &[serde_json::Value], benchmark: &str) {
    let workers: Vec<u64> = lines
        .iter()
        .map(|v| v["workers"].as_u64().unwrap())
        .collect();
    assert_eq!(workers, [1, 2], "{lines:?}");
    for v in lines {
        assert_eq!(v["benchmark"], benchmark);
        assert_eq!(v["work_us"], 20);
        assert!(v["sharded_per_s"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["plain_per_s"].as_f64().unwrap() > 0.0, "{v}");
        let ratio = v["sharded_per_s"].as_f64().unwrap() / v["plain_per_s"].as_f64().unwrap();
        // serde_json reads floats back to within the last bit or so.
        let reported = v["ratio_to_plain"].as_f64().unwrap();
        assert!((reported - ratio).abs() <= 1e-12 * ratio, "{v}");
    }
}

#[test]
fn the_local_benchmark_measures_every_worker_count() {
    let lines = cores(&[]);
    assert_measured(&lines, "sharding-cores");
    assert!(
        lines
            .iter()
            .all(|v| v["producers"] == 4 && v["send"] == "retry")
    );
}

#[test]
fn the_remote_benchmark_gets_every_ask_answered_from_the_other_process() {
    let lines = cores(&["--remote", "--in-flight", "8"]);
    assert_measured(&lines, "sharding-cores-remote");
    for v in &lines {
        assert_eq!(v["in_flight"], 8);
        assert_eq!(v["asks_failed"], 0, "{v}");
    }
}
