//! The `passivation-sim` entry point: argument parsing, output formats, config files, errors.

use shardik_passivation_sim::SimError;
use support::trace;

mod support;
use shardik_passivation_sim::run_from_args;

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

#[test]
fn table_output_for_a_trace() {
    let out = run_from_args(&args(&format!(
        "--trace lirs:{} --limit 500 --policy lru,optimal",
        trace("ps").display()
    )))
    .unwrap();
    println!("{out}");
    assert!(out.contains("Run"));
    assert!(out.contains("║ LRU 500 │ 48.55 % │   10,448 │       5,376 │        4,876 ║"));
    assert!(out.contains("OPT 500 │ 58.12 %"));
}

#[test]
fn json_output_for_synthetic_runs() {
    let out = run_from_args(&args(
        "--synthetic loop --start 1 --end 1000 --events 10000 --shards 1 --limit 500,1000 --policy mru --json",
    ))
    .unwrap();
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["policy"], "mru");
    assert_eq!(lines[0]["limit"], 500);
    assert_eq!(lines[0]["shards"], 1);
    assert_eq!(lines[0]["regions"], 1);
    assert_eq!(lines[0]["accesses"], 10_000);
    assert_eq!(lines[1]["activations"], 1000);
    assert_eq!(lines[1]["passivations"], 0);
    assert_eq!(lines[1]["active_percent"], 90.0);
    // MRU on a loop twice the limit keeps half the ids resident
    assert!(lines[0]["active_percent"].as_f64().unwrap() > 40.0);
}

#[test]
fn joined_patterns_and_repeats() {
    let (ps, gli) = (trace("ps"), trace("gli"));
    let (ps, gli) = (ps.display(), gli.display());
    let joined = run_from_args(&args(&format!(
        "--trace joined:lirs:{ps},2*lirs:{gli} --policy lru --limit 100 --json"
    )))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(joined.trim()).unwrap();
    assert_eq!(v["accesses"], 10_448 + 2 * 6_015);
    let repeated = run_from_args(&args(&format!(
        "--trace lirs:{ps} --trace 2*lirs:{gli} --policy lru --limit 100 --json"
    )))
    .unwrap();
    assert_eq!(joined, repeated);
    let mixed = run_from_args(&args(&format!(
        "--trace lirs:{gli} --synthetic zipfian --events 5000 --seed 7 --policy default --limit 100 --json"
    )))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(mixed.trim()).unwrap();
    assert_eq!(v["accesses"], 6_015 + 5_000);
}

#[test]
fn synthetic_generators_are_seeded_and_deterministic() {
    for kind in [
        "uniform",
        "zipfian",
        "scrambled-zipfian",
        "shifting-zipfian",
    ] {
        let cmd = format!(
            "--synthetic {kind} --events 20000 --max 5000 --seed 3 --policy lru,lfu,default --limit 500 --json"
        );
        let a = run_from_args(&args(&cmd)).unwrap();
        let b = run_from_args(&args(&cmd)).unwrap();
        assert_eq!(a, b, "{kind}");
        let other = run_from_args(&args(&cmd.replace("--seed 3", "--seed 4"))).unwrap();
        assert_ne!(a, other, "{kind}");
    }
}

#[test]
fn config_file_runs() {
    let ps = trace("ps");
    let path = std::env::temp_dir().join(format!("passivation-sim-{}.json", std::process::id()));
    std::fs::write(
        &path,
        format!(
            r#"{{ "runs": [
                {{ "name": "LFU 250", "policy": "lfu", "limit": 250, "pattern": ["lirs:{ps}"] }},
                {{ "policy": "lru", "limit": 10, "shards": 1, "pattern": [{{ "synthetic": "loop", "start": 1, "end": 20, "events": 100 }}] }}
            ] }}"#,
            ps = ps.display()
        ),
    )
    .unwrap();
    let out = run_from_args(&args(&format!("--config {} --json", path.display()))).unwrap();
    std::fs::remove_file(&path).ok();
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["name"], "LFU 250");
    assert_eq!(lines[0]["activations"], 8_693);
    assert_eq!(lines[1]["active_percent"], 0.0);
}

#[test]
fn clear_errors() {
    let err = |s: &str| match run_from_args(&args(s)) {
        Err(SimError::Usage(m)) => m,
        other => panic!("expected usage error for `{s}`, got {other:?}"),
    };
    assert!(err("--policy lru --limit 10").contains("no access pattern"));
    assert!(err("--synthetic loop --policy fastest").contains("unknown policy `fastest`"));
    assert!(err("--synthetic loop --limit ten").contains("--limit: invalid number `ten`"));
    assert!(err("--synthetic spiral").contains("unknown synthetic pattern `spiral`"));
    assert!(err("--trace nope:/x").contains("unknown trace format `nope`"));
    assert!(err("--trace lirs").contains("FORMAT:PATH"));
    assert!(err("--events 5").contains("must follow --synthetic"));
    assert!(err("--synthetic loop --shards 0").contains("at least 1"));
    assert!(err("--synthetic loop --shards 4294967295").contains("at most 2147483647"));
    assert!(
        err("--synthetic uniform --min 0 --max 18446744073709551615 --events 10 --policy lru --limit 10")
            .contains("too wide")
    );
    assert!(err("--frobnicate").contains("unknown argument `--frobnicate`"));
    assert!(err("--shards").contains("--shards needs a value"));
    assert!(err("--help").contains("--trace"));
    assert!(matches!(
        run_from_args(&args("--trace lirs:/does/not/exist --limit 1 --policy lru")),
        Err(SimError::Io(_))
    ));
}

/// An ARC trace line that names more ids than any real trace does is refused before anything
/// is allocated for it.
#[test]
fn an_arc_line_with_a_huge_count_is_refused() {
    let dir = std::env::temp_dir().join(format!("arc-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("huge.arc");
    std::fs::write(&path, "0 3 0 0\n0 9223372036854775807 0 0\n").unwrap();
    let result = run_from_args(&args(&format!(
        "--trace arc:{} --limit 10 --policy lru",
        path.display()
    )));
    let _ = std::fs::remove_dir_all(&dir);
    let message = format!("{:?}", result.expect_err("refused"));
    assert!(message.contains("out of range"), "{message}");
}
