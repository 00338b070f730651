//! Registration with the coordinator: registering (with backoff up to the retry interval),
//! being acknowledged, and registering again when the coordinator restarts.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Region, RegionEffect};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// A coordinator (re)started on the node we are registered with, or should be: it has none
    /// of the earlier registrations, so register again at once.
    pub(super) fn coordinator_started(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let ours =
            self.registration.coordinator.as_ref() == Some(from) || view.may_run_coordinator(from);
        if ours {
            self.forget_coordinator(out);
            self.registration.expected = Some(from.clone());
            self.registration.backoff =
                (self.settings.retry_interval / 8).max(Duration::from_millis(100));
            self.registration.next_attempt = Some(now);
            self.maybe_register(now, view, out);
        }
    }

    /// The homes cached on members the view says are silent, per member, in order.
    fn homes_on_silent_members(&self, view: &ShardingView) -> Vec<(UniqueAddress, Vec<ShardId>)> {
        let mut by_home: std::collections::BTreeMap<&UniqueAddress, Vec<ShardId>> =
            Default::default();
        for (shard, home) in self.homes.iter() {
            if view.is_silent(home) {
                by_home.entry(home).or_default().push(shard.clone());
            }
        }
        by_home
            .into_iter()
            .map(|(home, mut shards)| {
                shards.sort();
                (home.clone(), shards)
            })
            .collect()
    }

    /// Forgets the coordinator this region registered with, if any. One that stood in for a
    /// silent coordinator node may have placed shards here that the silent node, heard again,
    /// has elsewhere: those whose lease this region never held are given up
    /// ([`give_up_shards_never_held`](Self::give_up_shards_never_held)). Not after any other
    /// coordinator: in a graceful hand-over (a rolling update) the next coordinator learns
    /// this region's shards from its registration, and giving up one still waiting for its
    /// lease would drop what was sent to it.
    pub(super) fn forget_coordinator(&mut self, out: &mut Vec<RegionEffect<M>>) {
        let with_stand_in = std::mem::take(&mut self.registration.with_stand_in);
        if self.registration.coordinator.take().is_some() && with_stand_in {
            self.give_up_shards_never_held(out);
        }
    }

    pub(super) fn registered(
        &mut self,
        coordinator: UniqueAddress,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        self.registration.with_stand_in = view.stand_in() == Some(&coordinator);
        self.registration.coordinator = Some(coordinator.clone());
        self.registration.next_attempt = None;
        self.registration.backoff =
            (self.settings.retry_interval / 8).max(Duration::from_millis(100));
        // Wanted homes (remembered entities) are asked for now too, as buffered ones are:
        // after a restart of the whole cluster they are all there is to ask for, and leaving
        // them to the retry tick delayed every remembered entity by up to `retry_interval`.
        let waiting: Vec<ShardId> = self
            .buffers
            .keys()
            .filter(|s| !self.hosted.contains_key(s))
            .chain(self.handover_pending.iter())
            .chain(self.wanted.iter())
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for shard in waiting {
            self.request_home(shard, out);
        }
        if self.graceful && !self.stopping_in_place {
            out.push(RegionEffect::Send {
                to: coordinator,
                msg: Protocol::GracefulShutdownReq,
            });
        }
    }

    pub(super) fn maybe_register(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.registration.coordinator.is_some() {
            return;
        }
        let Some(at) = self.registration.next_attempt else {
            return;
        };
        if at > now {
            return;
        }
        self.give_up_lapsed_shards(now, out);
        let hosted: Vec<ShardId> = if self.proxy {
            Vec::new()
        } else {
            self.hosted.keys().cloned().collect()
        };
        let targets = view.registration_targets();
        // Before the registration: a coordinator that rebuilt its table without a silent
        // member (standing in for it, or restarted) learns where that member's shards are.
        let silent = self.homes_on_silent_members(view);
        if !silent.is_empty() {
            for to in &targets {
                out.push(RegionEffect::Send {
                    to: to.clone(),
                    msg: Protocol::SilentHomes {
                        homes: silent.clone(),
                    },
                });
            }
        }
        for to in targets {
            out.push(RegionEffect::Send {
                to,
                msg: Protocol::Register {
                    hosted: hosted.clone(),
                    proxy: self.proxy,
                },
            });
        }
        // Exponential backoff up to the retry interval, then only the retry tick registers.
        if self.registration.backoff < self.settings.retry_interval {
            self.registration.next_attempt = Some(now + self.registration.backoff);
            self.registration.backoff *= 2;
        } else {
            self.registration.next_attempt = None;
        }
    }
}
