//! Peers whose port refused a connection: evidence that the process there is gone.
//!
//! A lane that dials a peer and is refused (nothing listens on the port) records the address
//! here, and the node driver hands it to the membership core (`Input::PeerRefused`), which
//! marks the member there unreachable at once rather than after the failure detector's
//! silence. A peer that is slow, paused or cut off by the network is silent instead, and only
//! the failure detector judges it. One entry per address until the driver takes them, so the
//! table is bounded by the lanes.

use shardik_core::membership::Address;

use crate::driver_notes::DriverNotes;

/// Refusals not yet taken by the driver.
#[derive(Default)]
pub struct Refused {
    notes: DriverNotes<Address, ()>,
}

impl Refused {
    /// A connection to `to` was refused.
    pub(crate) fn record(&self, to: &Address) {
        self.notes.note(to.clone(), ());
    }

    /// Every address refused since the last call.
    pub fn take(&self) -> Vec<Address> {
        self.notes.take().into_iter().map(|(a, ())| a).collect()
    }

    /// Completes when something was recorded (after the last `take`, or before it if the
    /// notification was not consumed yet).
    pub async fn changed(&self) {
        self.notes.changed().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refused_address_is_taken_once() {
        let refused = Refused::default();
        assert!(refused.take().is_empty());
        let a = Address::new("10.0.0.1", 2552);
        refused.record(&a);
        refused.record(&a);
        assert_eq!(refused.take(), vec![a]);
        assert!(refused.take().is_empty());
    }
}
