//! Cluster membership: lifecycle, vector clocks, gossip, reachability, failure detection,
//! leader actions and split-brain decisions — all without I/O. Node identities
//! ([`address`]) stand below it, shared with leases and sharding, and are re-exported here.

pub mod compat;
pub mod config;
pub mod events;
pub mod gossip;
pub mod member;
pub mod messages;
pub mod node;
pub mod phi;
pub mod reachability;
pub mod ring;
pub mod same_store;
pub mod sbr;
pub mod vclock;

pub use crate::address::{self, Address, AddressParseError, UniqueAddress};
pub use compat::{JoinCompat, JoinConfigCompatChecker, MustMatch, WhenMissing};
pub use config::{FailureDetectorConfig, MembershipConfig};
pub use events::ClusterEvent;
pub use gossip::Gossip;
pub use member::{Member, MemberStatus, NOT_YET_UP};
pub use messages::{ConfigCheck, JoinConfig, Message};
pub use node::{
    Command, CommandError, DropReason, Effect, Input, Membership, MembershipStats, ShutdownReason,
};
pub use reachability::{Reachability, ReachabilityStatus};
pub use same_store::SameStore;
pub use vclock::VectorClock;
