//! shardik-wire
#![forbid(unsafe_code)]
#![warn(missing_docs)]
