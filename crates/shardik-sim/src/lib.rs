//! shardik-sim
#![forbid(unsafe_code)]
#![warn(missing_docs)]
