//! What the kind's task reports about itself: drop counters, warnings about silent regions,
//! the coordinator's events in the log, and the kind's gauges.

use super::*;

impl<E: Entity, C: Codec> KindTask<E, C> {
    pub(super) fn count_drop(&self, reason: &'static str) {
        metrics::counter!(m::SHARDING_DROPPED_TOTAL, "kind" => self.name.to_string(), "reason" => reason)
            .increment(1);
    }

    /// The coordinator here has waited too long for `silent` members: a warning (the core
    /// spaces these out with a doubling interval), the gauge and `/ready`'s list.
    pub(super) fn warn_unheard(&self, st: &mut State<E>, silent: &[(UniqueAddress, Duration)]) {
        let members: Vec<String> = silent
            .iter()
            .map(|(m, waited)| {
                format!(
                    "{} (for {})",
                    m.address,
                    humantime::format_duration(round_secs(*waited))
                )
            })
            .collect();
        warn!(
            kind = %self.name,
            members = %members.join(", "),
            "the coordinator of entity kind {} allocates no new shard until these members' \
             regions register or their nodes say they never started the kind: {}. A member \
             whose application never calls sharding().init for {} and runs an older shardik \
             cannot say so; start the kind there, or remove the member. Shards already placed \
             keep working",
            self.name,
            members.join(", "),
            self.name
        );
        st.gauges.unheard.set(silent.len() as f64);
        self.held_back.set(&self.name, silent);
    }

    /// Allocation no longer waits here (the state is complete, or the coordinator left).
    pub(super) fn allocation_proceeds(&self, st: &mut State<E>) {
        st.gauges.unheard.set(0.0);
        if self.held_back.clear(&self.name) {
            info!(kind = %self.name, "the coordinator no longer waits for silent members");
        }
    }

    pub(super) fn publish_gauges(&self, st: &mut State<E>) {
        let g = &st.gauges;
        if st.delivered > 0 {
            g.delivered.increment(std::mem::take(&mut st.delivered));
        }
        g.entities.set(self.entities.active_entities() as f64);
        g.shards
            .set(exact_len(st.node.region().hosted_shards()) as f64);
        g.buffered.set(st.node.region().buffered() as f64);
    }
}

/// How many items `it` yields: O(1) when it knows exactly (the keys of a map), else counted.
/// Gauges are published every turn of the loop, so walking every hosted shard for them is
/// a cost per message when messages come one at a time.
pub(super) fn exact_len(it: impl Iterator) -> usize {
    match it.size_hint() {
        (lo, Some(hi)) if lo == hi => lo,
        _ => it.count(),
    }
}

/// `d` to whole seconds, for log lines.
pub(super) fn round_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}
