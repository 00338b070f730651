//! What the lanes note for the node driver, newest per key, until the driver takes it: the
//! table behind [`Identified`](crate::Identified) and [`Refused`](crate::Refused).
//!
//! A lane writes under a mutex and sets a flag; the driver, which looks once per message,
//! pays one atomic load while nothing is noted, and is woken when something is. One entry per
//! key, so the table is bounded by the keys the lanes use (their dialled addresses).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Notes not yet taken by the driver, the newest per key.
pub(crate) struct DriverNotes<K, V> {
    pending: Mutex<BTreeMap<K, V>>,
    /// Whether `pending` may hold something.
    any: AtomicBool,
    changed: Notify,
}

impl<K, V> Default for DriverNotes<K, V> {
    fn default() -> Self {
        DriverNotes {
            pending: Mutex::new(BTreeMap::new()),
            any: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }
}

impl<K: Ord, V> DriverNotes<K, V> {
    /// Notes `value` under `key`, replacing an older note of that key.
    pub(crate) fn note(&self, key: K, value: V) {
        self.lock().insert(key, value);
        self.any.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    /// Every note since the last call, in key order.
    pub(crate) fn take(&self) -> Vec<(K, V)> {
        if !self.any.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *self.lock()).into_iter().collect()
    }

    /// Completes when something was noted (after the last `take`, or before it if the
    /// notification was not consumed yet).
    pub(crate) async fn changed(&self) {
        self.changed.notified().await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<K, V>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}
