//! Bounds on inbound connections: a counted pool per kind of connection, and the connections
//! still handshaking, oldest first.
//!
//! Every inbound connection holds a slot of the total pool from accept to close. Until it is
//! past our handshake it also holds a place among the pending ones; once past it, a peer that is
//! not a current member holds a slot of the non-member pool, so strangers and joiners together
//! can never take the room members need.
//!
//! Public for [`Pending`]: the runtime's management port bounds its health-check reserve with
//! it too (`http/reserve.rs`), so both ports push out their oldest stalled connection alike.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// At most `max` connections of one kind.
#[derive(Debug)]
pub(crate) struct Pool {
    used: AtomicUsize,
    max: usize,
}

impl Pool {
    pub(crate) fn new(max: usize) -> Arc<Pool> {
        Arc::new(Pool {
            used: AtomicUsize::new(0),
            max,
        })
    }

    /// A slot, or `None` when all `max` are taken.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<Slot> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot {
                pool: Arc::clone(self),
            })
    }

    /// Slots taken now.
    pub(crate) fn in_use(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The most slots.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// One taken slot of a [`Pool`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    pool: Arc<Pool>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.used.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Connections that have not completed our handshake yet, in the order they arrived.
///
/// When all places are taken, a new connection takes the place of the oldest one, which is
/// closed: a stranger that opens connections and stalls (each until the handshake timeout)
/// thus cannot keep a member's reconnection out, since a real handshake completes in a round
/// trip while the stalled ones are the oldest.
#[derive(Debug)]
pub struct Pending {
    max: usize,
    state: Mutex<PendingState>,
}

#[derive(Debug, Default)]
struct PendingState {
    next: u64,
    /// Dropping a connection's sender tells it to close.
    waiting: BTreeMap<u64, oneshot::Sender<()>>,
}

/// What [`Pending::admit`] gives a new connection.
pub struct Admitted {
    /// Its place; dropping it (handshake done or failed) leaves the pending set.
    pub place: PendingPlace,
    /// Completes when the connection was pushed out by a newer one.
    pub evicted: oneshot::Receiver<()>,
    /// Whether an older connection was pushed out to make room.
    pub pushed_out_another: bool,
}

impl Pending {
    /// At most `max` connections pending (at least one).
    pub fn new(max: usize) -> Arc<Pending> {
        Arc::new(Pending {
            max: max.max(1),
            state: Mutex::new(PendingState::default()),
        })
    }

    /// A place for a new connection, pushing the oldest pending one out when all are taken.
    pub fn admit(self: &Arc<Self>) -> Admitted {
        let (tx, rx) = oneshot::channel();
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let pushed_out_another = if st.waiting.len() >= self.max {
            // Dropping the sender closes that connection.
            st.waiting.pop_first().is_some()
        } else {
            false
        };
        let id = st.next;
        st.next += 1;
        st.waiting.insert(id, tx);
        Admitted {
            place: PendingPlace {
                id,
                pending: Arc::clone(self),
            },
            evicted: rx,
            pushed_out_another,
        }
    }

    /// Connections pending now.
    pub(crate) fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .len()
    }
}

/// A connection's place among the pending ones.
#[derive(Debug)]
pub struct PendingPlace {
    id: u64,
    pending: Arc<Pending>,
}

impl Drop for PendingPlace {
    fn drop(&mut self) {
        self.pending
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_gives_out_at_most_its_slots_and_takes_them_back() {
        let pool = Pool::new(2);
        let a = pool.try_take().expect("first");
        let _b = pool.try_take().expect("second");
        assert!(pool.try_take().is_none(), "a third is refused");
        assert_eq!(pool.in_use(), 2);
        drop(a);
        assert_eq!(pool.in_use(), 1);
        assert!(pool.try_take().is_some(), "room again");
    }

    #[test]
    fn the_oldest_pending_connection_makes_room_for_a_new_one() {
        let pending = Pending::new(2);
        let mut first = pending.admit();
        let mut second = pending.admit();
        assert!(!first.pushed_out_another && !second.pushed_out_another);
        assert!(
            first
                .evicted
                .try_recv()
                .is_err_and(|e| e == oneshot::error::TryRecvError::Empty)
        );
        let third = pending.admit();
        assert!(third.pushed_out_another);
        assert_eq!(
            first.evicted.try_recv(),
            Err(oneshot::error::TryRecvError::Closed),
            "the oldest was told to close"
        );
        assert_eq!(
            second.evicted.try_recv(),
            Err(oneshot::error::TryRecvError::Empty)
        );
        assert_eq!(pending.len(), 2);
        // A connection that finished its handshake leaves; one pushed out leaves nothing.
        drop(second.place);
        drop(first.place);
        assert_eq!(pending.len(), 1);
        drop(third.place);
        assert_eq!(pending.len(), 0);
    }
}
