//! The journal writer's counters (writes, batches), read from the run's Prometheus metrics.
//!
//! Kept apart from the parent module so that `throughput.rs` reads them without importing the
//! module that runs it.

use shardik_runtime::metrics::MetricsHandle;

/// The sum of the samples of a Prometheus counter family in `text`.
fn counter_value(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The journal writer's counters (writes, batches) so far, when the recorder is ours.
pub(super) fn journal_counters(metrics: Option<&MetricsHandle>) -> Option<(f64, f64)> {
    let text = metrics?.render();
    Some((
        counter_value(&text, shardik_runtime::metrics::JOURNAL_WRITES_TOTAL),
        counter_value(&text, shardik_runtime::metrics::JOURNAL_BATCHES_TOTAL),
    ))
}
