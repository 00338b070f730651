//! The example runs to the end: it forms its one-node cluster, counts, and leaves.

use std::process::Command;

#[test]
fn counts_and_leaves() {
    let port = shardik::testkit::free_port().expect("a free loopback port");
    let output = Command::new(env!("CARGO_BIN_EXE_counter"))
        .arg(format!("127.0.0.1:{port}"))
        // Short join timers, so the test does not wait out the defaults' seconds.
        .env("SHARDIK_CLUSTER__SEED_NODE_TIMEOUT", "300ms")
        .env("SHARDIK_CLUSTER__PERIODIC_TASKS_INITIAL_DELAY", "50ms")
        .env("SHARDIK_CLUSTER__GOSSIP_INTERVAL", "100ms")
        .env("SHARDIK_CLUSTER__LEADER_ACTIONS_INTERVAL", "100ms")
        .output()
        .expect("the example starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(stdout, "counter-42 = 2\nLeft\n");
}
