//! The command-line contract of `shardik simulate`, `demo` and `passivation-sim`, and the
//! start-up refusals of `shardik node`.

use std::process::Command;

fn shardik(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardik"))
        .args(args)
        .output()
        .expect("runs")
}

fn last_json(out: &std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("some output");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

#[test]
fn simulate_distributed_data_prints_its_checks_as_one_json_line_and_replays() {
    let args = [
        "simulate",
        "--scenario",
        "distributed-data",
        "--nodes",
        "5",
        "--seed",
        "4",
        "--json",
    ];
    let out = shardik(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = last_json(&out);
    assert_eq!(v["scenario"], "distributed-data");
    assert_eq!(v["converged"], true, "{v}");
    assert!(v["acknowledged_writes"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["stale_reads"], 0, "{v}");
    assert_eq!(v["lost_writes"], 0, "{v}");
    assert_eq!(
        shardik(&args).stdout,
        out.stdout,
        "the same seed prints the same line"
    );
}

#[test]
fn simulate_json_has_the_documented_fields_and_replays() {
    for scenario in ["join", "crash", "partition", "churn"] {
        let out = shardik(&[
            "simulate",
            "--nodes",
            "5",
            "--seed",
            "3",
            "--scenario",
            scenario,
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{scenario}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = last_json(&out);
        assert_eq!(v["nodes"], 5);
        assert_eq!(v["seed"], 3);
        assert_eq!(v["scenario"], scenario);
        assert_eq!(v["converged"], true, "{scenario}: {v}");
        for key in [
            "simulated_ms_to_convergence",
            "gossip_rounds",
            "members_up",
            "members_removed",
            "gossip_bytes_per_node_per_s",
        ] {
            assert!(v[key].is_number(), "{scenario}: {key} missing in {v}");
        }
    }
    let a = shardik(&[
        "simulate",
        "--nodes",
        "5",
        "--seed",
        "9",
        "--scenario",
        "crash",
    ]);
    let b = shardik(&[
        "simulate",
        "--nodes",
        "5",
        "--seed",
        "9",
        "--scenario",
        "crash",
    ]);
    assert_eq!(
        a.stdout, b.stdout,
        "the same seed must print the same timeline"
    );
    assert!(String::from_utf8_lossy(&a.stdout).contains("MemberRemoved node-00004 (was Down)"));
}

#[test]
fn simulate_rejects_bad_input_with_a_clear_message() {
    let out = shardik(&["simulate", "--scenario", "explode"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scenario `explode`"));
    let out = shardik(&["simulate", "--nodes", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nodes must be at least 1"));
}

#[test]
fn real_demo_forms_heals_and_leaves_gracefully() {
    let out = shardik(&["demo"]);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("is unreachable"), "{text}");
    assert!(text.contains("is Removed (was Down)"), "{text}");
    assert!(text.contains("every node exited with 0"), "{text}");
    // After the full restart every counter is read back, or the demo says which did not
    // answer and why.
    let line = text
        .lines()
        .find(|l| l.contains(" of 3000 counters read back"))
        .unwrap_or_else(|| panic!("no read-back line: {text}"));
    let read_back: usize = line
        .split(" of 3000")
        .next()
        .and_then(|head| head.split_whitespace().last())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in: {line}"));
    assert!(
        read_back == 3000 || text.contains("did not answer within"),
        "{read_back} read back, without saying why the others did not answer: {text}"
    );
}

#[test]
fn simulated_demo_runs_to_the_end() {
    let out = shardik(&["demo", "--simulated"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("all 5 nodes Up"), "{text}");
    assert!(text.contains("MemberRemoved node-00004"), "{text}");
    assert!(text.contains("Checker violations: 0"), "{text}");
}

#[test]
fn passivation_sim_prints_a_table() {
    let out = shardik(&[
        "passivation-sim",
        "--synthetic",
        "loop",
        "--limit",
        "100",
        "--policy",
        "lru,mru",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("LRU 100") && text.contains("MRU 100"),
        "{text}"
    );
}

#[test]
fn node_refuses_bad_configuration_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("shardik-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[cluster]\ngosip-interval = \"1s\"\n").unwrap();
    let out = shardik(&[
        "node",
        "--bind",
        "127.0.0.1:0",
        "--config",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cluster.gosip-interval") && err.contains("cluster.gossip-interval"),
        "{err}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_shardik"))
        .args(["node", "--bind", "127.0.0.1:0"])
        .env("SHARDIK_CLUSTER__GOSSIP_INTERVAL", "fast")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cluster.gossip-interval") && err.contains("fast"),
        "{err}"
    );

    let out = shardik(&["node", "--bind", "not-an-address"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not-an-address"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `shardik node` with `args` and `env`, expecting it to stop on its own (a start-up
/// error) within 60 s; kills it and fails otherwise.
fn node_that_should_refuse_to_start(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shardik"));
    cmd.arg("node").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "the node started instead of refusing: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn node_refuses_management_writes_beyond_loopback_without_a_token() {
    let writes = (
        "SHARDIK_MANAGEMENT__HTTP__ROUTE_PROVIDERS_READ_ONLY",
        "false",
    );
    // The address comes from the command line, after the configuration was loaded.
    let out = node_that_should_refuse_to_start(
        &["--bind", "127.0.0.1:0", "--management", "0.0.0.0:0"],
        &[writes],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("management.http.auth-token-file") && err.contains("0.0.0.0"),
        "{err}"
    );

    // A token file that cannot be read stops the node too, naming the key and the file.
    let missing = std::env::temp_dir().join(format!("shardik-no-token-{}", std::process::id()));
    let missing = missing.display().to_string();
    // The token file is read before anything is bound: the node never listens on its
    // cluster port (a port nothing else uses: the test would see it answer otherwise).
    let bind = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .to_string();
    let out = node_that_should_refuse_to_start(
        &["--bind", bind.as_str(), "--management", "127.0.0.1:0"],
        &[
            writes,
            (
                "SHARDIK_MANAGEMENT__HTTP__AUTH_TOKEN_FILE",
                missing.as_str(),
            ),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("management.http.auth-token-file") && err.contains(&missing),
        "{err}"
    );
}
