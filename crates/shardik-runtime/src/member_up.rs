//! Waiting for this node to become Up: [`NodeHandle::wait_until_up`] and
//! [`NodeHandle::on_member_up`] (Akka's `registerOnMemberUp`), so that an application starts
//! its work once the node is a full member instead of guessing with a sleep, and hears about
//! it when the node never gets there (a wrong seed address, a refused join).

use shardik_core::membership::{MemberStatus, NOT_YET_UP};

use crate::handle::{MembershipSnapshot, NodeHandle};

/// The node stopped, or started to leave or was downed, before it ever became Up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "this node stopped before it became Up (its last status: {}); if it never joined, check \
     `cluster.seed-nodes` and the log for the seeds' answers",
    last_status.map(|s| s.as_str()).unwrap_or("not a member")
)]
#[non_exhaustive]
pub struct StoppedBeforeUp {
    /// This node's status when it was given up on (`None`: it never became a member, or was
    /// removed).
    pub last_status: Option<MemberStatus>,
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
            let last_status = {
                let snapshot = snapshots.borrow_and_update();
                match progress(&snapshot) {
                    Progress::Up => return Ok(()),
                    Progress::Never => {
                        return Err(StoppedBeforeUp {
                            last_status: snapshot.self_status,
                        });
                    }
                    Progress::Waiting => snapshot.self_status,
                }
            };
            // The node's driver owns the sender: an error means the node has stopped.
            if snapshots.changed().await.is_err() {
                return Err(StoppedBeforeUp { last_status });
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
