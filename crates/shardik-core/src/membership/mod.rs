//! Cluster membership: identities, lifecycle, vector clocks, gossip, reachability, failure
//! detection, leader actions and split-brain decisions — all without I/O.

pub mod address;
pub mod member;
pub mod reachability;
pub mod vclock;

pub use address::{Address, AddressParseError, UniqueAddress};
pub use member::{Member, MemberStatus, NOT_YET_UP};
pub use reachability::{Reachability, ReachabilityStatus};
pub use vclock::VectorClock;
