//! The merge laws, checked on generated states of every built-in type, and pruning.

use proptest::prelude::*;

use super::*;

/// Replica ids: a few, so that generated states share replicas.
fn replica() -> impl Strategy<Value = u8> {
    0u8..4
}

/// A counter built by increments from random replicas.
fn gcounter() -> impl Strategy<Value = GCounter<u8>> {
    prop::collection::vec((replica(), 0u64..1_000), 0..8).prop_map(|steps| {
        let mut c = GCounter::new();
        for (r, n) in steps {
            c.increment(&r, n);
        }
        c
    })
}

fn pncounter() -> impl Strategy<Value = PNCounter<u8>> {
    (gcounter(), gcounter()).prop_map(|(up, down)| {
        let mut c = PNCounter::new();
        for r in up.replicas() {
            c.increment(r, up.count_of(r));
        }
        for r in down.replicas() {
            c.decrement(r, down.count_of(r));
        }
        c
    })
}

fn gset() -> impl Strategy<Value = GSet<u8>> {
    prop::collection::vec(0u8..16, 0..8).prop_map(|elements| {
        let mut s = GSet::new();
        for e in elements {
            s.add(e);
        }
        s
    })
}

fn flag() -> impl Strategy<Value = Flag> {
    any::<bool>().prop_map(|on| {
        let mut f = Flag::new();
        if on {
            f.switch_on();
        }
        f
    })
}

/// Commutative, associative, idempotent.
fn assert_laws<D: ReplicatedData + std::fmt::Debug>(a: &D, b: &D, c: &D) {
    assert_eq!(a.merged(b), b.merged(a), "commutative");
    assert_eq!(a.merged(b).merged(c), a.merged(&b.merged(c)), "associative");
    assert_eq!(a.merged(a), *a, "idempotent");
    // A merged state holds both sides: merging either in again changes nothing.
    let both = a.merged(b);
    assert_eq!(both.merged(a), both);
    assert_eq!(both.merged(b), both);
}

proptest! {
    #[test]
    fn gcounters_merge_by_the_laws(a in gcounter(), b in gcounter(), c in gcounter()) {
        assert_laws(&a, &b, &c);
    }

    #[test]
    fn pncounters_merge_by_the_laws(a in pncounter(), b in pncounter(), c in pncounter()) {
        assert_laws(&a, &b, &c);
    }

    #[test]
    fn gsets_merge_by_the_laws(a in gset(), b in gset(), c in gset()) {
        assert_laws(&a, &b, &c);
    }

    #[test]
    fn flags_merge_by_the_laws(a in flag(), b in flag(), c in flag()) {
        assert_laws(&a, &b, &c);
    }

    /// Replicas that each count their own increments agree, after exchanging states, on the
    /// sum of all increments.
    #[test]
    fn replicas_agree_on_every_increment(steps in prop::collection::vec((replica(), 0u64..100), 0..40)) {
        let mut replicas: Vec<GCounter<u8>> = vec![GCounter::new(); 4];
        let mut total = 0u128;
        for (r, n) in &steps {
            replicas[usize::from(*r)].increment(r, *n);
            total += u128::from(*n);
        }
        let all = replicas.iter().fold(GCounter::new(), |acc, r| acc.merged(r));
        prop_assert_eq!(all.value(), total);
    }
}

#[test]
fn a_pncounter_goes_both_ways() {
    let mut c = PNCounter::new();
    c.increment(&"a", 5);
    c.decrement(&"b", 7);
    assert_eq!(c.value(), -2);
    let mut other = PNCounter::new();
    other.increment(&"b", 1);
    c.merge(&other);
    assert_eq!(c.value(), -1);
}

#[test]
fn a_flag_switched_on_anywhere_is_on_everywhere_after_a_merge() {
    let mut on = Flag::new();
    on.switch_on();
    let mut off = Flag::new();
    assert!(!off.is_on());
    off.merge(&on);
    assert!(off.is_on());
}

/// The owner folds the removed replica's count into its own; an old copy merged in later,
/// cleaned of the removed replica, does not count it twice.
#[test]
fn a_pruned_replica_is_counted_once_and_never_comes_back() {
    let mut state = GCounter::new();
    state.increment(&1u8, 10);
    state.increment(&2u8, 5);
    let old_copy = state.clone();
    assert!(state.needs_pruning_from(&2));

    state.prune(&2, &1);
    assert_eq!(state.value(), 15, "nothing lost");
    assert_eq!(state.count_of(&1), 15);
    assert!(!state.needs_pruning_from(&2));

    let mut late = old_copy;
    late.pruning_cleanup(&2);
    state.merge(&late);
    assert_eq!(
        state.value(),
        15,
        "the removed replica's count is not added again"
    );
    assert!(!state.needs_pruning_from(&2));
}

#[test]
fn pruning_a_pncounter_keeps_its_value() {
    let mut c = PNCounter::new();
    c.increment(&1u8, 3);
    c.increment(&2u8, 4);
    c.decrement(&2u8, 6);
    c.prune(&2, &1);
    assert_eq!(c.value(), 1);
    assert!(!c.needs_pruning_from(&2));
}

#[test]
fn a_replicas_count_saturates_instead_of_wrapping() {
    let mut c = GCounter::new();
    c.increment(&1u8, u64::MAX);
    c.increment(&1u8, 1);
    c.increment(&2u8, u64::MAX);
    assert_eq!(c.value(), 2 * u128::from(u64::MAX));
}

/// A step of three replicas of one set: an addition, a removal, or one replica merging
/// another's state in.
#[derive(Clone, Debug)]
enum SetStep {
    Add(u8, u8),
    Remove(u8, u8),
    Merge { from: u8, into: u8 },
}

fn set_steps() -> impl Strategy<Value = Vec<SetStep>> {
    let step = prop_oneof![
        (0u8..3, 0u8..6).prop_map(|(r, e)| SetStep::Add(r, e)),
        (0u8..3, 0u8..6).prop_map(|(r, e)| SetStep::Remove(r, e)),
        (0u8..3, 0u8..3).prop_map(|(from, into)| SetStep::Merge { from, into }),
    ];
    prop::collection::vec(step, 0..30)
}

/// The three replicas' states after `steps`.
fn replay(steps: &[SetStep]) -> Vec<OrSet<u8, u8>> {
    let mut replicas = vec![OrSet::new(); 3];
    for step in steps {
        match *step {
            SetStep::Add(r, e) => replicas[usize::from(r)].add(&r, e),
            SetStep::Remove(r, e) => {
                replicas[usize::from(r)].remove(&e);
            }
            SetStep::Merge { from, into } => {
                let theirs = replicas[usize::from(from)].clone();
                replicas[usize::from(into)].merge(&theirs);
            }
        }
    }
    replicas
}

proptest! {
    /// The laws hold for states replicas reach by adding, removing and merging (an OR-set's
    /// merge is defined for those, not for arbitrary dot sets).
    #[test]
    fn orsets_merge_by_the_laws(steps in set_steps()) {
        let r = replay(&steps);
        assert_laws(&r[0], &r[1], &r[2]);
    }

    #[test]
    fn lww_registers_merge_by_the_laws(
        writes in prop::collection::vec((0u8..3, 0u32..100, 0u64..20), 1..12)
    ) {
        // Each replica writes with its own clock; the registers start from one first write.
        let mut replicas = vec![LwwRegister::new(&0u8, 0u32, 0); 3];
        for (r, value, now) in writes {
            replicas[usize::from(r)].set(&r, value, now);
        }
        assert_laws(&replicas[0], &replicas[1], &replicas[2]);
    }
}

#[test]
fn an_addition_concurrent_with_a_removal_wins() {
    let (mut a, mut b) = (OrSet::new(), OrSet::new());
    a.add(&1u8, "x");
    b.merge(&a);
    // b removes what it has seen; a adds "x" again meanwhile.
    assert!(b.remove(&"x"));
    a.add(&1u8, "x");
    a.merge(&b);
    b.merge(&a);
    assert!(a.contains(&"x") && b.contains(&"x"));
    assert_eq!(a, b);
}

#[test]
fn a_removal_of_what_was_seen_sticks() {
    let (mut a, mut b) = (OrSet::new(), OrSet::new());
    a.add(&1u8, "x");
    a.add(&1u8, "y");
    b.merge(&a);
    b.remove(&"x");
    a.merge(&b);
    assert!(!a.contains(&"x"), "the removal reached a");
    assert!(a.contains(&"y"));
    // An old copy of a, from before the removal, does not bring "x" back.
    let mut old = OrSet::new();
    old.add(&1u8, "x");
    b.merge(&old);
    assert!(!b.contains(&"x"));
}

#[test]
fn the_last_write_wins_and_a_tie_goes_to_the_lower_replica() {
    let mut a = LwwRegister::new(&1u8, "first", 10);
    let mut b = a.clone();
    a.set(&1, "by one", 20);
    b.set(&2, "by two", 30);
    a.merge(&b);
    assert_eq!(*a.value(), "by two");

    let mut c = LwwRegister::new(&3u8, "by three", 50);
    let d = LwwRegister::new(&2u8, "by two", 50);
    c.merge(&d);
    assert_eq!(
        *c.value(),
        "by two",
        "same timestamp: the lower replica wins"
    );
}

#[test]
fn a_writer_behind_the_register_still_moves_it_forward() {
    let mut r = LwwRegister::new(&1u8, 1, 100);
    r.set(&1, 2, 5);
    assert_eq!((*r.value(), r.timestamp()), (2, 101));
}

/// Applies `deltas` to `to` in the order `order` names (indices, repeats allowed: a delta may
/// arrive twice), then once each in order (the ones lost or late arrive at last).
fn deliver<D: DeltaReplicatedData>(to: &mut D, deltas: &[D::Delta], order: &[usize]) {
    for &i in order {
        if let Some(delta) = deltas.get(i % deltas.len().max(1)) {
            to.merge_delta(delta);
        }
    }
    for delta in deltas {
        to.merge_delta(delta);
    }
}

proptest! {
    /// A replica that hears a counter's deltas, in any order and some twice, ends where the
    /// counter is.
    #[test]
    fn counter_deltas_in_any_order_reach_the_full_state(
        batches in prop::collection::vec(prop::collection::vec((replica(), 0u64..50, any::<bool>()), 1..5), 1..8),
        order in prop::collection::vec(0usize..16, 0..24),
    ) {
        let mut source: PNCounter<u8> = PNCounter::new();
        let mut listener = source.clone();
        let mut deltas = Vec::new();
        for batch in batches {
            for (r, n, up) in batch {
                if up { source.increment(&r, n) } else { source.decrement(&r, n) }
            }
            deltas.extend(source.delta());
            source.reset_delta();
        }
        prop_assert!(source.delta().is_none());
        deliver(&mut listener, &deltas, &order);
        prop_assert_eq!(listener.value(), source.value());
        prop_assert_eq!(listener, source);
    }

    #[test]
    fn gset_deltas_in_any_order_reach_the_full_state(
        batches in prop::collection::vec(prop::collection::vec(0u8..32, 1..5), 1..8),
        order in prop::collection::vec(0usize..16, 0..24),
    ) {
        let mut source: GSet<u8> = GSet::new();
        let mut listener = source.clone();
        let mut deltas = Vec::new();
        for batch in batches {
            for e in batch {
                source.add(e);
            }
            deltas.extend(source.delta());
            source.reset_delta();
        }
        deliver(&mut listener, &deltas, &order);
        prop_assert_eq!(listener, source);
    }
}

#[test]
fn a_delta_holds_only_what_changed_since_the_reset() {
    let mut c = GCounter::new();
    c.increment(&1u8, 5);
    c.increment(&2u8, 1);
    c.reset_delta();
    assert!(c.delta().is_none(), "nothing changed since the reset");
    c.increment(&2u8, 3);
    let delta = c.delta().unwrap();
    assert_eq!(delta.replicas().collect::<Vec<_>>(), [&2]);
    assert_eq!(delta.count_of(&2), 4, "the whole count, not the difference");

    let mut s = GSet::new();
    s.add("a");
    s.reset_delta();
    assert!(!s.add("a"), "already there");
    assert!(s.delta().is_none(), "adding what is there changes nothing");
    s.add("b");
    assert_eq!(s.delta().unwrap().elements().collect::<Vec<_>>(), [&"b"]);
}

/// An element only a removed replica's addition keeps in stays in once the owner prunes, and
/// an old copy, cleaned of the removed replica, neither brings its dots back nor drops the
/// element.
#[test]
fn a_pruned_replicas_additions_are_kept_by_the_owner() {
    let (mut owner, mut gone) = (OrSet::new(), OrSet::new());
    gone.add(&9u8, "x");
    owner.add(&1u8, "y");
    owner.merge(&gone);
    let old_copy = gone.clone();
    assert!(owner.needs_pruning_from(&9));

    owner.prune(&9, &1);
    assert!(!owner.needs_pruning_from(&9));
    assert_eq!(owner.elements().collect::<Vec<_>>(), [&"x", &"y"]);

    let mut late = old_copy;
    late.pruning_cleanup(&9);
    assert!(
        late.is_empty(),
        "the cleaned copy holds nothing of the removed replica"
    );
    owner.merge(&late);
    assert_eq!(owner.elements().collect::<Vec<_>>(), [&"x", &"y"]);
    assert!(!owner.needs_pruning_from(&9));

    // Replicas that merge the pruned state (cleaning what they merge in) converge on it.
    let mut other = OrSet::new();
    other.merge(&gone);
    other.pruning_cleanup(&9);
    other.merge(&owner);
    assert_eq!(other, owner);
}
