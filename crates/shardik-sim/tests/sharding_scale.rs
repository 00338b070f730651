//! The scale scenario of [`shardik_sim::sharding::scale`]: a small cluster in the normal test
//! run (every phase must finish, with no violation), and the recorded 1 000-node run by hand.

use std::time::Instant as WallInstant;

use shardik_sim::sharding::scale::{ScaleSpec, one_entity_per_shard, run, run_with_progress};

#[test]
fn one_entity_per_shard_names_an_entity_of_every_shard() {
    let entities = one_entity_per_shard(500);
    assert_eq!(entities.len(), 500);
    let shards: std::collections::BTreeSet<_> = entities
        .iter()
        .map(|e| shardik_core::sharding::shard_id_for(e, 500).unwrap())
        .collect();
    assert_eq!(shards.len(), 500);
}

#[test]
fn a_small_cluster_goes_through_restarts_and_a_partition_with_one_home_per_shard() {
    let mut spec = ScaleSpec::new(1, 7, 70);
    spec.restarts = 2;
    spec.minority = 2;
    let report = run(&spec);
    assert!(report.passed(), "{report:#?}");
    assert_eq!(report.restarts.len(), 2, "{report:#?}");
    for restart in &report.restarts {
        assert!(restart.shards_hosted > 0, "{report:#?}");
    }
    let partition = report.partition.as_ref().expect("the partition ran");
    assert!(partition.shards_cut_off > 0, "{report:#?}");
    assert!(report.messages.delivered > 70, "{report:#?}");
    // Rebalancing gave every restarted node its share back: 70 / 7 = 10 shards each.
    assert!(
        report.restarts.iter().all(|r| r.refilled_s.is_some()),
        "{report:#?}"
    );
    assert!(partition.refilled_s.is_some(), "{report:#?}");
    assert!(report.shards_per_node.0 >= 10, "{report:#?}");
}

/// Reads `name` from the environment as a number, or `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Peak resident memory of this process (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// `SHARDIK_SCALE_NODES` (1 000), `SHARDIK_SCALE_SHARDS` (10 000), `SHARDIK_SCALE_SEED` (1),
/// `SHARDIK_SCALE_RESTARTS` (3), `SHARDIK_SCALE_MINORITY` (a tenth of the nodes); prints the
/// report as one JSON line with the wall time and peak memory.
#[test]
#[ignore = "1 000 nodes and 10 000 shards take minutes of wall time; run by hand in release (docs/PERFORMANCE.md)"]
fn a_thousand_nodes_with_ten_thousand_shards() {
    let nodes = env_or("SHARDIK_SCALE_NODES", 1_000);
    let mut spec = ScaleSpec::new(
        env_or("SHARDIK_SCALE_SEED", 1),
        nodes,
        env_or("SHARDIK_SCALE_SHARDS", 10_000),
    );
    spec.restarts = env_or("SHARDIK_SCALE_RESTARTS", spec.restarts);
    spec.minority = env_or("SHARDIK_SCALE_MINORITY", spec.minority);
    let wall = WallInstant::now();
    let report = run_with_progress(&spec, |line| {
        eprintln!("{:>8.1} s wall: {line}", wall.elapsed().as_secs_f64())
    });
    let mut json = serde_json::to_value(&report).expect("serializes");
    json["wall_s"] = wall.elapsed().as_secs_f64().into();
    json["peak_rss_bytes"] = peak_rss().into();
    println!("{json}");
    assert!(report.passed(), "{report:#?}");
}
