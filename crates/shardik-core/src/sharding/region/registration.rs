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
        let ours = self.registration.coordinator.as_ref() == Some(from)
            || view.coordinator_node() == Some(from);
        if ours {
            self.registration.coordinator = None;
            self.registration.expected = Some(from.clone());
            self.registration.backoff =
                (self.settings.retry_interval / 8).max(Duration::from_millis(100));
            self.registration.next_attempt = Some(now);
            self.maybe_register(now, view, out);
        }
    }

    pub(super) fn registered(
        &mut self,
        coordinator: UniqueAddress,
        out: &mut Vec<RegionEffect<M>>,
    ) {
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
        let hosted: Vec<ShardId> = if self.proxy {
            Vec::new()
        } else {
            self.hosted.keys().cloned().collect()
        };
        for to in view.registration_targets() {
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
