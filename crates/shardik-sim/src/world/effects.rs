//! What a node's membership core asks for ([`Effect`]), carried out: messages onto the network,
//! events to the checker, the statistics and the timeline, exits confirmed, split-brain lease
//! calls, shutdowns.

use shardik_core::membership::{ClusterEvent, Effect};

use super::World;
use super::event_line::describe;
use crate::node_id::NodeId;
use crate::sbr_lease::Caller;

impl World {
    /// Carries out, in order, what node `id`'s core asked for (emptying `out`).
    pub(super) fn apply_effects(&mut self, id: NodeId, out: &mut Vec<Effect>) {
        for e in out.drain(..) {
            match e {
                Effect::Send { to, msg } => self.send(id, to, msg),
                Effect::Event(ev) => {
                    if let ClusterEvent::MemberRemoved { member, .. } = &ev {
                        self.stats.removed_members.insert(member.addr.clone());
                    }
                    if let ClusterEvent::UnreachableMember(_) = &ev {
                        self.stats.unreachable_events += 1;
                    }
                    if let (ClusterEvent::MemberUp(m), Some((tracked, seen))) =
                        (&ev, self.tracked_up.as_mut())
                        && &m.addr == tracked
                    {
                        seen.insert(id);
                    }
                    if let (ClusterEvent::UnreachableMember(m), Some((tracked, seen))) =
                        (&ev, self.tracked_unreachable.as_mut())
                        && &m.addr == tracked
                    {
                        seen.insert(id);
                    }
                    self.checker
                        .on_event(self.now, id, self.nodes[id].incarnation, &ev);
                    if self.cfg.record_events {
                        let what = describe(&ev);
                        self.note(Some(id), what);
                    }
                }
                Effect::Dropped { reason, .. } => {
                    *self
                        .stats
                        .dropped_by_core
                        .entry(reason.as_str())
                        .or_default() += 1;
                }
                Effect::CommandFailed(err) => self.note(Some(id), format!("command failed: {err}")),
                Effect::PreparingForFullShutdown => {
                    self.note(Some(id), "preparing for a full shutdown".to_string())
                }
                Effect::JoinIncompatible {
                    joiner,
                    via,
                    differences,
                    refused,
                } => {
                    let verdict = if refused { "refused" } else { "let in" };
                    self.note(
                        Some(id),
                        format!("{verdict} {joiner} ({via}): {}", differences.join("; ")),
                    );
                }
                Effect::SeedsUnanswered {
                    seeds, attempts, ..
                } => {
                    self.note(
                        Some(id),
                        format!("no seed let it in after {attempts} attempts: {seeds:?}"),
                    );
                }
                Effect::SelfExiting if self.exit_tasks => {
                    self.note(Some(id), "exiting: running exit tasks".to_string());
                    self.exiting.insert(id);
                }
                Effect::SelfExiting => {
                    // No exit tasks in a membership-only world: confirm at once.
                    let now = self.now;
                    let mut more = Vec::new();
                    self.nodes[id].core.exit_tasks_done(now, &mut more);
                    self.apply_effects(id, &mut more);
                }
                Effect::Sbr(action) => {
                    if self.cfg.record_events {
                        self.note(Some(id), format!("resolver: {action:?}"));
                    }
                    self.sbr_lease.decided(&action);
                }
                Effect::SbrLease(request) => {
                    if self.cfg.record_events {
                        self.note(Some(id), format!("lease call: {request:?}"));
                    }
                    let core = &self.nodes[id].core;
                    let strategy = core
                        .membership()
                        .config()
                        .downing
                        .as_ref()
                        .map(|d| &d.strategy);
                    let caller = Caller::new(id, core.self_node().clone(), strategy);
                    self.sbr_lease.call(self.now, caller, request);
                }
                Effect::SbrLeaseLost(reason) => {
                    self.note(Some(id), format!("lease lost: {}", reason.as_str()));
                    self.sbr_lease.lost();
                }
                Effect::Shutdown(reason) => {
                    self.note(Some(id), format!("shutdown: {reason:?}"));
                    let n = &mut self.nodes[id];
                    n.alive = false;
                    n.shutdown = Some(reason);
                }
            }
        }
    }
}
