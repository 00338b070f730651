//! The reliable-delivery part of `shardik demo`, as calls on the nodes' management API: hand
//! increments of the `reliable-counter`s to a node's reliable producer (`--demo-producer`),
//! see how many it holds unconfirmed, wait until it holds none, and read the counters back
//! against what it accepted.

use std::time::{Duration, Instant};

use crate::mgmt_client::{get_ok, request};

/// Reliable counters the demo drives (`r0`, `r1`, ...).
pub(crate) const RELIABLE_COUNTERS: usize = 300;

/// Increments handed over per counter and round.
const TIMES: u64 = 10;

/// Hands `TIMES` increments of every reliable counter to the producer behind `producer`'s
/// management port, adding what it accepted to `accepted`. Returns the increments accepted.
pub(crate) fn hand_over(producer: u16, accepted: &mut [u64]) -> u64 {
    let mut total = 0;
    for (i, counted) in accepted.iter_mut().enumerate() {
        let path = format!("/demo/producer/increment/r{i}?times={TIMES}");
        let n = request(producer, "POST", &path)
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
            .and_then(|v| v["accepted"].as_u64())
            .unwrap_or(0);
        *counted += n;
        total += n;
    }
    total
}

/// Hands 200 increments of each of the first twenty reliable counters over at once, one
/// request per counter in parallel: faster than the counters can process them, so that many
/// are still unconfirmed when the last request is answered. Returns the increments accepted.
pub(crate) fn burst(producer: u16, accepted: &mut [u64]) -> u64 {
    let counts: Vec<u64> = std::thread::scope(|scope| {
        let requests: Vec<_> = (0..20.min(accepted.len()))
            .map(|i| {
                scope.spawn(move || {
                    let path = format!("/demo/producer/increment/r{i}?times=200");
                    request(producer, "POST", &path)
                        .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
                        .and_then(|v| v["accepted"].as_u64())
                        .unwrap_or(0)
                })
            })
            .collect();
        requests
            .into_iter()
            .map(|r| r.join().unwrap_or(0))
            .collect()
    });
    for (counted, n) in accepted.iter_mut().zip(&counts) {
        *counted += n;
    }
    counts.iter().sum()
}

/// How many accepted increments the producer holds unconfirmed.
pub(crate) fn unconfirmed(producer: u16) -> Option<u64> {
    get_ok(producer, "/demo/producer")
        .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
        .and_then(|v| v["unconfirmed"].as_u64())
}

/// Waits until the producer holds nothing unconfirmed, for at most `limit`.
pub(crate) fn wait_all_confirmed(producer: u16, limit: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if unconfirmed(producer) == Some(0) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Reads every reliable counter through `node` and compares it with what the producer
/// accepted for it: the counters that differ, with their value (`None`: no answer).
pub(crate) fn mismatches(node: u16, accepted: &[u64]) -> Vec<(usize, Option<u64>)> {
    accepted
        .iter()
        .enumerate()
        .filter_map(|(i, want)| {
            let value = get_ok(node, &format!("/demo/reliable-counter/r{i}"))
                .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
                .and_then(|v| v["value"].as_u64());
            (value != Some(*want)).then_some((i, value))
        })
        .collect()
}
