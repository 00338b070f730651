//! The replicator core's tests.

mod consistency;
mod network;
mod replication;
