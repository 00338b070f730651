//! Tests of the sharding layer as a whole, through the in-memory test network
//! (`testkit.rs`), one concern a file.

mod takeover;
