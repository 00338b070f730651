//! Waiting for this node to become Up: [`NodeHandle::wait_until_up`] and
//! [`NodeHandle::on_member_up`] (Akka's `registerOnMemberUp`), so that an application starts
//! its work once the node is a full member instead of guessing with a sleep, and hears about
//! it when the node never gets there (a wrong seed address, a refused join).

use std::fmt;
use std::time::Duration;

use shardik_core::membership::{MemberStatus, NOT_YET_UP, ShutdownReason};

use super::handle::{MembershipSnapshot, NodeHandle};

/// The node stopped, or started to leave or was downed, before it ever became Up.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoppedBeforeUp {
    /// This node's status when it was given up on (`None`: it never became a member, or was
    /// removed).
    pub last_status: Option<MemberStatus>,
    /// Why the node stopped, when it did (`None` while it runs on: it started to leave, or
    /// was downed). A refused configuration ([`ShutdownReason::IncompatibleConfig`]) names
    /// the keys that differ from the cluster's.
    pub reason: Option<ShutdownReason>,
}

impl fmt::Display for StoppedBeforeUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.last_status.map_or("not a member", |s| s.as_str());
        match &self.reason {
            Some(ShutdownReason::IncompatibleConfig(why)) => write!(
                f,
                "this node stopped before it became Up: the cluster refused its configuration: \
                 {why}"
            ),
            Some(ShutdownReason::Orphaned) => write!(
                f,
                "this node stopped before it became Up: every other member of the cluster it \
                 was joining went down; start it again to join"
            ),
            _ => write!(
                f,
                "this node stopped before it became Up (its last status: {status}); if it never \
                 joined, check `cluster.seed-nodes` and the log for the seeds' answers"
            ),
        }
    }
}

impl std::error::Error for StoppedBeforeUp {}

/// Why [`wait_until_up_within`](NodeHandle::wait_until_up_within) gave up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotUp {
    /// The node stopped, or started to leave or was downed, first.
    #[error(transparent)]
    Stopped(#[from] StoppedBeforeUp),
    /// The node still runs, but was not Up in time.
    #[error("{}", not_up_in_time(*waited, *last_status, unanswered_seeds))]
    TimedOut {
        /// How long it was waited for.
        waited: Duration,
        /// Its status then (`None`: not a member yet).
        last_status: Option<MemberStatus>,
        /// The seeds that had not let it in, each with why as far as the transport knows
        /// (empty when it joined, or has not waited `cluster.seed-node-timeout` yet).
        unanswered_seeds: Vec<String>,
    },
}

fn not_up_in_time(waited: Duration, status: Option<MemberStatus>, seeds: &[String]) -> String {
    let status = status.map_or("not a member", |s| s.as_str());
    if seeds.is_empty() {
        format!("this node was not Up within {waited:?} (its status: {status})")
    } else {
        format!(
            "this node was not Up within {waited:?} (its status: {status}): its seeds did not \
             let it in ({}); check `cluster.seed-nodes` and that they run",
            seeds.join("; ")
        )
    }
}

/// What a snapshot says about this node becoming Up.
enum Progress {
    /// It is or has been Up in this incarnation.
    Up,
    /// It can no longer become Up: it is leaving, downed or removed without having been Up.
    Never,
    /// Not yet.
    Waiting,
}

fn progress(snapshot: &MembershipSnapshot) -> Progress {
    let has_been_up = snapshot
        .members
        .iter()
        .find(|m| m.addr == snapshot.self_node)
        .is_some_and(|m| m.up_number != NOT_YET_UP);
    match snapshot.self_status {
        _ if has_been_up => Progress::Up,
        Some(MemberStatus::Up) => Progress::Up,
        Some(
            MemberStatus::Leaving
            | MemberStatus::Exiting
            | MemberStatus::Down
            | MemberStatus::Removed
            | MemberStatus::PreparingForShutdown
            | MemberStatus::ReadyForShutdown,
        ) => Progress::Never,
        Some(MemberStatus::Joining | MemberStatus::WeaklyUp) | None => Progress::Waiting,
    }
}

impl NodeHandle {
    /// Resolves once this node is Up (at once if it is, or was earlier in this incarnation),
    /// or with [`StoppedBeforeUp`] when the node stops first, or starts leaving or is downed
    /// before it ever was Up. WeaklyUp does not count: it is not a full member yet.
    pub async fn wait_until_up(&self) -> Result<(), StoppedBeforeUp> {
        let mut snapshots = self.watch();
        loop {
            {
                let snapshot = snapshots.borrow_and_update();
                let stopped = || StoppedBeforeUp {
                    last_status: snapshot.self_status,
                    reason: snapshot.stopped.clone(),
                };
                match progress(&snapshot) {
                    Progress::Up => return Ok(()),
                    Progress::Never => return Err(stopped()),
                    Progress::Waiting if snapshot.stopped.is_some() => return Err(stopped()),
                    Progress::Waiting => {}
                }
            }
            // The node's driver owns the sender: an error means the node has stopped (its
            // last snapshot, read above, said why).
            if snapshots.changed().await.is_err() {
                let snapshot = snapshots.borrow();
                return Err(StoppedBeforeUp {
                    last_status: snapshot.self_status,
                    reason: snapshot.stopped.clone(),
                });
            }
        }
    }

    /// As [`wait_until_up`](Self::wait_until_up), for at most `timeout`: a node whose seeds
    /// do not let it in waits for them without end (they may start later), and this says,
    /// after `timeout`, which seeds did not answer and why
    /// ([`NotUp::TimedOut::unanswered_seeds`](NotUp::TimedOut)), once the node has tried them
    /// for `cluster.seed-node-timeout`.
    pub async fn wait_until_up_within(&self, timeout: Duration) -> Result<(), NotUp> {
        match tokio::time::timeout(timeout, self.wait_until_up()).await {
            Ok(result) => Ok(result?),
            Err(_) => {
                let snapshot = self.snapshot();
                Err(NotUp::TimedOut {
                    waited: timeout,
                    last_status: snapshot.self_status,
                    unanswered_seeds: snapshot.unanswered_seeds.clone(),
                })
            }
        }
    }

    /// Runs `callback` once, when this node becomes Up (at once, on a task of its own, if it
    /// already is or was): Akka's `registerOnMemberUp`. It never runs if the node stops, or
    /// starts leaving or is downed, before it was Up. Must be called within a Tokio runtime.
    pub fn on_member_up(&self, callback: impl FnOnce() + Send + 'static) {
        let handle = self.clone();
        crate::task::spawn(async move {
            if handle.wait_until_up().await.is_ok() {
                callback();
            }
        });
    }
}
