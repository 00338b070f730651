//! Split-brain resolver: which nodes to down when some are unreachable.
//!
//! When a partition happens, each side elects its own leader, and each side's leader runs
//! [`decide`] on its own view. The strategies are built so that the two sides, looking at
//! complementary views, reach complementary verdicts: one side downs the other, the other
//! downs itself (or, when that cannot be guaranteed, everyone goes down).
//!
//! One concern per file:
//! - `decision.rs`: *what* to decide. The strategies as pure functions over an [`SbrView`]
//!   (who survives, given who is counted on which side).
//! - `resolver.rs`: *when* to decide. [`SplitBrainResolver`], the small timer state
//!   (stable-after, instability tracking, down-all-when-unstable) with its [`SbrSettings`].
//! - `lease.rs`: lease-majority's lease protocol, which holds a decision back until the
//!   lease answers.
//! - `action.rs`: what both ask the caller to do ([`SbrAction`]).

mod action;
mod decision;
mod lease;
mod resolver;

pub use action::SbrAction;
pub use decision::{
    Decision, SbrView, Strategy, decide, indirectly_connected, lease_acquire_delay, nodes_to_down,
};
pub use lease::ReleaseWhen;
pub use resolver::{Instability, SbrChange, SbrSettings, SplitBrainResolver};

#[cfg(test)]
mod tests;
