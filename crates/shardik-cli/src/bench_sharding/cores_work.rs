//! The work both `cores` measurements share, local and `--remote`: the CPU a command burns in
//! its handler, and the rate a counter grows once the warm-up is over. Apart from either, so
//! that `cores` (which runs `--remote` through `cores_remote`) and `cores_remote` both import
//! it and neither imports the other back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Time the queues fill and the workers settle before anything is counted.
const WARM_UP: Duration = Duration::from_secs(1);

/// Burns `work` of CPU on this thread.
pub(super) fn burn(work: Duration) {
    let start = Instant::now();
    while start.elapsed() < work {
        std::hint::spin_loop();
    }
}

/// After the warm-up, how fast `counter` grows over `window`, per second.
pub(super) async fn count_over(counter: &AtomicU64, window: Duration) -> f64 {
    tokio::time::sleep(WARM_UP).await;
    let (from, start) = (counter.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(window).await;
    let (to, elapsed) = (counter.load(Ordering::Relaxed), start.elapsed());
    (to - from) as f64 / elapsed.as_secs_f64()
}
