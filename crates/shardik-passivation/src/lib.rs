//! shardik-passivation
#![forbid(unsafe_code)]
#![warn(missing_docs)]
