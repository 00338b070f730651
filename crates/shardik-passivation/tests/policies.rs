//! Exact-outcome unit tests of each policy's behaviour, after the reference's specs.

use std::time::Duration;

use shardik_passivation::{
    ActiveEntities, AdmissionFilterSettings, CompositeSettings, CompositeStrategy, FrequencyList,
    FrequencySketch, HillClimbing, IdleCheck, IdleStrategy, LimitStrategy, PassivationStrategy,
    RecencyList, ReplacementPolicy, SegmentedRecencyList, ceiling_power_of_two, java_decimal_hash,
    java_string_hash, node_sizes, segment_limits, segment_limits_floor,
};

fn touch<S: PassivationStrategy<u64>>(s: &mut S, id: u64) -> Vec<u64> {
    s.touched(&id, 0)
}

#[test]
fn lru_passivates_least_recent_and_on_shards_updated() {
    let mut s = LimitStrategy::<u64>::new(&ReplacementPolicy::LeastRecentlyUsed, 3, None);
    assert!(touch(&mut s, 1).is_empty());
    assert!(touch(&mut s, 2).is_empty());
    assert!(touch(&mut s, 3).is_empty());
    assert_eq!(touch(&mut s, 4), vec![1]);
    assert!(touch(&mut s, 2).is_empty());
    assert_eq!(touch(&mut s, 5), vec![3]);
    let mut out = Vec::new();
    s.shards_updated(2, &mut out); // 3 / 2 = 1 per shard
    assert_eq!(out, vec![4, 2]);
    assert_eq!(s.per_shard_limit(), 1);
    out.clear();
    s.limit_updated(10, &mut out); // 10 / 2 = 5
    assert!(out.is_empty());
    assert_eq!(s.per_shard_limit(), 5);
}

#[test]
fn mru_passivates_most_recent_before_the_touched_entity() {
    let mut s = LimitStrategy::<u64>::new(&ReplacementPolicy::MostRecentlyUsed, 3, None);
    for id in 1..=3 {
        assert!(touch(&mut s, id).is_empty());
    }
    assert_eq!(touch(&mut s, 4), vec![3]);
    assert!(touch(&mut s, 1).is_empty());
    assert_eq!(touch(&mut s, 5), vec![1]);
    let mut out = Vec::new();
    s.shards_updated(3, &mut out); // limit 1: passivate from the most recent end
    assert_eq!(out, vec![5, 4]);
}

#[test]
fn lfu_evicts_least_frequent_before_inserting() {
    let mut s = LimitStrategy::<u64>::new(
        &ReplacementPolicy::LeastFrequentlyUsed {
            dynamic_aging: false,
        },
        3,
        None,
    );
    for id in [1, 1, 2, 2, 2, 3] {
        assert!(touch(&mut s, id).is_empty());
    }
    assert_eq!(touch(&mut s, 4), vec![3]);
    // the newcomer is now the least frequent (and least recent at frequency 1)
    assert_eq!(touch(&mut s, 5), vec![4]);
    assert!(touch(&mut s, 5).is_empty());
    assert_eq!(touch(&mut s, 6), vec![1]); // 1 and 5 both at 2; 1 touched least recently
}

#[test]
fn lfuda_ages_new_entities() {
    let mut l = FrequencyList::<u64>::new(true);
    let mut out = Vec::new();
    for id in [10, 10, 10, 20] {
        l.update(&id);
    }
    assert_eq!(l.priority_of(&10), Some(3));
    assert_eq!(l.priority_of(&20), Some(1));
    l.remove_least_frequent(1, &mut out);
    assert_eq!(out, vec![20]);
    assert_eq!(l.age(), 1);
    l.update(&30);
    assert_eq!(l.priority_of(&30), Some(2));
    l.remove_least_frequent(1, &mut out);
    assert_eq!(out, vec![20, 30]);
    assert_eq!(l.age(), 2);
    l.update(&40); // 1 + age 2 = 3: same bucket as 10, after it
    assert_eq!(l.buckets(), vec![(3, vec![10, 40])]);
    l.update(&40); // accesses 2 + age 2 = 4
    assert_eq!(l.buckets(), vec![(3, vec![10]), (4, vec![40])]);
    l.remove_least_frequent(1, &mut out);
    assert_eq!(out, vec![20, 30, 10]);
    assert_eq!(l.age(), 3);
}

#[test]
fn lfuda_strategy_limits() {
    let mut s = LimitStrategy::<u64>::new(
        &ReplacementPolicy::LeastFrequentlyUsed {
            dynamic_aging: true,
        },
        2,
        None,
    );
    for id in [1, 1, 1, 2] {
        assert!(touch(&mut s, id).is_empty());
    }
    assert_eq!(touch(&mut s, 3), vec![2]); // age 1, 3 gets priority 2
    assert_eq!(touch(&mut s, 4), vec![3]); // age 2, 4 gets priority 3 (ties 1, newer)
    assert_eq!(touch(&mut s, 5), vec![1]); // 1 is least recent in bucket 3
}

#[test]
fn slru_promotes_demotes_and_evicts_from_level_zero() {
    let mut l = SegmentedRecencyList::<u64>::new(segment_limits(4, &[0.5, 0.5]));
    let mut out = Vec::new();
    for id in 1..=4 {
        l.update(&id);
        l.remove_least_recent_over_limit(&mut out);
    }
    assert!(out.is_empty());
    for id in [1, 2, 3] {
        l.update(&id);
        l.remove_least_recent_over_limit(&mut out);
    }
    assert_eq!(l.iter_level(0).copied().collect::<Vec<_>>(), vec![4, 1]);
    assert_eq!(l.iter_level(1).copied().collect::<Vec<_>>(), vec![2, 3]);
    l.update(&5);
    l.remove_least_recent_over_limit(&mut out);
    assert_eq!(out, vec![4]);
    assert_eq!(l.iter_level(0).copied().collect::<Vec<_>>(), vec![1, 5]);
    // top-level hit moves to the tail of the top level
    l.update(&2);
    assert_eq!(l.iter_level(1).copied().collect::<Vec<_>>(), vec![3, 2]);
    // shrinking: demote overflow top-down, then evict from level 0
    l.update_limits(vec![1, 1]);
    l.remove_least_recent_over_limit(&mut out);
    assert_eq!(out, vec![4, 1, 5]);
    assert_eq!(l.iter_level(0).copied().collect::<Vec<_>>(), vec![3]);
    assert_eq!(l.iter_level(1).copied().collect::<Vec<_>>(), vec![2]);
}

#[test]
fn segment_limit_rounding() {
    assert_eq!(segment_limits(12, &[0.2, 0.8]), vec![3, 9]);
    assert_eq!(segment_limits(10, &[0.25; 4]), vec![4, 2, 2, 2]);
    assert_eq!(segment_limits_floor(12, &[0.2, 0.8]), vec![2, 9]);
    assert_eq!(segment_limits_floor(10, &[0.25; 4]), vec![2, 2, 2, 2]);
}

#[test]
fn s4lru_strategy_total_is_exact() {
    let mut s = LimitStrategy::<u64>::new(
        &ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.25; 4]),
        10,
        None,
    );
    let mut passivated = 0;
    for id in 0..100u64 {
        passivated += touch(&mut s, id % 37).len();
        passivated += touch(&mut s, id % 5).len();
    }
    assert_eq!(s.len(), 10);
    assert!(passivated > 0);
}

#[test]
fn idle_strategy_passivates_after_timeout() {
    let mut s = IdleStrategy::<u64>::new(IdleCheck::new(Duration::from_secs(120)));
    assert_eq!(s.scheduled_interval(), Some(Duration::from_secs(60)));
    s.touched(&1, 0);
    s.touched(&2, 60_000);
    s.touched(&3, 100_000);
    let mut out = Vec::new();
    s.interval_passed(120_000, &mut out);
    assert!(out.is_empty());
    s.interval_passed(130_000, &mut out);
    assert_eq!(out, vec![1]);
    s.touched(&2, 140_000);
    out.clear();
    s.interval_passed(230_000, &mut out);
    assert_eq!(out, vec![3]);
    s.entity_terminated(&2);
    assert_eq!(s.len(), 0);
}

#[test]
fn idle_timeout_combined_with_limit() {
    let idle = IdleCheck::new(Duration::from_secs(10));
    let mut s = LimitStrategy::<u64>::new(&ReplacementPolicy::LeastRecentlyUsed, 2, Some(idle));
    assert_eq!(s.scheduled_interval(), Some(Duration::from_secs(5)));
    s.touched(&1, 0);
    s.touched(&2, 8_000);
    assert_eq!(s.touched(&3, 9_000), vec![1]);
    let mut out = Vec::new();
    s.interval_passed(18_500, &mut out); // 2 idle since 8 s (> 10 s), 3 since 9 s (not yet)
    assert_eq!(out, vec![2]);
    assert_eq!(s.len(), 1);
}

fn composite(hc: bool, main: ReplacementPolicy) -> CompositeSettings {
    CompositeSettings {
        optimizer: hc.then(Default::default),
        main,
        ..CompositeSettings::default_strategy()
    }
}

#[test]
fn composite_admits_only_strictly_more_frequent_candidates() {
    // limit 2: window 1% of 2 = 0, so every newcomer is a candidate for the main area
    let mut s = CompositeStrategy::<u64>::new(
        &composite(false, ReplacementPolicy::LeastRecentlyUsed),
        2,
        None,
    );
    assert_eq!(s.area_limits(), (0, 2));
    assert!(touch(&mut s, 1).is_empty());
    assert!(touch(&mut s, 2).is_empty());
    assert_eq!(touch(&mut s, 3), vec![3]); // freq 1 vs victim 1 (freq 1): tie rejects
    assert_eq!(touch(&mut s, 3), vec![1]); // freq 2 > 1: admitted, LRU victim 1 passivated
    assert!(s.main().is_active(&3));
    assert_eq!(s.len(), 2);
}

#[test]
fn composite_window_feeds_main() {
    // limit 100 per region, window 1 % = 1, main 99 (SLRU 20/79)
    let mut s = CompositeStrategy::<u64>::new(&CompositeSettings::default_strategy(), 100, None);
    assert_eq!(s.area_limits(), (1, 99));
    for id in 0..100 {
        assert!(touch(&mut s, id).is_empty());
    }
    assert!(s.window().is_active(&99));
    assert_eq!(s.main().len(), 99);
    // 100 evicts 99 from the window; 99 (freq 1) vs main victim 0 (freq 1): rejected
    assert_eq!(touch(&mut s, 100), vec![99]);
    // shards updated: limit 50 -> window 0, main 50; the sketch is recreated empty
    let mut out = Vec::new();
    s.shards_updated(2, &mut out);
    assert_eq!(s.area_limits(), (0, 50));
    assert_eq!(out.len(), 50);
    assert_eq!(s.len(), 50);
}

#[test]
fn composite_without_filter_always_admits() {
    let mut settings = composite(false, ReplacementPolicy::LeastRecentlyUsed);
    settings.filter = AdmissionFilterSettings::Always;
    settings.window = None;
    let mut s = CompositeStrategy::<u64>::new(&settings, 2, None);
    assert_eq!(s.area_limits(), (0, 2));
    touch(&mut s, 1);
    touch(&mut s, 2);
    assert_eq!(touch(&mut s, 3), vec![1]);
}

#[test]
fn hill_climbing_steps() {
    let mut o = HillClimbing::new(10, 10.0, 0.0625, 0.05, 0.98);
    let period = |o: &mut HillClimbing, active: u32| {
        for i in 0..100 {
            if i < active {
                o.record_active()
            } else {
                o.record_passive()
            }
            if i < 99 {
                assert_eq!(o.calculate_adjustment(), 0.0);
            }
        }
        o.calculate_adjustment()
    };
    // first adjustment starts by shrinking the window; big change restarts the step
    assert_eq!(period(&mut o, 50), -0.0625);
    assert_eq!(o.next_step(), -0.0625);
    assert_eq!(period(&mut o, 60), -0.0625);
    // rate dropped (small change): reverse direction, decay the step
    assert_eq!(period(&mut o, 58), 0.0625);
    assert!((o.next_step() - 0.06125).abs() < 1e-12);
    assert!((period(&mut o, 59) - 0.06125).abs() < 1e-12);
    assert!((o.next_step() - 0.06125 * 0.98).abs() < 1e-12);
    o.update_limit(1); // adjust every 10 accesses now
    for _ in 0..10 {
        o.record_passive();
    }
    // rate 0: delta -0.59 restarts in the reversed direction
    assert!((o.calculate_adjustment() + 0.06125 * 0.98).abs() < 1e-12);
    assert_eq!(o.next_step(), -0.0625);
}

#[test]
fn frequency_sketch_counts_saturates_and_resets() {
    let mut s = FrequencySketch::new(100, 4, 10.0, 4, 4);
    assert_eq!(s.memory_bytes(), 4 * 512 / 2);
    let h = java_string_hash("entity-1");
    assert_eq!(s.frequency(h), 0);
    for i in 1..=20 {
        s.increment(h);
        assert_eq!(s.frequency(h), i.min(15));
    }
    assert_eq!(s.size(), 15); // saturated increments are not counted
    let mut i = 0;
    loop {
        let before = s.size();
        s.increment(java_decimal_hash(i));
        i += 1;
        if s.size() < before {
            break;
        }
        assert_eq!(
            s.size(),
            before + 1,
            "every fresh id counts until the reset"
        );
    }
    assert_eq!(i, 1000 - 15);
    // reset happened at 1000 counted increments: every counter halved
    assert_eq!(s.frequency(h), 7);
    assert!(s.size() < 1000);
}

#[test]
fn general_sketch_counts() {
    let mut s = FrequencySketch::new(64, 4, 10.0, 3, 8);
    assert!(matches!(s, FrequencySketch::General(_)));
    for _ in 0..300 {
        s.increment(42);
    }
    assert_eq!(s.frequency(42), 255);
    assert_eq!(s.frequency(43), 0);
}

#[test]
fn java_hash_codes() {
    assert_eq!(java_string_hash(""), 0);
    assert_eq!(java_string_hash("hello"), 99_162_322);
    assert_eq!(java_decimal_hash(-1), java_string_hash("-1"));
    assert_eq!(
        java_decimal_hash(1_234_567_890_123),
        java_string_hash("1234567890123")
    );
    assert_eq!(
        java_decimal_hash(i64::MIN),
        java_string_hash(&i64::MIN.to_string())
    );
    assert_eq!(ceiling_power_of_two(0), 1);
    assert_eq!(ceiling_power_of_two(1), 1);
    assert_eq!(ceiling_power_of_two(25), 32);
    assert_eq!(ceiling_power_of_two(100_000), 131_072);
}

#[test]
fn recency_list_operations() {
    let mut l = RecencyList::<u64>::new();
    for (id, t) in [(1, 10), (2, 20), (3, 30), (4, 40)] {
        l.update(&id, t);
    }
    l.update(&2, 50);
    assert_eq!(l.iter().copied().collect::<Vec<_>>(), vec![1, 3, 4, 2]);
    let mut out = Vec::new();
    l.remove_most_recent(1, 1, &mut out);
    assert_eq!(out, vec![4]);
    l.remove_least_recent_outside(60, 25, &mut out); // stamps < 35
    assert_eq!(out, vec![4, 1, 3]);
    assert_eq!(l.least_recent(), Some(&2));
    assert!(l.remove(&2));
    assert!(l.is_empty());
}

#[test]
fn active_entities_select_victims() {
    let mut lfu = ActiveEntities::<u64>::new(
        &ReplacementPolicy::LeastFrequentlyUsed {
            dynamic_aging: false,
        },
        3,
    );
    let mut out = Vec::new();
    for id in [1, 1, 2, 3, 3] {
        lfu.update(&id, &mut out);
    }
    assert_eq!(lfu.select(), Some(&2));
    let mut mru = ActiveEntities::<u64>::new(&ReplacementPolicy::MostRecentlyUsed, 3);
    for id in [1, 2, 3] {
        mru.update(&id, &mut out);
    }
    assert_eq!(mru.select(), Some(&3));
    assert!(out.is_empty());
}

#[test]
fn memory_layout() {
    // the per-entity figures in the crate docs
    let sizes = node_sizes();
    assert_eq!(sizes[0], ("recency", 24));
    assert_eq!(sizes[1], ("segmented", 24));
    assert_eq!(sizes[2], ("frequency", 32));
}
