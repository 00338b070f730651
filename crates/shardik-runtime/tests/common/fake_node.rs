//! The membership a fake node shows the management API in the HTTP tests.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

use shardik_core::membership::{Address, Member, MemberStatus, UniqueAddress};
use shardik_runtime::MembershipSnapshot;

/// The incarnation at 127.0.0.1:`port`, whose uid is the port.
pub fn ua(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port))
}

/// A converged two-member cluster (127.0.0.1:2551 and :2552, both Up), seen from 2551, its
/// leader and oldest.
pub fn two_up_members() -> MembershipSnapshot {
    let members = [2551, 2552]
        .into_iter()
        .map(|port| {
            let mut m = Member::joining(ua(port), Default::default(), "1.0.0");
            m.status = MemberStatus::Up;
            m
        })
        .collect();
    let mut snapshot = MembershipSnapshot::not_joined(ua(2551));
    snapshot.self_status = Some(MemberStatus::Up);
    snapshot.leader = Some(ua(2551));
    snapshot.oldest = Some(ua(2551));
    snapshot.members = members;
    snapshot.converged = true;
    snapshot
}

/// A fake node's control loop that accepts every command (join, leave, down, join seed
/// nodes) and counts them: the sender to give the management API, and the count.
pub fn accepting_control() -> (
    tokio::sync::mpsc::Sender<shardik_runtime::ControlCommand>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use shardik_runtime::ControlCommand;
    use std::sync::atomic::Ordering;

    let (cmd_tx, mut cmd_rx) = tokio::sync::mpsc::channel::<ControlCommand>(16);
    let commands = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&commands);
    tokio::spawn(async move {
        while let Some(cmd) = cmd_rx.recv().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let reply = match cmd {
                ControlCommand::Join(_, r) | ControlCommand::Leave(_, r) => r,
                ControlCommand::Down(_, r) => r,
                ControlCommand::JoinSeedNodes(_, r) => r,
                ControlCommand::PrepareForFullClusterShutdown(r) => r,
            };
            let _ = reply.send(Ok(()));
        }
    });
    (cmd_tx, commands)
}
