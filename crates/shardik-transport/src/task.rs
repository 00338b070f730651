//! Spawning the node's tasks so that their log lines name the node.
//!
//! Every task a node spawns runs inside the span its builder opened (`node{node=HOST:PORT}`),
//! so that each log line says which node wrote it, also when several nodes share a process.
//! `tokio::spawn` does not carry the caller's span into the new task; [`spawn`] does, and
//! clippy (`clippy.toml`, `disallowed-methods`) refuses the bare one in this crate and in the
//! runtime, which spawns through this one (`shardik_runtime`'s `task::spawn`): the transport's
//! readers and writers are the node's tasks too.

use std::future::Future;

use tokio::task::JoinHandle;
use tracing::Instrument;

/// `tokio::spawn`, with the new task inside the caller's current span.
#[allow(clippy::disallowed_methods)]
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(future.in_current_span())
}
