//! Who answered where this node dialled: the handshake reply names the accepting incarnation,
//! which differs from the dialled address when that was an alias (a seed list naming
//! `seeds.svc:2552` where the seed is `pod-0.svc:2552`) or another address of the node.
//!
//! The lanes record it here and the node driver takes it for the membership core
//! (`Input::PeerIdentified`), before it handles the next message from the network: the reply
//! is recorded before the lane writes anything, so an answer to what it wrote always finds
//! it taken. One entry per dialled address, so the table is bounded by the lanes.

use shardik_core::membership::{Address, UniqueAddress};

use crate::driver_notes::DriverNotes;

/// Identifications not yet taken by the driver.
#[derive(Default)]
pub struct Identified {
    notes: DriverNotes<Address, UniqueAddress>,
}

impl Identified {
    /// A lane dialled `dialled` and `node` accepted (recorded only when they differ).
    pub(crate) fn record(&self, dialled: &Address, node: &UniqueAddress) {
        if *dialled != node.address {
            self.notes.note(dialled.clone(), node.clone());
        }
    }

    /// Everything recorded since the last call.
    pub fn take(&self) -> Vec<(Address, UniqueAddress)> {
        self.notes.take()
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
    fn only_differing_answers_are_kept_once_per_dialled_address() {
        let ids = Identified::default();
        let alias = Address::new("seeds.svc", 2552);
        let pod0 = UniqueAddress::new(Address::new("pod-0.svc", 2552), 1);
        let pod1 = UniqueAddress::new(Address::new("pod-1.svc", 2552), 2);
        ids.record(&pod0.address, &pod0);
        assert!(
            ids.take().is_empty(),
            "a node that answers under its own name"
        );
        ids.record(&alias, &pod0);
        ids.record(&alias, &pod1);
        assert_eq!(ids.take(), vec![(alias, pod1)], "the newest answer wins");
        assert!(ids.take().is_empty());
    }
}
