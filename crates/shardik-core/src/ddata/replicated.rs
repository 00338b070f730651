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

    /// Folds what `removed` contributed into `owner`'s share, and forgets `removed`.
    fn prune(&mut self, removed: &R, owner: &R);

    /// Forgets what `removed` contributed, without folding it anywhere: for states merged in
    /// after the owner pruned it.
    fn pruning_cleanup(&mut self, removed: &R);
}
