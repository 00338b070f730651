//! Spawning the node's tasks so that their log lines name the node: shardik-transport's
//! `task::spawn`, which spawns the node's connection readers and writers too. Clippy
//! (`clippy.toml`, `disallowed-methods`) refuses a bare `tokio::spawn` in this crate.

pub(crate) use shardik_transport::task::spawn;
