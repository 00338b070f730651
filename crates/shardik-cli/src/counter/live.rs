//! Which counter incarnations are live in this process, and since when: evidence for the
//! partition test (`tests/netns_partition.rs`), which must prove that no counter ever runs on
//! both sides of a split, and for anyone who wants to watch counters move.
//!
//! Times are `CLOCK_MONOTONIC` in nanoseconds. Every process of a machine reads the same
//! monotonic clock (network namespaces do not change it), so instants reported by different
//! nodes of one machine can be compared directly; a wall clock could step between two reads.
//!
//! An incarnation is live from the first command it handles (after its recovery) until its
//! value is dropped (passivation, hand-off, failure, shutdown or the end of the process). The
//! table lives in the process because a counter's state is rebuilt by recovery and cannot
//! carry a handle to anything.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use shardik_core::membership::UniqueAddress;

/// The live incarnations of every node in this process (one in `shardik node`), by (node,
/// entity id, serial number of the incarnation), with the instant each began.
static LIVE: Mutex<BTreeMap<(UniqueAddress, String, u64), u64>> = Mutex::new(BTreeMap::new());

/// Serial numbers of incarnations, so that two incarnations of one counter (the old one not
/// yet dropped when a new one begins would be a bug, but the table must not hide it) are two
/// entries.
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(0);

/// The monotonic clock (`CLOCK_MONOTONIC`) in nanoseconds.
pub fn monotonic_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // The monotonic clock counts from boot: never negative, and u64 nanoseconds last 584 years.
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0)
}

fn table() -> std::sync::MutexGuard<'static, BTreeMap<(UniqueAddress, String, u64), u64>> {
    // A panic while the lock was held cannot leave the map half-changed (every change is one
    // insert or remove), so a poisoned lock is still usable.
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// One live incarnation of a counter: listed from [`begin`](Self::begin) until dropped.
#[derive(Debug)]
pub struct Incarnation {
    key: (UniqueAddress, String, u64),
}

impl Incarnation {
    /// Lists the counter `id` as live on `node` from now on.
    pub fn begin(node: &UniqueAddress, id: &str) -> Incarnation {
        let key = (
            node.clone(),
            id.to_string(),
            NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
        );
        // The instant is taken under the lock, so a report that does not list this
        // incarnation was made before it began.
        let mut live = table();
        live.insert(key.clone(), monotonic_nanos());
        Incarnation { key }
    }
}

impl Drop for Incarnation {
    fn drop(&mut self) {
        table().remove(&self.key);
    }
}

/// What `GET /demo/counters/live` answers: the node's live counters at the instant `now`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct LiveReport {
    /// `host:port` of the node.
    pub node: String,
    /// The node's incarnation (uid): a restarted node on the same address has another.
    #[serde(rename = "nodeUid")]
    pub node_uid: String,
    /// `CLOCK_MONOTONIC` nanoseconds when the table was read: every listed incarnation was
    /// live at that instant.
    pub now: u64,
    /// The live incarnations, by entity id.
    pub counters: Vec<LiveCounter>,
}

/// One live incarnation in a [`LiveReport`].
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct LiveCounter {
    /// The counter's id.
    pub id: String,
    /// `CLOCK_MONOTONIC` nanoseconds when it began (handled its first command).
    #[serde(rename = "startedAt")]
    pub started_at: u64,
}

/// The live counters of `node` now.
pub fn report(node: &UniqueAddress) -> LiveReport {
    let live = table();
    // Read under the lock: an incarnation dropped before this instant is gone from the table,
    // so everything listed was live at `now`.
    let now = monotonic_nanos();
    let counters = live
        .iter()
        .filter(|((n, _, _), _)| n == node)
        .map(|((_, id, _), started)| LiveCounter {
            id: id.clone(),
            started_at: *started,
        })
        .collect();
    LiveReport {
        node: node.address.to_string(),
        node_uid: node.uid.to_string(),
        now,
        counters,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_core::membership::Address;

    fn node(port: u16, uid: u64) -> UniqueAddress {
        UniqueAddress::new(Address::new("10.0.0.1", port), uid)
    }

    #[test]
    fn an_incarnation_is_listed_from_its_start_until_it_is_dropped_on_its_own_node_only() {
        let a = node(1, 7);
        let b = node(2, 8);
        let before = monotonic_nanos();
        let first = Incarnation::begin(&a, "c1");
        let second = Incarnation::begin(&a, "c2");
        let elsewhere = Incarnation::begin(&b, "c1");
        let r = report(&a);
        assert_eq!(r.node, "10.0.0.1:1");
        assert_eq!(r.node_uid, "7");
        let ids: Vec<&str> = r.counters.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["c1", "c2"], "b's c1 is not a's");
        for c in &r.counters {
            assert!(
                before <= c.started_at && c.started_at <= r.now,
                "{c:?} in {r:?}"
            );
        }
        drop(first);
        let ids: Vec<String> = report(&a).counters.into_iter().map(|c| c.id).collect();
        assert_eq!(ids, ["c2"]);
        drop((second, elsewhere));
        assert!(report(&a).counters.is_empty());
        assert!(report(&b).counters.is_empty());
    }

    #[test]
    fn the_monotonic_clock_does_not_go_back() {
        let mut last = monotonic_nanos();
        for _ in 0..1000 {
            let now = monotonic_nanos();
            assert!(now >= last);
            last = now;
        }
        assert!(last > 0);
    }
}
