//! A coordinator among `R` regions that answer at once: the coordinator core of
//! `shardik-core`, driven by hand with no network, so that what is timed is the coordinator's
//! own work.
//!
//! The regions are perfect: a `HostShard` is acknowledged (`ShardStarted`), a `BeginHandOff`
//! acknowledged, a `HandOff` answered `ShardStopped`, each at once and in the order sent, as
//! regions on a fast network would. Every member is Up and reachable, so nothing holds a
//! rebalance back.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use shardik_core::Instant;
use shardik_core::membership::{Address, Member, MemberStatus, UniqueAddress};
use shardik_core::sharding::{
    AllocationSettings, Coordinator, CoordinatorEffect, CoordinatorEvent, CoordinatorSettings,
    Protocol, ShardAllocationStrategy, ShardId, ShardingView,
};

/// The strategy a configuration picks (`AllocationSettings::strategy`).
pub type Strategy = Box<dyn ShardAllocationStrategy<UniqueAddress> + Send>;

/// Region `i`'s node (`i` from 0; the coordinator runs on region 0's node).
pub fn region(i: usize) -> UniqueAddress {
    let port = u16::try_from(i % 60_000 + 1).expect("below 60 001");
    let host = format!("region-{}", i / 60_000);
    UniqueAddress::new(Address::new(host, port), i as u64 + 1)
}

/// The shard named `n`, in the decimal form `shard_id_for` gives.
pub fn shard(n: usize) -> ShardId {
    n.to_string().into()
}

/// One coordinator, its view of `R` Up members, and the time it is at.
pub struct Cluster {
    pub coordinator: Coordinator<Strategy>,
    pub view: ShardingView,
    pub regions: Vec<UniqueAddress>,
    pub now: Instant,
    pub rebalance_interval: Duration,
    out: Vec<CoordinatorEffect>,
}

/// What one call to the coordinator (and the regions' answers to it) did.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Messages the coordinator sent.
    pub sent: usize,
    /// Hand-offs it started.
    pub handoffs_started: usize,
    /// Hand-offs it finished (successfully).
    pub handoffs_done: usize,
    /// `HostShard` messages (shards allocated, or re-sent).
    pub hosts: usize,
}

impl Cluster {
    /// A coordinator on region 0's node, with `settings` choosing the strategy, in a view of
    /// `regions` Up members (none registered yet).
    pub fn new(regions: usize, settings: AllocationSettings) -> Self {
        assert!(regions > 0, "at least one region");
        let nodes: Vec<UniqueAddress> = (0..regions).map(region).collect();
        let members = nodes.iter().enumerate().map(|(i, n)| {
            let mut m = Member::joining(n.clone(), BTreeSet::new(), "1.0.0");
            m.status = MemberStatus::Up;
            m.up_number = i as u32 + 1;
            m
        });
        let mut view = ShardingView::new(nodes[0].clone(), None, Duration::from_secs(10));
        view.update(Instant::ZERO, members, BTreeSet::new());
        let coordinator_settings = CoordinatorSettings::default();
        let rebalance_interval = coordinator_settings.rebalance_interval;
        let coordinator = Coordinator::new(
            nodes[0].clone(),
            coordinator_settings,
            settings.strategy(),
            Instant::ZERO,
        );
        Cluster {
            coordinator,
            view,
            regions: nodes,
            now: Instant::ZERO,
            rebalance_interval,
            out: Vec::new(),
        }
    }

    /// Hands the coordinator one message from `from`, without answering what it sends.
    pub fn deliver(&mut self, from: &UniqueAddress, msg: Protocol) {
        self.coordinator
            .handle(self.now, from, msg, &self.view, &mut self.out);
    }

    /// Runs the coordinator's timers at `self.now`, without answering what it sends.
    pub fn tick(&mut self) {
        self.coordinator
            .handle_timeout(self.now, &self.view, &mut self.out);
    }

    /// Lets the regions answer everything the coordinator sent, and the coordinator what they
    /// answer, until it sends nothing that needs an answer. Returns what was sent meanwhile
    /// (including what was pending before the call).
    pub fn answer_all(&mut self) -> Counts {
        let mut counts = Counts::default();
        let mut answers: VecDeque<(UniqueAddress, Protocol)> = VecDeque::new();
        loop {
            for effect in self.out.drain(..) {
                match effect {
                    CoordinatorEffect::Send { to, msg } => {
                        counts.sent += 1;
                        if let Some(answer) = answer(msg, &mut counts) {
                            answers.push_back((to, answer));
                        }
                    }
                    CoordinatorEffect::Event(CoordinatorEvent::HandOffStarted { .. }) => {
                        counts.handoffs_started += 1
                    }
                    CoordinatorEffect::Event(CoordinatorEvent::HandOffDone {
                        ok: true, ..
                    }) => counts.handoffs_done += 1,
                    CoordinatorEffect::Event(_) => {}
                    // The bench runs without leases: the coordinator reads none.
                    CoordinatorEffect::ReadLeases { .. } => {}
                }
            }
            let Some((from, msg)) = answers.pop_front() else {
                return counts;
            };
            self.deliver(&from, msg);
        }
    }

    /// Forgets what the coordinator sent (and frees the buffer that held it).
    pub fn discard_effects(&mut self) {
        self.out = Vec::new();
    }

    /// Registers every region, region `i` hosting the shards `placement(i)` names. Its
    /// answers (`RegisterAck`, `ShardHomes`) are discarded.
    pub fn register_all(&mut self, mut placement: impl FnMut(usize) -> Vec<ShardId>) {
        for i in 0..self.regions.len() {
            let hosted = placement(i);
            let from = self.regions[i].clone();
            self.deliver(
                &from,
                Protocol::Register {
                    hosted,
                    proxy: false,
                },
            );
            self.out.clear();
        }
    }

    /// Moves the clock to the next rebalance round.
    pub fn advance_to_next_round(&mut self) {
        self.now += self.rebalance_interval;
    }

    /// Shards with a home.
    pub fn allocated(&self) -> usize {
        self.coordinator.state().shards().len()
    }

    /// The fullest region other than the coordinator's own (region 0), and its shard count.
    pub fn fullest_region_but_the_coordinators(&self) -> (usize, usize) {
        let regions = self.coordinator.state().regions();
        (1..self.regions.len())
            .map(|i| (regions.get(&self.regions[i]).map_or(0, Vec::len), i))
            .max()
            .map(|(n, i)| (i, n))
            .expect("at least two regions")
    }

    /// Most minus fewest shards over all regions.
    pub fn spread(&self) -> usize {
        let regions = self.coordinator.state().regions();
        let counts = self
            .regions
            .iter()
            .map(|r| regions.get(r).map_or(0, Vec::len));
        let (min, max) = counts.fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
        max.saturating_sub(min)
    }
}

/// What a perfect region answers to `msg`, counting what the coordinator did.
fn answer(msg: Protocol, counts: &mut Counts) -> Option<Protocol> {
    match msg {
        Protocol::HostShard { shard, .. } => {
            counts.hosts += 1;
            Some(Protocol::ShardStarted { shard })
        }
        Protocol::BeginHandOff { shard } => Some(Protocol::BeginHandOffAck {
            shard,
            drained: false,
        }),
        Protocol::HandOff { shard, .. } => Some(Protocol::ShardStopped {
            shard,
            forwarding: false,
        }),
        _ => None,
    }
}
