//! What every replicated data type offers.

/// A replicated data type: a state any replica changes locally, and a merge that makes
/// replicas converge.
///
/// `merge` must be commutative (`a ⊔ b = b ⊔ a`), associative (`(a ⊔ b) ⊔ c = a ⊔ (b ⊔ c)`)
/// and idempotent (`a ⊔ a = a`): replicas then converge whatever the order, the grouping and
/// the repetition of the states they exchange. The built-in types' tests check these laws
/// with generated states; a type of your own should be tested the same way.
pub trait ReplicatedData: Clone + PartialEq {
    /// Merges `other` into `self`: afterwards `self` holds everything either held.
    fn merge(&mut self, other: &Self);

    /// The merge of `self` and `other`, as a new value.
    fn merged(&self, other: &Self) -> Self {
        let mut out = self.clone();
        out.merge(other);
        out
    }
}

/// A replicated data type that keeps state per replica, which must be pruned when a replica
/// leaves the cluster for good, or the state would name it forever.
///
/// Pruning happens once, on one replica (the *owner*), after every replica has learnt that the
/// pruning is under way: the owner calls [`prune`](Self::prune), which folds the removed
/// replica's contribution into its own, and from then on every replica calls
/// [`pruning_cleanup`](Self::pruning_cleanup) on each state it merges in, so that an old copy
/// cannot bring the removed replica's contribution back (it would be counted twice).
pub trait RemovedReplicaPruning<R>: ReplicatedData {
    /// Whether the state holds anything of `removed`.
    fn needs_pruning_from(&self, removed: &R) -> bool;

    /// Adds to `into` every replica the state holds something of: the candidates for pruning
    /// a node that learns of them only from the data (it never saw them as members).
    fn replicas_named(&self, into: &mut std::collections::BTreeSet<R>);

    /// Folds what `removed` contributed into `owner`'s share, and forgets `removed`.
    fn prune(&mut self, removed: &R, owner: &R);

    /// Forgets what `removed` contributed, without folding it anywhere: for states merged in
    /// after the owner pruned it.
    fn pruning_cleanup(&mut self, removed: &R);
}

/// A replicated data type whose local changes can travel as *deltas*: small states holding
/// only what changed since the last [`reset_delta`](Self::reset_delta), so that a replica
/// sends a few entries instead of its whole state after each change.
///
/// A delta merges into any replica's state with [`merge_delta`](Self::merge_delta) by the
/// same laws as a full state: the deltas of the types here may arrive in any order, more than
/// once, or not at all (full states, exchanged now and then, make up for lost ones).
pub trait DeltaReplicatedData: ReplicatedData {
    /// What a delta is.
    type Delta: ReplicatedData;

    /// What changed locally since the last reset; `None` if nothing did.
    fn delta(&self) -> Option<Self::Delta>;

    /// Forgets what changed: the next delta holds only later changes.
    fn reset_delta(&mut self);

    /// Merges a delta another replica made.
    fn merge_delta(&mut self, delta: &Self::Delta);
}

/// Nothing: the value an [`OrSet`](super::OrSet)'s elements carry. Merging nothing with
/// nothing is nothing.
impl ReplicatedData for () {
    fn merge(&mut self, _other: &Self) {}
}
