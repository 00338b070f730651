//! Tests of the split-brain resolver, one concern a file: the strategies' verdicts
//! (`decision.rs`), the resolver's timing (`resolver.rs`) and lease-majority's lease
//! (`lease.rs`), over the reference's fixtures (`fixtures.rs`).

mod decision;
mod fixtures;
mod lease;
mod resolver;
