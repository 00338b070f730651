//! What the kind's task reports about itself: drop counters, warnings about silent regions,
//! the coordinator's events in the log, and the kind's gauges.

use super::*;
use shardik_core::sharding::coordinator::StateEvent;

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

/// The kind's metric handles, registered once: a turn of the task's loop publishes them, and
/// looking them up by name and label every turn cost more than a small turn's work.
pub(super) struct KindGauges {
    delivered: metrics::Counter,
    entities: metrics::Gauge,
    shards: metrics::Gauge,
    buffered: metrics::Gauge,
    unheard: metrics::Gauge,
}

impl KindGauges {
    pub(super) fn new(kind: &str) -> Self {
        KindGauges {
            delivered: metrics::counter!(m::SHARDING_DELIVERED_TOTAL, "kind" => kind.to_string()),
            entities: metrics::gauge!(m::SHARDING_ENTITIES, "kind" => kind.to_string()),
            shards: metrics::gauge!(m::SHARDING_SHARDS, "kind" => kind.to_string()),
            buffered: metrics::gauge!(m::SHARDING_BUFFERED, "kind" => kind.to_string()),
            unheard: metrics::gauge!(m::SHARDING_UNHEARD_REGIONS, "kind" => kind.to_string()),
        }
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

/// The hand-offs the coordinator here has in flight, told as rounds: one INFO line when the
/// first starts and one when the last ends, with counts, and each shard at DEBUG. A leaving
/// node with the default 1,000 shards used to write two INFO lines per shard.
#[derive(Default)]
pub(super) struct HandOffRounds {
    in_flight: usize,
    round: Option<HandOffRound>,
}

struct HandOffRound {
    started: TokioInstant,
    shards: usize,
    timed_out: usize,
    rebalance: bool,
    from: std::collections::BTreeSet<String>,
}

impl HandOffRounds {
    fn started(&mut self, kind: &str, from: &UniqueAddress, rebalance: bool) {
        self.in_flight += 1;
        let round = self.round.get_or_insert_with(|| {
            info!(
                %kind, from = %from.address, rebalance,
                "handing off shards of {kind} (from {}{})",
                from.address,
                if rebalance { ", rebalance" } else { "" }
            );
            HandOffRound {
                started: TokioInstant::now(),
                shards: 0,
                timed_out: 0,
                rebalance,
                from: Default::default(),
            }
        });
        round.shards += 1;
        round.rebalance |= rebalance;
        round.from.insert(from.address.to_string());
    }

    fn done(&mut self, kind: &str, ok: bool) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(round) = &mut self.round {
            round.timed_out += usize::from(!ok);
        }
        if self.in_flight > 0 {
            return;
        }
        let Some(round) = self.round.take() else {
            return;
        };
        let from = round
            .from
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        let took = round.started.elapsed();
        info!(
            %kind,
            shards = round.shards,
            timed_out = round.timed_out,
            rebalance = round.rebalance,
            "handed off {} shards of {kind} from {from} in {took:.1?} ({} timed out and stayed)",
            round.shards,
            round.timed_out
        );
    }
}

pub(super) fn log_coordinator_event(kind: &str, ev: &CoordinatorEvent, rounds: &mut HandOffRounds) {
    match ev {
        // The one line of a failover (or a leave) that says when the coordinator let go of a
        // node's shards: they get new homes as regions ask for them.
        CoordinatorEvent::State(StateEvent::RegionTerminated(region)) => info!(
            %kind,
            event = "region-gone",
            member = %region.address,
            "the region of {kind} on {} is gone: its shards get new homes as they are asked for",
            region.address
        ),
        CoordinatorEvent::State(e) => debug!(%kind, event = ?e, "coordinator state"),
        CoordinatorEvent::ConflictingClaim {
            shard,
            home,
            claimant,
        } => {
            warn!(%kind, %shard, %home, %claimant, "two regions claim one shard; keeping the first")
        }
        CoordinatorEvent::RegistrationRefused(r) => {
            debug!(%kind, region = %r, "registration refused: not a member in a registrable status")
        }
        CoordinatorEvent::StateComplete | CoordinatorEvent::RegionsUnheard(_) => {}
        CoordinatorEvent::KindNotStarted(member) => info!(
            %kind,
            member = %member.address,
            "member {} has not started entity kind {kind}: it counts as hosting none of its \
             shards, and gets some once it calls sharding().init for {kind}",
            member.address
        ),
        CoordinatorEvent::HandOffStarted {
            shard,
            from,
            rebalance,
        } => {
            debug!(%kind, %shard, from = %from.address, rebalance, "hand-off started");
            rounds.started(kind, from, *rebalance);
        }
        CoordinatorEvent::PreparingForShutdown => info!(
            %kind,
            "the cluster is preparing for a full shutdown: no shard of {kind} is rebalanced or \
             handed off any more, and the shards of a node that stops stay stopped"
        ),
        CoordinatorEvent::ShardsRetired { region, shards } => info!(
            %kind,
            region = %region.address,
            shards,
            "{shards} shards of {kind} stopped with the region on {} and get no new home \
             while the cluster prepares for a full shutdown",
            region.address
        ),
        // The line of a silent member's failover that says when its shards moved: before it
        // was downed, because the store said their leases had lapsed.
        CoordinatorEvent::ShardLeasesLapsed { region, shards } => {
            let shards = shards.len();
            metrics::counter!(crate::metrics::SHARDS_TAKEN_OVER_TOTAL).increment(shards as u64);
            info!(
                %kind,
                event = "shards-lapsed",
                member = %region.address,
                shards,
                "{shards} shards of {kind} on {}, which is silent, get new homes: the store \
                 says their leases have lapsed, so that node no longer serves them",
                region.address
            )
        }
        CoordinatorEvent::LeaseReadFailed { region, error } => warn!(
            %kind,
            member = %region.address,
            %error,
            "cannot read the shard leases of {}, which is silent: its shards move only once \
             it is downed, unless the store answers again",
            region.address
        ),
        CoordinatorEvent::HandOffDone { shard, ok } => {
            if *ok {
                debug!(%kind, %shard, "hand-off done")
            } else {
                warn!(%kind, %shard, "hand-off timed out; the shard stays where it was")
            }
            rounds.done(kind, *ok);
        }
    }
}
