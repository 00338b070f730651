//! shardik-core
#![forbid(unsafe_code)]
#![warn(missing_docs)]
