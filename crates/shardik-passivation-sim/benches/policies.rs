//! Nanoseconds per access for each policy at a limit of 100 000 (one shard) on a zipfian stream
//! (YCSB zipfian, constant 0.99, over 1 000 000 ids).
//!
//! `cargo bench -p shardik-passivation-sim --bench policies -- --quick`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use shardik_passivation::{
    CompositeSettings, CompositeStrategy, HillClimbingSettings, LimitStrategy, PassivationStrategy,
    ReplacementPolicy, Strategy,
};
use shardik_passivation_sim::{Synthetic, synthetic_ids};

const LIMIT: usize = 100_000;

fn stream() -> Vec<u64> {
    let g = Synthetic::Zipfian {
        min: 1,
        max: 1_000_000,
        constant: 0.99,
        scrambled: true,
    };
    synthetic_ids(&g, 2_000_000, 42)
        .expect("valid generator")
        .map(|id| id.id)
        .collect()
}

type Make = Box<dyn Fn() -> Strategy<u64>>;

fn policies() -> Vec<(&'static str, Make)> {
    let lim = |p: ReplacementPolicy| -> Make {
        Box::new(move || Strategy::Limit(LimitStrategy::new(&p, LIMIT, None)))
    };
    let comp = |hc: bool| -> Make {
        Box::new(move || {
            let settings = CompositeSettings {
                optimizer: hc.then(HillClimbingSettings::default),
                ..CompositeSettings::default_strategy()
            };
            Strategy::Composite(Box::new(CompositeStrategy::new(&settings, LIMIT, None)))
        })
    };
    vec![
        ("lru", lim(ReplacementPolicy::LeastRecentlyUsed)),
        (
            "slru",
            lim(ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![
                0.2, 0.8,
            ])),
        ),
        (
            "s4lru",
            lim(ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.25; 4])),
        ),
        ("mru", lim(ReplacementPolicy::MostRecentlyUsed)),
        (
            "lfu",
            lim(ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: false,
            }),
        ),
        (
            "lfuda",
            lim(ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: true,
            }),
        ),
        ("lru-fs-slru", comp(false)),
        ("lru-fs-slru-hc (default)", comp(true)),
    ]
}

fn bench(c: &mut Criterion) {
    let ids = stream();
    let mut group = c.benchmark_group("access");
    for (name, make) in policies() {
        let mut s = make();
        let mut out = Vec::with_capacity(16);
        // warm up to steady state (full shard)
        for (t, id) in ids.iter().enumerate() {
            s.entity_touched(id, t as u64, &mut out);
            out.clear();
        }
        let mut pos = 0usize;
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    let id = &ids[pos];
                    pos = if pos + 1 == ids.len() { 0 } else { pos + 1 };
                    s.entity_touched(black_box(id), pos as u64, &mut out);
                    out.clear();
                }
                start.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = bench
}
criterion_main!(benches);
