//! The coordinator's events in the log ([`log_coordinator_event`]), with the hand-offs of one
//! round summed into one line at its start and one at its end ([`HandOffRounds`]).

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::CoordinatorEvent;
use shardik_core::sharding::coordinator::StateEvent;
use tokio::time::Instant as TokioInstant;
use tracing::{debug, info, warn};

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
