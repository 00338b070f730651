//! The merge laws, checked on generated states of every built-in type, and pruning.

use proptest::prelude::*;

use super::dots::DotContext;
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

/// A step of three replicas of one data type: a change (`a`, `b` and `c` say which, as each
/// type reads them), shipping a replica's delta, or one replica merging another's state in.
#[derive(Clone, Debug)]
enum Step {
    Change { replica: u8, a: u8, b: u8, c: bool },
    Ship(u8),
    Merge { from: u8, into: u8 },
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        3 => (0u8..3, 0u8..6, 0u8..4, any::<bool>())
            .prop_map(|(replica, a, b, c)| Step::Change { replica, a, b, c }),
        1 => (0u8..3).prop_map(Step::Ship),
        2 => (0u8..3, 0u8..3).prop_map(|(from, into)| Step::Merge { from, into }),
    ];
    prop::collection::vec(step, 0..40)
}

/// The three replicas' states after `steps`, where `change` makes a change, and every delta
/// shipped (the replicas' last ones included).
fn replay<D: DeltaReplicatedData + Default>(
    steps: &[Step],
    change: impl Fn(&mut D, u8, u8, u8, bool),
) -> (Vec<D>, Vec<D::Delta>) {
    let mut replicas = vec![D::default(); 3];
    let mut shipped = Vec::new();
    let ship = |replica: &mut D, shipped: &mut Vec<D::Delta>| {
        shipped.extend(replica.delta());
        replica.reset_delta();
    };
    for step in steps {
        match *step {
            Step::Change { replica, a, b, c } => {
                change(&mut replicas[usize::from(replica)], replica, a, b, c)
            }
            Step::Ship(r) => ship(&mut replicas[usize::from(r)], &mut shipped),
            Step::Merge { from, into } => {
                let theirs = replicas[usize::from(from)].clone();
                replicas[usize::from(into)].merge(&theirs);
            }
        }
    }
    for replica in &mut replicas {
        ship(replica, &mut shipped);
    }
    (replicas, shipped)
}

/// What the replicas reached obeys the laws, and a replica that hears only the deltas (in any
/// order, some twice, or grouped into one) holds what merging the full states gives.
fn assert_laws_and_deltas<D>(replicas: &[D], shipped: &[D::Delta], order: &[usize])
where
    D: DeltaReplicatedData + Default + std::fmt::Debug,
{
    assert_laws(&replicas[0], &replicas[1], &replicas[2]);
    let all = replicas[0].merged(&replicas[1]).merged(&replicas[2]);

    let mut listener = D::default();
    deliver(&mut listener, shipped, order);
    assert_eq!(listener, all, "deltas in any order reach the merged state");

    if let Some((first, rest)) = shipped.split_first() {
        let mut group = first.clone();
        for delta in rest.iter().rev() {
            group.merge(delta);
        }
        let mut grouped = D::default();
        grouped.merge_delta(&group);
        assert_eq!(grouped, all, "deltas grouped into one reach it too");
    }
}

fn orset_change(set: &mut OrSet<u8, u8>, replica: u8, element: u8, _: u8, add: bool) {
    if add {
        set.add(&replica, element);
    } else {
        set.remove(&element);
    }
}

fn counter_map_change(map: &mut PNCounterMap<u8, u8>, replica: u8, key: u8, n: u8, up: bool) {
    match (n, up) {
        (0, _) => {
            map.remove(&key);
        }
        (n, true) => map.increment(&replica, key, u64::from(n)),
        (n, false) => map.decrement(&replica, key, u64::from(n)),
    }
}

fn lww_map_change(map: &mut LwwMap<u8, u8, u8>, replica: u8, key: u8, value: u8, put: bool) {
    if put {
        // Clocks that disagree: each replica's runs ahead of the others by its id.
        map.put(
            &replica,
            key,
            value,
            u64::from(value) + u64::from(replica) * 3,
        );
    } else {
        map.remove(&key);
    }
}

fn multimap_change(map: &mut OrMultiMap<u8, u8, u8>, replica: u8, key: u8, value: u8, add: bool) {
    if add {
        map.add_binding(&replica, key, value);
    } else if value == 0 {
        map.remove(&key);
    } else {
        map.remove_binding(&replica, &key, &value);
    }
}

fn delivery_order() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..64, 0..48)
}

proptest! {
    /// The laws hold for states replicas reach by changing and merging (the observed-remove
    /// types' merges are defined for those, not for arbitrary dot sets), and their deltas
    /// reach the same states in any order.
    #[test]
    fn orsets_merge_by_the_laws_and_their_deltas_agree(steps in steps(), order in delivery_order()) {
        let (replicas, shipped) = replay(&steps, orset_change);
        assert_laws_and_deltas(&replicas, &shipped, &order);
    }

    #[test]
    fn counter_maps_merge_by_the_laws_and_their_deltas_agree(steps in steps(), order in delivery_order()) {
        let (replicas, shipped) = replay(&steps, counter_map_change);
        assert_laws_and_deltas(&replicas, &shipped, &order);
    }

    #[test]
    fn lww_maps_merge_by_the_laws_and_their_deltas_agree(steps in steps(), order in delivery_order()) {
        let (replicas, shipped) = replay(&steps, lww_map_change);
        assert_laws_and_deltas(&replicas, &shipped, &order);
    }

    #[test]
    fn multimaps_merge_by_the_laws_and_their_deltas_agree(steps in steps(), order in delivery_order()) {
        let (replicas, shipped) = replay(&steps, multimap_change);
        assert_laws_and_deltas(&replicas, &shipped, &order);
    }
}

proptest! {
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

#[test]
fn a_counter_removed_and_counted_again_starts_from_zero_where_the_removal_was_seen() {
    let (mut a, mut b) = (PNCounterMap::new(), PNCounterMap::new());
    a.increment(&1u8, "cart", 5);
    b.merge(&a);
    b.remove(&"cart");
    b.increment(&2, "cart", 1);
    a.merge(&b);
    assert_eq!(
        a.get(&"cart"),
        Some(1),
        "the old count went with the removal"
    );
    assert_eq!(a, b);
}

#[test]
fn a_count_concurrent_with_a_removal_keeps_the_key_with_what_its_replica_saw() {
    let (mut a, mut b) = (PNCounterMap::new(), PNCounterMap::new());
    a.increment(&1u8, "cart", 5);
    b.merge(&a);
    b.remove(&"cart");
    a.decrement(&1, "cart", 2);
    a.merge(&b);
    b.merge(&a);
    assert_eq!(a.get(&"cart"), Some(3));
    assert_eq!(b.get(&"cart"), Some(3));
}

#[test]
fn concurrent_counts_on_one_key_add_up() {
    let (mut a, mut b) = (PNCounterMap::new(), PNCounterMap::new());
    a.increment(&1u8, "k", 2);
    b.merge(&a);
    a.increment(&1, "k", 3);
    b.increment(&2, "k", 4);
    a.merge(&b);
    assert_eq!(a.get(&"k"), Some(9));
    assert_eq!(a.iter().collect::<Vec<_>>(), [(&"k", 9)]);
}

#[test]
fn the_later_put_wins_in_an_lww_map() {
    let (mut a, mut b) = (LwwMap::new(), LwwMap::new());
    a.put(&1u8, "colour", "red", 10);
    b.merge(&a);
    b.put(&2, "colour", "blue", 20);
    a.put(&1, "colour", "green", 15);
    a.merge(&b);
    b.merge(&a);
    assert_eq!(a.get(&"colour"), Some("blue"));
    assert_eq!(a, b);
    assert!(a.remove(&"colour") && !a.contains_key(&"colour"));
}

#[test]
fn a_multimap_drops_a_key_with_its_last_binding() {
    let mut m = OrMultiMap::new();
    m.add_binding(&1u8, "room", "ann");
    m.add_binding(&1, "room", "bob");
    assert_eq!(m.get(&"room"), Some(vec!["ann", "bob"]));
    assert!(m.remove_binding(&1, &"room", &"ann"));
    assert!(!m.remove_binding(&1, &"room", &"ann"), "already gone");
    assert_eq!(m.get(&"room"), Some(vec!["bob"]));
    assert!(m.remove_binding(&1, &"room", &"bob"));
    assert!(m.is_empty());
}

/// A removed replica's counts in a map's values are folded into the owner's once, and an old
/// copy cleaned of the removed replica neither counts them twice nor brings its dots back.
#[test]
fn a_pruned_replicas_counts_in_a_map_are_counted_once() {
    let (mut owner, mut gone) = (PNCounterMap::new(), PNCounterMap::new());
    gone.increment(&9u8, "a", 7);
    gone.increment(&9, "b", 1);
    owner.merge(&gone);
    owner.increment(&1, "a", 2);
    let old_copy = gone.clone();
    assert!(owner.needs_pruning_from(&9));

    owner.prune(&9, &1);
    assert!(!owner.needs_pruning_from(&9));
    assert_eq!(owner.iter().collect::<Vec<_>>(), [(&"a", 9), (&"b", 1)]);

    let mut late = old_copy;
    late.pruning_cleanup(&9);
    owner.merge(&late);
    assert_eq!(owner.iter().collect::<Vec<_>>(), [(&"a", 9), (&"b", 1)]);
    assert!(!owner.needs_pruning_from(&9));

    // A replica that saw a count of the removed replica through another key's dot converges
    // on the pruned state once it cleans what it merges.
    let mut other = PNCounterMap::new();
    other.merge(&gone);
    other.increment(&2, "a", 1);
    other.pruning_cleanup(&9);
    other.merge(&owner);
    owner.merge(&other);
    assert_eq!(other, owner);
    assert_eq!(owner.get(&"a"), Some(10));
}

#[test]
fn an_orset_delta_heard_before_the_one_it_follows_waits_in_the_cloud() {
    let mut source = OrSet::new();
    source.add(&1u8, "x");
    let first = source.delta().unwrap();
    source.reset_delta();
    source.remove(&"x");
    source.add(&1, "y");
    let second = source.delta().unwrap();

    let mut listener = OrSet::new();
    listener.merge_delta(&second);
    assert_eq!(listener.elements().collect::<Vec<_>>(), [&"y"]);
    listener.merge_delta(&first);
    assert!(
        !listener.contains(&"x"),
        "the removal heard first is not undone by the addition heard late"
    );
    assert_eq!(listener, source);
}

#[test]
fn dots_seen_out_of_order_fold_into_the_run_once_the_gap_fills() {
    let mut seen = DotContext::default();
    seen.insert((1u8, 3));
    seen.insert((1, 1));
    assert!(seen.contains(&(1, 1)) && !seen.contains(&(1, 2)) && seen.contains(&(1, 3)));
    seen.insert((1, 2));
    let mut contiguous = DotContext::default();
    for n in 1..=3 {
        contiguous.insert((1u8, n));
    }
    assert_eq!(seen, contiguous, "one representation per set of dots");
    assert_eq!(seen.next_dot(&1), (1, 4));
}

#[test]
fn a_replicas_next_dot_follows_its_highest_seen_even_beyond_a_gap() {
    let mut seen = DotContext::default();
    seen.insert((2u8, 5));
    assert_eq!(seen.next_dot(&2), (2, 6));
    seen.forget(&2);
    assert!(!seen.names(&2));
}
