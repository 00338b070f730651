//! The invariants of replicated data, checked on every answer a replicator gives and on the
//! replicas' states:
//!
//! - **Read after majority write.** A majority read that starts after a majority (or all)
//!   write was acknowledged, on a node that counted the same members as the writer (so the
//!   two majorities overlap), returns that write (`stale_reads`).
//! - **No acknowledged write lost.** An acknowledged addition is in the final state unless
//!   every replica holding it died before it spread (`lost_writes`; the others are counted in
//!   `lost_with_every_holder`).
//! - **Pruned data never comes back.** A replica that holds a key's marker of a performed
//!   pruning holds none of the pruned replica's data in that key (`pruned_reappeared`); and
//!   the counter never exceeds the increments made (a pruned count counted twice would).
//! - **Convergence.** After the heal every running replica holds the same state.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use shardik_core::Instant;
use shardik_core::ddata::{GCounter, OrSet};
use shardik_core::membership::UniqueAddress;
use shardik_core::replicator::{
    DropReason, Key, OpId, Outcome, PruningState, ReadConsistency, ReplicaId, Replicator, Stored,
    WriteConsistency,
};

/// The set clients add elements to.
pub fn set_key() -> Key<OrSet<ReplicaId, u64>> {
    Key::new("elements")
}

/// The counter clients count on.
pub fn counter_key() -> Key<GCounter<ReplicaId>> {
    Key::new("count")
}

/// Whether two states of a key are the same (data and pruning markers).
pub fn same_stored(a: &Stored, b: &Stored) -> bool {
    match (a, b) {
        (Stored::Deleted, Stored::Deleted) => true,
        (Stored::Value(a), Stored::Value(b)) => a.same_as(b),
        _ => false,
    }
}

/// What a client asked.
#[derive(Clone, Copy, Debug)]
pub enum Call {
    /// Add a new element to the set.
    Add {
        /// The element, never added before.
        element: u64,
        /// At which consistency.
        write: WriteConsistency,
    },
    /// Count one.
    Count,
    /// Read the set.
    Read {
        /// At which consistency.
        read: ReadConsistency,
    },
}

struct Pending {
    at: Instant,
    call: Call,
    /// The members the calling replicator counted for quorums, itself included.
    members: BTreeSet<UniqueAddress>,
}

struct Acknowledged {
    at: Instant,
    members: BTreeSet<UniqueAddress>,
    /// Acknowledged by a majority or all.
    quorum: bool,
    /// Every replica that held it died before it spread further.
    gone_with_holders: bool,
}

/// Counts over a run, and what the checks found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DataStats {
    /// Whether every running replica held the same state at the end.
    pub converged: bool,
    /// Additions acknowledged at their consistency.
    pub acknowledged_writes: u64,
    /// Writes whose consistency was not reached in time (applied locally all the same).
    pub unacknowledged_writes: u64,
    /// Majority reads answered.
    pub majority_reads: u64,
    /// Reads that failed their consistency.
    pub failed_reads: u64,
    /// Majority reads that missed an overlapping acknowledged majority write (a violation).
    pub stale_reads: u64,
    /// Acknowledged additions missing at the end though a holder survived (a violation).
    pub lost_writes: u64,
    /// Acknowledged additions all of whose holders died before they spread (allowed).
    pub lost_with_every_holder: u64,
    /// Replica states found holding data of a replica whose pruning they mark performed (a
    /// violation).
    pub pruned_reappeared: u64,
    /// Prunings performed, seen as markers in replica states at the checks.
    pub prunings_seen: u64,
    /// Increments made, and the counter's final value (above the increments: a violation).
    pub increments: u64,
    /// The counter's final value.
    pub final_count: u128,
    /// Messages dropped because their sender was no member (a removed node's late messages).
    pub from_strangers: u64,
}

/// Watches the clients' calls, the answers and the replicas.
#[derive(Default)]
pub struct DataChecker {
    next_element: u64,
    pending: BTreeMap<(UniqueAddress, OpId), Pending>,
    acknowledged: BTreeMap<u64, Acknowledged>,
    performed: BTreeSet<(String, ReplicaId)>,
    /// The counts.
    pub stats: DataStats,
    violations: Vec<String>,
}

impl DataChecker {
    /// The violations found, described.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// A new element to add.
    pub fn next_element(&mut self) -> u64 {
        self.next_element += 1;
        self.next_element
    }

    /// A client called `node`'s replicator.
    pub fn called(
        &mut self,
        at: Instant,
        node: UniqueAddress,
        op: OpId,
        call: Call,
        members: BTreeSet<UniqueAddress>,
    ) {
        if matches!(call, Call::Count) {
            self.stats.increments += 1;
        }
        self.pending
            .insert((node, op), Pending { at, call, members });
    }

    /// `node`'s replicator answered a call.
    pub fn answered(
        &mut self,
        now: Instant,
        node: &UniqueAddress,
        op: OpId,
        outcome: Outcome,
        running: &[&Replicator],
    ) {
        let Some(pending) = self.pending.remove(&(node.clone(), op)) else {
            return;
        };
        match (pending.call, outcome) {
            (Call::Add { element, write }, Outcome::Update(Ok(()))) => {
                self.stats.acknowledged_writes += 1;
                let quorum = write != WriteConsistency::Local;
                let gone_with_holders = !running.iter().any(|r| holds(r, element));
                self.acknowledged.insert(
                    element,
                    Acknowledged {
                        at: now,
                        members: pending.members,
                        quorum,
                        gone_with_holders,
                    },
                );
            }
            (Call::Add { .. } | Call::Count, Outcome::Update(Err(_))) => {
                self.stats.unacknowledged_writes += 1;
            }
            (Call::Read { read }, Outcome::Get(Ok(stored))) => {
                if read == ReadConsistency::Local {
                    return;
                }
                self.stats.majority_reads += 1;
                let set = stored.as_ref().and_then(set_of);
                for (element, write) in &self.acknowledged {
                    // Strictly before: at one instant the order of a read's start and another
                    // node's acknowledgement is not known here.
                    let overlaps =
                        write.quorum && write.at < pending.at && write.members == pending.members;
                    if overlaps && !set.is_some_and(|s| s.contains(element)) {
                        self.stats.stale_reads += 1;
                        if self.stats.stale_reads > 5 {
                            continue;
                        }
                        self.violations.push(format!(
                            "a majority read by {node:?} started at {:?} missed element {element}, acknowledged by a majority at {:?} over the same members",
                            pending.at, write.at
                        ));
                    }
                }
            }
            (Call::Read { .. }, Outcome::Get(Err(_))) => self.stats.failed_reads += 1,
            _ => {}
        }
    }

    /// A node died: acknowledged additions no running replica holds any more went with it.
    pub fn node_died(&mut self, running: &[&Replicator]) {
        for (element, write) in &mut self.acknowledged {
            if !write.gone_with_holders && !running.iter().any(|r| holds(r, *element)) {
                write.gone_with_holders = true;
            }
        }
    }

    /// A message was dropped by a replicator.
    pub fn dropped(&mut self, reason: DropReason) {
        match reason {
            DropReason::UnknownSender => self.stats.from_strangers += 1,
            DropReason::TypeMismatch { key, mismatch } => self
                .violations
                .push(format!("key {key} met another type: {mismatch}")),
        }
    }

    /// Every replica that marks a pruning performed holds none of the pruned replica's data.
    pub fn check_pruning(&mut self, running: &[&Replicator]) {
        for replicator in running {
            for key in replicator.keys() {
                let Some(Stored::Value(envelope)) = replicator.local(key) else {
                    continue;
                };
                for (&removed, state) in &envelope.pruning {
                    if !matches!(state, PruningState::Performed { .. }) {
                        continue;
                    }
                    self.performed.insert((key.to_string(), removed));
                    if envelope.data.needs_pruning_from(removed) {
                        self.stats.pruned_reappeared += 1;
                        if self.stats.pruned_reappeared <= 5 {
                            self.violations.push(format!(
                                "{:?} holds data of pruned replica {removed:?} in key {key}",
                                replicator.node()
                            ));
                        }
                    }
                }
            }
        }
        self.stats.prunings_seen = self.performed.len() as u64;
    }

    /// The end of a run: converged, nothing acknowledged lost, nothing counted twice.
    pub fn final_check(&mut self, running: &[&Replicator], converged: bool) {
        self.check_pruning(running);
        self.stats.converged = converged;
        if !converged {
            self.violations
                .push("the running replicas did not converge".to_string());
        }
        let Some(first) = running.first() else {
            return;
        };
        for (element, write) in &self.acknowledged {
            if write.gone_with_holders {
                self.stats.lost_with_every_holder += 1;
            } else if !holds(first, *element) {
                self.stats.lost_writes += 1;
                if self.stats.lost_writes <= 5 {
                    self.violations
                        .push(format!("acknowledged element {element} is lost"));
                }
            }
        }
        self.stats.final_count = first.local_value(&counter_key()).map_or(0, GCounter::value);
        if self.stats.final_count > u128::from(self.stats.increments) {
            self.violations.push(format!(
                "the counter reads {} after {} increments",
                self.stats.final_count, self.stats.increments
            ));
        }
    }
}

fn set_of(stored: &Stored) -> Option<&OrSet<ReplicaId, u64>> {
    match stored {
        Stored::Value(envelope) => envelope.data.as_any().downcast_ref(),
        Stored::Deleted => None,
    }
}

fn holds(replicator: &Replicator, element: u64) -> bool {
    replicator
        .local_value(&set_key())
        .is_some_and(|s| s.contains(&element))
}
