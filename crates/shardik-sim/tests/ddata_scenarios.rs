//! The distributed-data scenario: replicators on every node of a simulated cluster under
//! crashes, partitions, joins and leaves, with clients at random consistencies, checked.

use shardik_core::replicator::DeliberateFaults;
use shardik_sim::ddata::run_distributed_data;

/// Seeds from `SHARDIK_SIM_SEEDS` (`A..B`), or `default`.
fn seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    match std::env::var("SHARDIK_SIM_SEEDS") {
        Ok(s) => {
            let (a, b) = s.split_once("..").expect("SHARDIK_SIM_SEEDS=A..B");
            a.parse().unwrap()..b.parse().unwrap()
        }
        Err(_) => default,
    }
}

#[test]
fn a_few_seeds_run_clean_and_exercise_every_check() {
    let mut acknowledged = 0;
    let mut reads = 0;
    let mut prunings = 0;
    for seed in 1..6 {
        let (_, outcome) = run_distributed_data(5, seed, DeliberateFaults::default());
        assert!(
            outcome.violations.is_empty(),
            "seed {seed}: {:#?}",
            outcome.violations
        );
        assert!(outcome.converged);
        acknowledged += outcome.acknowledged_writes;
        reads += outcome.stats.majority_reads;
        prunings += outcome.stats.prunings_seen;
    }
    assert!(
        acknowledged > 1_000 && reads > 500,
        "{acknowledged} {reads}"
    );
    assert!(prunings > 0, "removed nodes' data was pruned in some run");
}

#[test]
fn the_same_seed_gives_the_same_outcome() {
    let (_, a) = run_distributed_data(5, 7, DeliberateFaults::default());
    let (_, b) = run_distributed_data(5, 7, DeliberateFaults::default());
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
}

/// Runs seeds until one shows a violation of the kind `caught` looks for; the seed.
fn first_caught(
    faults: DeliberateFaults,
    caught: impl Fn(&shardik_sim::ddata::DataOutcome) -> bool,
) -> Option<u64> {
    (1..60).find(|&seed| caught(&run_distributed_data(5, seed, faults.clone()).1))
}

#[test]
fn acknowledging_a_majority_write_one_reply_short_is_caught_as_a_stale_read() {
    let faults = DeliberateFaults {
        acknowledge_one_reply_short: true,
        ..DeliberateFaults::default()
    };
    let seed = first_caught(faults, |o| o.stale_reads > 0);
    assert!(seed.is_some(), "no seed caught the fault");
}

#[test]
fn skipping_prunings_safety_rule_is_caught() {
    let faults = DeliberateFaults {
        skip_pruning_safety_rule: true,
        ..DeliberateFaults::default()
    };
    let seed = first_caught(faults, |o| o.stats.pruned_reappeared > 0);
    assert!(seed.is_some(), "no seed caught the fault");
}

/// The sweep: `SHARDIK_SIM_SEEDS=1..2501` and so on (see `scripts/sim-sweep`).
#[test]
#[ignore]
fn many_seeds() {
    let mut failed = Vec::new();
    for seed in seeds(1..101) {
        let (_, outcome) = run_distributed_data(5, seed, DeliberateFaults::default());
        if !outcome.violations.is_empty() {
            eprintln!("seed {seed}: {:?}", outcome.violations);
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}
