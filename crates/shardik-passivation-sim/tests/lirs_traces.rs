//! Replays the bundled LIRS traces (`traces/`: glimpse, multi3, postgres) with 10 shards in 1
//! region and compares every policy row with the reference's published table.

use shardik_passivation_sim::{AccessPattern, Run, SimPolicy, TraceCache, TraceFormat, simulate};
use support::trace;

mod support;

/// (trace, policy, per-region limit, published active %, accesses, activations, passivations)
pub const PUBLISHED: &[(&str, &str, usize, f64, u64, u64, u64)] = &[
    ("gli", "optimal", 250, 17.70, 6_016, 4_951, 4_701),
    ("gli", "optimal", 500, 34.33, 6_016, 3_951, 3_451),
    ("gli", "optimal", 1000, 53.14, 6_016, 2_819, 1_819),
    ("gli", "optimal", 1500, 57.95, 6_016, 2_530, 1_030),
    ("gli", "lru", 250, 0.91, 6_016, 5_961, 5_711),
    ("gli", "lru", 500, 0.95, 6_016, 5_959, 5_459),
    ("gli", "lru", 1000, 11.20, 6_016, 5_342, 4_342),
    ("gli", "lru", 1500, 36.55, 6_016, 3_817, 2_317),
    ("gli", "slru", 250, 1.38, 6_016, 5_933, 5_683),
    ("gli", "slru", 500, 1.38, 6_016, 5_933, 5_433),
    ("gli", "slru", 1000, 31.33, 6_016, 4_131, 3_131),
    ("gli", "slru", 1500, 51.85, 6_016, 2_897, 1_397),
    ("gli", "s4lru", 250, 1.38, 6_016, 5_933, 5_693),
    ("gli", "s4lru", 500, 1.38, 6_016, 5_933, 5_453),
    ("gli", "s4lru", 1000, 19.70, 6_016, 4_831, 3_831),
    ("gli", "s4lru", 1500, 48.02, 6_016, 3_127, 1_647),
    ("gli", "mru", 250, 14.78, 6_016, 5_127, 4_877),
    ("gli", "mru", 500, 31.40, 6_016, 4_127, 3_627),
    ("gli", "mru", 1000, 48.62, 6_016, 3_091, 2_091),
    ("gli", "mru", 1500, 53.37, 6_016, 2_805, 1_305),
    ("gli", "lfu", 250, 1.38, 6_016, 5_933, 5_683),
    ("gli", "lfu", 500, 1.38, 6_016, 5_933, 5_433),
    ("gli", "lfu", 1000, 31.33, 6_016, 4_131, 3_131),
    ("gli", "lfu", 1500, 51.85, 6_016, 2_897, 1_397),
    ("gli", "lfuda", 250, 1.11, 6_016, 5_949, 5_699),
    ("gli", "lfuda", 500, 1.25, 6_016, 5_941, 5_441),
    ("gli", "lfuda", 1000, 16.37, 6_016, 5_031, 4_031),
    ("gli", "lfuda", 1500, 51.85, 6_016, 2_897, 1_397),
    ("gli", "lru-fs-slru", 250, 13.43, 6_016, 5_208, 4_958),
    ("gli", "lru-fs-slru", 500, 32.40, 6_016, 4_067, 3_567),
    ("gli", "lru-fs-slru", 1000, 50.83, 6_016, 2_958, 1_958),
    ("gli", "lru-fs-slru", 1500, 53.54, 6_016, 2_795, 1_295),
    ("gli", "lru-fs-slru-hc", 250, 13.43, 6_016, 5_208, 4_958),
    ("gli", "lru-fs-slru-hc", 500, 32.40, 6_016, 4_067, 3_567),
    ("gli", "lru-fs-slru-hc", 1000, 50.83, 6_016, 2_958, 1_958),
    ("gli", "lru-fs-slru-hc", 1500, 53.54, 6_016, 2_795, 1_295),
    ("multi3", "optimal", 100, 31.20, 30_241, 20_807, 20_707),
    ("multi3", "optimal", 200, 38.47, 30_241, 18_607, 18_407),
    ("multi3", "optimal", 400, 47.14, 30_241, 15_986, 15_586),
    ("multi3", "optimal", 800, 53.53, 30_241, 14_054, 13_254),
    ("multi3", "optimal", 1600, 64.14, 30_241, 10_844, 9_244),
    ("multi3", "lru", 100, 6.53, 30_241, 28_266, 28_166),
    ("multi3", "lru", 200, 14.38, 30_241, 25_891, 25_691),
    ("multi3", "lru", 400, 27.55, 30_241, 21_909, 21_509),
    ("multi3", "lru", 800, 35.97, 30_241, 19_364, 18_564),
    ("multi3", "lru", 1600, 44.23, 30_241, 16_865, 15_265),
    ("multi3", "slru", 100, 9.22, 30_241, 27_454, 27_354),
    ("multi3", "slru", 200, 22.41, 30_241, 23_463, 23_263),
    ("multi3", "slru", 400, 29.94, 30_241, 21_186, 20_786),
    ("multi3", "slru", 800, 37.30, 30_241, 18_961, 18_161),
    ("multi3", "slru", 1600, 46.51, 30_241, 16_177, 14_577),
    ("multi3", "s4lru", 100, 8.43, 30_241, 27_691, 27_611),
    ("multi3", "s4lru", 200, 22.62, 30_241, 23_401, 23_201),
    ("multi3", "s4lru", 400, 30.10, 30_241, 21_139, 20_739),
    ("multi3", "s4lru", 800, 37.30, 30_241, 18_962, 18_162),
    ("multi3", "s4lru", 1600, 46.51, 30_241, 16_177, 14_577),
    ("multi3", "mru", 100, 2.41, 30_241, 29_512, 29_412),
    ("multi3", "mru", 200, 4.20, 30_241, 28_970, 28_770),
    ("multi3", "mru", 400, 7.21, 30_241, 28_062, 27_662),
    ("multi3", "mru", 800, 14.11, 30_241, 25_973, 25_173),
    ("multi3", "mru", 1600, 26.31, 30_241, 22_284, 20_684),
    ("multi3", "lfu", 100, 8.88, 30_241, 27_557, 27_457),
    ("multi3", "lfu", 200, 22.14, 30_241, 23_547, 23_347),
    ("multi3", "lfu", 400, 29.85, 30_241, 21_213, 20_813),
    ("multi3", "lfu", 800, 37.30, 30_241, 18_961, 18_161),
    ("multi3", "lfu", 1600, 46.51, 30_241, 16_177, 14_577),
    ("multi3", "lfuda", 100, 10.16, 30_241, 27_168, 27_068),
    ("multi3", "lfuda", 200, 22.99, 30_241, 23_290, 23_090),
    ("multi3", "lfuda", 400, 30.50, 30_241, 21_019, 20_619),
    ("multi3", "lfuda", 800, 37.25, 30_241, 18_977, 18_177),
    ("multi3", "lfuda", 1600, 46.21, 30_241, 16_267, 14_667),
    ("multi3", "lru-fs-slru", 100, 25.96, 30_241, 22_389, 22_289),
    ("multi3", "lru-fs-slru", 200, 32.56, 30_241, 20_396, 20_196),
    ("multi3", "lru-fs-slru", 400, 42.64, 30_241, 17_347, 16_947),
    ("multi3", "lru-fs-slru", 800, 46.94, 30_241, 16_045, 15_245),
    ("multi3", "lru-fs-slru", 1600, 57.65, 30_241, 12_807, 11_207),
    (
        "multi3",
        "lru-fs-slru-hc",
        100,
        24.74,
        30_241,
        22_760,
        22_660,
    ),
    (
        "multi3",
        "lru-fs-slru-hc",
        200,
        32.38,
        30_241,
        20_450,
        20_250,
    ),
    (
        "multi3",
        "lru-fs-slru-hc",
        400,
        42.63,
        30_241,
        17_348,
        16_948,
    ),
    (
        "multi3",
        "lru-fs-slru-hc",
        800,
        47.11,
        30_241,
        15_994,
        15_194,
    ),
    (
        "multi3",
        "lru-fs-slru-hc",
        1600,
        57.65,
        30_241,
        12_807,
        11_207,
    ),
    ("ps", "optimal", 125, 35.16, 10_448, 6_774, 6_654),
    ("ps", "optimal", 250, 53.33, 10_448, 4_876, 4_626),
    ("ps", "optimal", 500, 58.12, 10_448, 4_376, 3_876),
    ("ps", "optimal", 1000, 67.69, 10_448, 3_376, 2_376),
    ("ps", "lru", 125, 12.19, 10_448, 9_174, 9_054),
    ("ps", "lru", 250, 13.95, 10_448, 8_991, 8_741),
    ("ps", "lru", 500, 48.55, 10_448, 5_376, 4_876),
    ("ps", "lru", 1000, 48.55, 10_448, 5_376, 4_376),
    ("ps", "slru", 125, 9.34, 10_448, 9_472, 9_362),
    ("ps", "slru", 250, 16.80, 10_448, 8_693, 8_443),
    ("ps", "slru", 500, 52.59, 10_448, 4_953, 4_453),
    ("ps", "slru", 1000, 52.59, 10_448, 4_953, 3_953),
    ("ps", "s4lru", 125, 9.34, 10_448, 9_472, 9_352),
    ("ps", "s4lru", 250, 16.80, 10_448, 8_693, 8_453),
    ("ps", "s4lru", 500, 51.95, 10_448, 5_020, 4_540),
    ("ps", "s4lru", 1000, 52.59, 10_448, 4_953, 3_953),
    ("ps", "mru", 125, 14.23, 10_448, 8_961, 8_841),
    ("ps", "mru", 250, 30.84, 10_448, 7_226, 6_976),
    ("ps", "mru", 500, 45.67, 10_448, 5_676, 5_176),
    ("ps", "mru", 1000, 64.41, 10_448, 3_718, 2_718),
    ("ps", "lfu", 125, 9.34, 10_448, 9_472, 9_352),
    ("ps", "lfu", 250, 16.80, 10_448, 8_693, 8_443),
    ("ps", "lfu", 500, 52.59, 10_448, 4_953, 4_453),
    ("ps", "lfu", 1000, 52.59, 10_448, 4_953, 3_953),
    ("ps", "lfuda", 125, 12.89, 10_448, 9_101, 8_981),
    ("ps", "lfuda", 250, 16.79, 10_448, 8_694, 8_444),
    ("ps", "lfuda", 500, 52.58, 10_448, 4_954, 4_454),
    ("ps", "lfuda", 1000, 52.58, 10_448, 4_954, 3_954),
    ("ps", "lru-fs-slru", 125, 30.64, 10_448, 7_247, 7_127),
    ("ps", "lru-fs-slru", 250, 52.41, 10_448, 4_972, 4_722),
    ("ps", "lru-fs-slru", 500, 55.98, 10_448, 4_599, 4_099),
    ("ps", "lru-fs-slru", 1000, 66.56, 10_448, 3_494, 2_494),
    ("ps", "lru-fs-slru-hc", 125, 29.96, 10_448, 7_318, 7_198),
    ("ps", "lru-fs-slru-hc", 250, 52.38, 10_448, 4_975, 4_725),
    ("ps", "lru-fs-slru-hc", 500, 55.98, 10_448, 4_599, 4_099),
    ("ps", "lru-fs-slru-hc", 1000, 66.56, 10_448, 3_494, 2_494),
];

fn tolerance(policy: &str) -> f64 {
    if policy.starts_with("lru-fs") {
        0.5
    } else {
        0.1
    }
}

fn run_for(name: &str, policy: &str, limit: usize) -> Run {
    let (label, policy_spec) = SimPolicy::parse(policy).unwrap();
    Run {
        name: format!("{label} {limit}"),
        policy: policy_spec,
        policy_name: policy.to_string(),
        per_region_limit: limit,
        shards: 10,
        regions: 1,
        pattern: AccessPattern::Trace {
            format: TraceFormat::Lirs,
            path: trace(name),
        },
    }
}

/// Every published row: hit rate within tolerance (0.1 pp single policies, 0.5 pp composite) and,
/// beyond what was asked, activations and passivations exactly equal. The published standalone
/// SLRU/S4LRU rows were produced with all segment limits floored, so those rows replay
/// `slru-floor` / `s4lru-floor`. glimpse ends with an empty line that the reference replays as
/// one more (activating) access for id "" and that we skip, hence `extra`.
fn check_trace(name: &str) {
    let mut cache = TraceCache::default();
    let extra = u64::from(name == "gli");
    let mut failures = Vec::new();
    for &(t, policy, limit, published, accesses, activations, passivations) in PUBLISHED {
        if t != name {
            continue;
        }
        let replayed = match policy {
            "slru" => "slru-floor",
            "s4lru" => "s4lru-floor",
            p => p,
        };
        let run = run_for(name, replayed, limit);
        let stats = simulate(&run, &mut cache).unwrap();
        let ours = stats.active_percent();
        let diff = ours - published;
        println!(
            "{name:7} {:>20} ours {ours:6.2} % published {published:6.2} % diff {diff:+.2}  activations {} vs {activations}  passivations {} vs {passivations}",
            run.name, stats.activations, stats.passivations
        );
        if diff.abs() > tolerance(policy) + 1e-9
            || stats.accesses + extra != accesses
            || stats.activations + extra != activations
            || stats.passivations + extra != passivations
        {
            failures.push(format!(
                "{name} {}: ours {ours:.2} published {published:.2}",
                run.name
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "rows outside tolerance:\n{}",
        failures.join("\n")
    );
}

/// With exact segment totals (level 0 takes whatever the other levels' floored shares leave,
/// so the levels add up to the limit, as current Pekko does; our default), every SLRU/S4LRU row stays within 0.1 pp except multi3 S4LRU 100, where
/// the exact total (10 per shard instead of the floored 8) hits more often: 10.21 % vs 8.43 %.
#[test]
fn exact_segment_totals_stay_close_to_published() {
    let mut cache = TraceCache::default();
    for &(t, policy, limit, published, ..) in PUBLISHED {
        if !(policy == "slru" || policy == "s4lru") {
            continue;
        }
        let stats = simulate(&run_for(t, policy, limit), &mut cache).unwrap();
        let ours = stats.active_percent();
        if t == "multi3" && policy == "s4lru" && limit == 100 {
            assert_eq!(stats.activations, 27_153, "known divergence row changed");
            assert!(ours > published, "exact totals should hit more often");
        } else {
            assert!(
                (ours - published).abs() <= 0.1,
                "{t} {policy} {limit}: {ours:.2} vs {published:.2}"
            );
        }
    }
}

#[test]
fn glimpse_matches_published() {
    check_trace("gli");
}

#[test]
fn multi3_matches_published() {
    check_trace("multi3");
}

#[test]
fn postgres_matches_published() {
    check_trace("ps");
}
