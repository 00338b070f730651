//! Saying so when the seed nodes do not let this node in.
//!
//! A node whose seeds cannot be reached (a typo in an address, a firewall, a seed that runs
//! another cluster) keeps asking them for ever; nothing fails, so without a word from here the
//! user sees only asks that time out. After `seed-node-timeout` of asking, the core reports the
//! seeds it asked and how many rounds went unanswered ([`Effect::SeedsUnanswered`], which the
//! runtime logs at WARN with what the transport knows of each seed), and again after twice as
//! long each time, up to [`MAX_INTERVAL`] apart, until the node is a member. Akka repeats its
//! "Couldn't join seed nodes after N attempts" every `seed-node-timeout`; the back-off keeps a
//! node that waits all night for its seeds from filling the log.

use std::time::Duration;

use super::feature_state::UnansweredSeeds;
use super::io::Effect;
use super::{Membership, Phase};
use crate::time::Instant;

/// The longest gap between two reports.
pub(super) const MAX_INTERVAL: Duration = Duration::from_secs(300);

impl Membership {
    /// Counts one more round of asking; starts counting at the first.
    pub(super) fn count_join_attempt(&mut self, now: Instant) {
        let first_after = self.cfg.seed_node_timeout;
        let state = self
            .unanswered_seeds
            .get_or_insert_with(|| UnansweredSeeds::new(now, first_after));
        state.attempts = state.attempts.saturating_add(1);
    }

    /// Reports the seeds if it is time to (see the module docs). Called on each join tick.
    pub(super) fn report_unanswered_seeds(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let seeds = match &self.phase {
            Phase::Seeding { seeds, .. } => seeds.clone(),
            Phase::Joining { seeds, target, .. } if seeds.is_empty() => vec![target.clone()],
            Phase::Joining { seeds, .. } => seeds.clone(),
            _ => return,
        };
        let Some(state) = self.unanswered_seeds.as_mut() else {
            return;
        };
        if now < state.next_report {
            return;
        }
        out.push(Effect::SeedsUnanswered {
            seeds,
            attempts: state.attempts,
            waited: now.saturating_duration_since(state.since),
        });
        state.interval = (state.interval * 2).min(MAX_INTERVAL);
        state.next_report = now + state.interval;
    }

    /// The next report is due at (for the join timer).
    pub(super) fn next_seed_report(&self) -> Option<Instant> {
        self.unanswered_seeds.as_ref().map(|s| s.next_report)
    }
}
