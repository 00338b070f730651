//! Each pattern example runs to the end and prints what it shows: each in a process of its
//! own, with its own small cluster on fresh ports, a fresh data directory and short join
//! timers.

use std::process::Command;

fn free_address() -> String {
    let port = shardik::testkit::free_port().expect("a free loopback port");
    format!("127.0.0.1:{port}")
}

/// Runs example `bin` with `nodes` fresh addresses; its standard output, and the addresses.
fn run(bin: &str, exe: &str, nodes: usize) -> (String, Vec<String>) {
    let data = tempfile::tempdir().unwrap();
    let addresses: Vec<String> = (0..nodes).map(|_| free_address()).collect();
    let output = Command::new(exe)
        .args(&addresses)
        .env("SHARDIK_PERSISTENCE__DATA_DIR", data.path().join("data"))
        .env("SHARDIK_CLUSTER__SEED_NODE_TIMEOUT", "300ms")
        .env("SHARDIK_CLUSTER__PERIODIC_TASKS_INITIAL_DELAY", "50ms")
        .env("SHARDIK_CLUSTER__GOSSIP_INTERVAL", "100ms")
        .env("SHARDIK_CLUSTER__LEADER_ACTIONS_INTERVAL", "100ms")
        .output()
        .unwrap_or_else(|e| panic!("{bin} does not start: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{bin}: exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    (stdout, addresses)
}

#[test]
fn event_sourced_refuses_with_its_own_error_and_survives_a_leave() {
    let (out, _) = run("event-sourced", env!("CARGO_BIN_EXE_event-sourced"), 2);
    assert_eq!(
        out,
        "deposited 100: balance 100\n\
         withdrew 30: balance 70\n\
         refused: 500 asked, 70 there\n\
         first node: Left\n\
         after the leave: balance 70\n\
         second node: Left\n"
    );
}

#[test]
fn durable_state_is_read_back_after_a_stop() {
    let (out, _) = run("durable-state", env!("CARGO_BIN_EXE_durable-state"), 1);
    assert_eq!(
        out,
        "visits: 2\nafter a stop: Ada Lovelace, 2 visits\nLeft\n"
    );
}

#[test]
fn remembered_entities_start_again_without_a_message() {
    let (out, _) = run("remembered", env!("CARGO_BIN_EXE_remembered"), 2);
    assert_eq!(
        out,
        "started 6 devices\n\
         first node: Left\n\
         running on the second node: d1 d2 d3 d4 d5 d6\n\
         second node: Left\n"
    );
}

#[test]
fn the_singleton_runs_on_the_oldest_and_moves_when_it_leaves() {
    let (out, _) = run("singleton", env!("CARGO_BIN_EXE_singleton"), 2);
    assert_eq!(
        out,
        "ticket 1 from the first node\n\
         ticket 2 from the first node\n\
         first node: Left\n\
         after the leave: ticket 1 from the second node\n\
         second node: Left\n"
    );
}

#[test]
fn daemon_workers_all_run_and_move_to_the_survivor() {
    let (out, addresses) = run("daemon", env!("CARGO_BIN_EXE_daemon"), 2);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    // Four workers running, wherever the coordinator put them.
    let running: u32 = lines[0]
        .trim_start_matches("running: ")
        .split(", ")
        .map(|part| part.split(' ').next().unwrap().parse::<u32>().unwrap())
        .sum();
    assert_eq!(running, 4, "{out}");
    assert_eq!(lines[1], "first node: Left");
    assert_eq!(
        lines[2],
        format!("after the leave: 4 on {}", addresses[1]),
        "{out}"
    );
    assert_eq!(lines[3], "second node: Left");
}
