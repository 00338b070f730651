//! What one run of the benchmark measures ([`Plan`]), and its check.
//!
//! Kept apart from the parent module, which makes the plan from the arguments and runs it, so
//! that `recovery.rs` reads it without importing that module.

use std::time::Duration;

use anyhow::bail;

/// What one run measures (the arguments without the store and the output format).
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub(super) duration: Duration,
    pub(super) concurrency: Vec<usize>,
    pub(super) recovery_events: u64,
    pub(super) snapshot_every: u64,
    pub(super) recovery_runs: usize,
}

impl Plan {
    pub(super) fn check(&self) -> anyhow::Result<()> {
        if self.duration.is_zero() {
            bail!("--duration must be positive");
        }
        if self.concurrency.is_empty() || self.concurrency.contains(&0) {
            bail!("--concurrency takes positive numbers, e.g. 1,16,256");
        }
        if self.recovery_events == 0 || self.snapshot_every == 0 || self.recovery_runs == 0 {
            bail!("--recovery-events, --snapshot-every and --recovery-runs must be positive");
        }
        if self.snapshot_every > u64::from(u32::MAX) {
            bail!("--snapshot-every is at most {}", u32::MAX);
        }
        Ok(())
    }
}
