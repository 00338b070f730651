//! Entity kinds whose coordinator on this node allocates nothing new because some members
//! have been silent past `cluster.sharding.unheard-region-warning-after`: what `/ready`'s
//! body lists under `allocationHeldBack` (see `shardik_core::sharding::coordinator`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use shardik_core::membership::UniqueAddress;

/// One kind whose allocation waits, as `/ready` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HeldBackKind {
    /// The entity kind.
    pub kind: String,
    /// The members waited for (`host:port`), which have neither registered a region of the
    /// kind nor said that their node has not started it.
    pub members: Vec<String>,
    /// How long the longest of them has been waited for, in whole seconds (at the last
    /// report).
    pub waited_seconds: u64,
}

/// The kinds held back on this node, shared by the kinds' tasks and the management API.
#[derive(Debug, Default)]
pub struct HeldBack {
    kinds: Mutex<BTreeMap<String, HeldBackKind>>,
}

impl HeldBack {
    /// Records that `kind` waits for `members` (with how long each has been waited for).
    pub fn set(&self, kind: &str, members: &[(UniqueAddress, Duration)]) {
        let entry = HeldBackKind {
            kind: kind.to_string(),
            members: members.iter().map(|(m, _)| m.address.to_string()).collect(),
            waited_seconds: members.iter().map(|(_, d)| d.as_secs()).max().unwrap_or(0),
        };
        self.lock().insert(kind.to_string(), entry);
    }

    /// `kind` no longer waits (its state is complete, or its coordinator left this node).
    /// Returns whether it did.
    pub fn clear(&self, kind: &str) -> bool {
        self.lock().remove(kind).is_some()
    }

    /// Every kind that waits now, by name.
    pub fn snapshot(&self) -> Vec<HeldBackKind> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, HeldBackKind>> {
        self.kinds.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_core::membership::Address;

    fn member(port: u16) -> UniqueAddress {
        UniqueAddress {
            address: Address::new("10.0.0.1", port),
            uid: u64::from(port),
        }
    }

    #[test]
    fn a_kind_is_listed_with_its_silent_members_until_cleared() {
        let h = HeldBack::default();
        assert!(h.snapshot().is_empty());
        h.set(
            "counter",
            &[
                (member(2552), Duration::from_millis(12_500)),
                (member(2553), Duration::from_secs(40)),
            ],
        );
        assert_eq!(
            h.snapshot(),
            vec![HeldBackKind {
                kind: "counter".into(),
                members: vec!["10.0.0.1:2552".into(), "10.0.0.1:2553".into()],
                waited_seconds: 40,
            }]
        );
        let json = serde_json::to_value(&h.snapshot()[0]).unwrap();
        assert_eq!(json["waitedSeconds"], 40);
        assert!(h.clear("counter"));
        assert!(!h.clear("counter"));
        assert!(h.snapshot().is_empty());
    }
}
