//! A node whose seeds do not answer says so: a real `shardik node` process given a seed where
//! nothing listens logs, at WARN after `seed-node-timeout`, that it could not join, naming the
//! seed and why (the connection was refused), and keeps trying: once a node starts at that
//! address and forms the cluster, the waiting node joins it.

mod support;

use std::time::Duration;

use support::*;

/// The WARN lines of `log` (JSON, one event a line) that say the seeds did not let it in.
fn seed_warnings(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("\"level\":\"WARN\"") && l.contains("couldn't join seed nodes"))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_seeds_are_named_at_warn_and_the_node_joins_once_one_runs() {
    let http = client();
    let seed_addr = free_addr();
    // The tests' settings ask seeds for 1 s before the first report.
    let mut waiting = Node::spawn(NodeSpec::new("waiting", std::slice::from_ref(&seed_addr)));
    let log = waiting.log_path();
    let warning = eventually(
        "the waiting node warns that its seed does not answer",
        Duration::from_secs(20),
        &mut [&mut waiting],
        || {
            let lines = seed_warnings(&std::fs::read_to_string(&log).unwrap_or_default());
            async move {
                lines
                    .into_iter()
                    .next()
                    .ok_or_else(|| "no warning yet".to_string())
            }
        },
    )
    .await;
    assert!(
        warning.contains(&seed_addr),
        "the warning names the seed {seed_addr}: {warning}"
    );
    assert!(
        warning.to_lowercase().contains("connection refused"),
        "the warning says why: {warning}"
    );
    assert!(
        warning.contains("cluster.seed-nodes"),
        "the warning says what to check: {warning}"
    );
    // Not a member, so not ready.
    assert_eq!(
        status_of(&http, &waiting, "/ready").await.ok(),
        Some(503),
        "a node that has not joined is not ready"
    );

    // The seed starts at last and forms the cluster; the waiting node, still trying, joins.
    let mut seed = Node::spawn(NodeSpec {
        bind: seed_addr.clone(),
        ..NodeSpec::new("seed", std::slice::from_ref(&seed_addr))
    });
    let expected = [seed_addr.as_str(), waiting.addr()].map(str::to_string);
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    wait_all_up(&http, &mut [&mut seed, &mut waiting], &expected).await;
}
