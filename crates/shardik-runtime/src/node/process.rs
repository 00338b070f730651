//! A node that runs itself as a process: SIGTERM/SIGINT turned into a graceful leave, and the
//! reason it stopped logged.
//!
//! What `shardik node`, `examples/shopping-cart` and every user program would otherwise copy:
//! [`Node::run_until_signal`](crate::cluster_node::Node::run_until_signal) waits for the node to stop, the
//! first signal making it leave (shards handed off first) and a second one making it return
//! at once ([`ShutdownReason::Interrupted`]); [`ShutdownReason::exit_code`] says how the
//! process should end. The library never ends the process itself: the program decides. The management API
//! such a process serves is `crate::http`'s (`NodeBuilder::management`, feature
//! `management`).

use std::future::Future;

use shardik_core::membership::ShutdownReason;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::driver::StopRequest;

/// Waits for the node to stop, turning the first SIGTERM or SIGINT into a graceful leave; a
/// second one ends the wait at once with [`ShutdownReason::Interrupted`].
pub(crate) async fn until_signal_or_stop(
    stop: mpsc::Sender<StopRequest>,
    finished: impl Future<Output = ShutdownReason>,
) -> ShutdownReason {
    let mut signals = crate::task::spawn(leave_on_signal(stop));
    tokio::select! {
        reason = finished => {
            signals.abort();
            reason
        }
        // The signal task ends only on a second signal (or if it panicked: then the node
        // still stops as it was going to, and the wait goes on for it).
        Ok(()) = &mut signals => ShutdownReason::Interrupted,
    }
}

/// Sends a leave on the first signal and returns on the second.
async fn leave_on_signal(stop: mpsc::Sender<StopRequest>) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => Some(term),
        Err(e) => {
            warn!(error = %e, "no SIGTERM handler; only SIGINT (Ctrl-C) makes the node leave");
            None
        }
    };
    let mut first = true;
    loop {
        let terminate = async {
            match term.as_mut() {
                Some(term) => {
                    term.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = terminate => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        if first {
            first = false;
            info!(
                "signal received: leaving the cluster (shards are handed off first; send it \
                 again to exit at once)"
            );
            let _ = stop.send(StopRequest::Leave).await;
        } else {
            warn!("second signal: not waiting for the leave to end");
            return;
        }
    }
}

/// Logs why the node stopped, at WARN unless it left as asked.
pub(crate) fn log_shutdown(reason: &ShutdownReason) {
    match reason {
        ShutdownReason::Left => info!("left the cluster"),
        ShutdownReason::Stopped => info!(
            "stopped without leaving the cluster (asked before it was a member, or asked to \
             stop at once)"
        ),
        ShutdownReason::Downed | ShutdownReason::Removed => {
            warn!(?reason, "this node was removed from the cluster");
        }
        ShutdownReason::Orphaned => warn!(
            "every other member of the cluster this node was joining went down: stopped, \
             rather than lead a cluster of its own; start it again to join"
        ),
        ShutdownReason::IncompatibleConfig(why) => {
            warn!(%why, "the cluster refused this node's configuration");
        }
        ShutdownReason::Interrupted => warn!(
            "asked to stop a second time while leaving: returning without waiting for the \
             leave to end (what was not handed off yet was not)"
        ),
        // The enum is open to new reasons (`#[non_exhaustive]`).
        other => warn!(reason = ?other, "the node stopped"),
    }
}
