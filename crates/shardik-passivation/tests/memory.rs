//! Measures heap bytes per tracked entity for each policy with a counting global allocator
//! (100 000 `u64` ids, one shard). Run with `--nocapture` to see the table.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use shardik_passivation::{CompositeSettings, PassivationStrategy, ReplacementPolicy, Strategy};
use shardik_passivation::{CompositeStrategy, LimitStrategy};

struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: delegates to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::SeqCst);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::SeqCst);
        // SAFETY: ptr was allocated by System with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: usize = 100_000;

fn measure(name: &str, make: impl Fn() -> Strategy<u64>) -> f64 {
    let before = LIVE.load(Ordering::SeqCst);
    let mut s = make();
    let mut out = Vec::with_capacity(16);
    // fill to the limit, then churn so free lists and buckets reach steady state
    for id in 0..(2 * N as u64) {
        s.entity_touched(&(id % (N as u64 + N as u64 / 2)), id, &mut out);
        out.clear();
    }
    let live = LIVE.load(Ordering::SeqCst) - before;
    let per = live as f64 / s.len() as f64;
    println!(
        "{name:>28}: {per:6.1} bytes per tracked entity ({} tracked)",
        s.len()
    );
    drop(s);
    per
}

#[test]
fn bytes_per_tracked_entity() {
    let lim = |p: ReplacementPolicy| move || Strategy::Limit(LimitStrategy::new(&p, N, None));
    let rows = [
        (
            "lru",
            measure("LRU", lim(ReplacementPolicy::LeastRecentlyUsed)),
        ),
        (
            "mru",
            measure("MRU", lim(ReplacementPolicy::MostRecentlyUsed)),
        ),
        (
            "slru",
            measure(
                "SLRU",
                lim(ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![
                    0.2, 0.8,
                ])),
            ),
        ),
        (
            "lfu",
            measure(
                "LFU",
                lim(ReplacementPolicy::LeastFrequentlyUsed {
                    dynamic_aging: false,
                }),
            ),
        ),
        (
            "lfuda",
            measure(
                "LFUDA",
                lim(ReplacementPolicy::LeastFrequentlyUsed {
                    dynamic_aging: true,
                }),
            ),
        ),
        (
            "default",
            measure("W-TinyLFU (default-strategy)", || {
                Strategy::Composite(Box::new(CompositeStrategy::new(
                    &CompositeSettings::default_strategy(),
                    N,
                    None,
                )))
            }),
        ),
    ];
    for (name, per) in rows {
        // hash map bucket (16 B + ctrl) at 44-88 % load + 24-32 B node + slack; sketch for default
        assert!(per > 30.0 && per < 110.0, "{name}: {per}");
    }
}
