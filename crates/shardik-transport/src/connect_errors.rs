//! Why the last connection attempt to a peer failed, for as long as it keeps failing.
//!
//! The lanes' writers retry quietly (a peer that is down is ordinary); the node driver reads
//! these when it has to tell the user why this node cannot join its seeds
//! (`Effect::SeedsUnanswered`), so that the warning says "connection refused" or "no TLS
//! handshake within 2s" rather than only that nobody answered.

use std::collections::BTreeMap;
use std::sync::Mutex;

use shardik_core::membership::Address;

/// At most this many peers are remembered; past it, new failures are not recorded (the
/// peers a node dials are its seeds and members, far fewer).
const CAPACITY: usize = 1024;

/// The last connection error of each peer whose latest attempt failed.
#[derive(Debug, Default)]
pub(crate) struct ConnectErrors {
    last: Mutex<BTreeMap<Address, String>>,
}

impl ConnectErrors {
    /// A connection to `to` failed with `error`.
    pub(crate) fn failed(&self, to: &Address, error: &str) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.len() < CAPACITY || last.contains_key(to) {
            last.insert(to.clone(), error.to_string());
        }
    }

    /// A connection to `to` succeeded.
    pub(crate) fn connected(&self, to: &Address) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.remove(to);
    }

    /// Why the last attempt to reach `to` failed, if it did.
    pub(crate) fn last(&self, to: &Address) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.get(to).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_remembered_until_a_connection_succeeds_and_the_table_is_bounded() {
        let errors = ConnectErrors::default();
        let a = Address::new("10.0.0.1", 2552);
        assert_eq!(errors.last(&a), None);
        errors.failed(&a, "connection refused");
        errors.failed(&a, "no connection within 2s");
        assert_eq!(errors.last(&a).as_deref(), Some("no connection within 2s"));
        errors.connected(&a);
        assert_eq!(errors.last(&a), None);

        for port in 0..CAPACITY as u16 {
            errors.failed(&Address::new("10.0.0.2", port), "refused");
        }
        let late = Address::new("10.0.0.3", 1);
        errors.failed(&late, "refused");
        assert_eq!(errors.last(&late), None, "full: not recorded");
        // A peer already in the table is still updated.
        let first = Address::new("10.0.0.2", 0);
        errors.failed(&first, "timed out");
        assert_eq!(errors.last(&first).as_deref(), Some("timed out"));
    }
}
