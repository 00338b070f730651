//! Property tests: a limit-based strategy never tracks more than its per-shard limit, and every id
//! it asks to passivate was active.

use std::collections::HashSet;

use proptest::prelude::*;
use shardik_passivation::{
    CompositeSettings, CompositeStrategy, LimitStrategy, PassivationStrategy, ReplacementPolicy,
    Strategy as Policy,
};

#[derive(Debug, Clone)]
enum Op {
    Touch(u64),
    Terminate(u64),
    Shards(usize),
    Limit(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0u64..40).prop_map(Op::Touch),
        1 => (0u64..40).prop_map(Op::Terminate),
        1 => (1usize..5).prop_map(Op::Shards),
        1 => (0usize..30).prop_map(Op::Limit),
    ]
}

fn strategies(limit: usize) -> Vec<Policy<u64>> {
    let mut v: Vec<Policy<u64>> = [
        ReplacementPolicy::LeastRecentlyUsed,
        ReplacementPolicy::MostRecentlyUsed,
        ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.2, 0.8]),
        ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.25; 4]),
        ReplacementPolicy::LeastFrequentlyUsed {
            dynamic_aging: false,
        },
        ReplacementPolicy::LeastFrequentlyUsed {
            dynamic_aging: true,
        },
    ]
    .iter()
    .map(|p| Policy::Limit(LimitStrategy::new(p, limit, None)))
    .collect();
    let mut settings = CompositeSettings::default_strategy();
    v.push(Policy::Composite(Box::new(CompositeStrategy::new(
        &settings, limit, None,
    ))));
    settings.window_proportion_for_tests();
    v.push(Policy::Composite(Box::new(CompositeStrategy::new(
        &settings, limit, None,
    ))));
    settings.main = ReplacementPolicy::LeastFrequentlyUsed {
        dynamic_aging: true,
    };
    v.push(Policy::Composite(Box::new(CompositeStrategy::new(
        &settings, limit, None,
    ))));
    v
}

trait TestTweak {
    fn window_proportion_for_tests(&mut self);
}
impl TestTweak for CompositeSettings {
    fn window_proportion_for_tests(&mut self) {
        // a large window with a fast optimizer exercises resizing in both directions
        self.initial_window_proportion = 0.5;
        if let Some(o) = &mut self.optimizer {
            o.adjust_multiplier = 0.5;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn never_over_limit_and_only_active_passivated(
        limit in 0usize..25,
        ops in proptest::collection::vec(op(), 1..400),
    ) {
        for (n, mut s) in strategies(limit).into_iter().enumerate() {
            let mut active: HashSet<u64> = HashSet::new();
            let mut per_region = limit;
            let mut shards = 1usize;
            let mut out = Vec::new();
            for (t, op) in ops.iter().enumerate() {
                out.clear();
                match op {
                    Op::Touch(id) => {
                        active.insert(*id);
                        s.entity_touched(id, t as u64, &mut out);
                    }
                    Op::Terminate(id) => {
                        active.remove(id);
                        s.entity_terminated(id);
                    }
                    Op::Shards(k) => {
                        shards = *k;
                        s.shards_updated(*k, &mut out);
                    }
                    Op::Limit(l) => {
                        per_region = *l;
                        s.limit_updated(*l, &mut out);
                    }
                }
                for id in &out {
                    prop_assert!(active.remove(id), "strategy {n}: passivated inactive id {id}");
                }
                let per_shard = per_region / shards;
                prop_assert!(s.len() <= per_shard, "strategy {n}: {} tracked, limit {per_shard}", s.len());
                prop_assert_eq!(s.len(), active.len(), "strategy {}: tracking matches active set", n);
            }
        }
    }
}
