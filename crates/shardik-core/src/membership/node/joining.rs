//! Joining: asking seed nodes, forming a cluster, sending `Join` and answering joiners.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use super::io::{DropReason, Effect, ShutdownReason};
use super::join_compat::refusal;
use super::{Membership, Phase};
use crate::address::{Address, UniqueAddress};
use crate::membership::gossip::Gossip;
use crate::membership::member::{Member, MemberStatus};
use crate::membership::messages::{ConfigCheck, JoinConfig, Message};
use crate::time::Instant;

impl Membership {
    /// Whether this node takes joiners: a member that is not on its way out and, after a
    /// freeze, has heard from the members it heartbeats again (`freeze.rs`).
    pub(super) fn can_welcome(&self) -> bool {
        self.is_member()
            && self.answered_since_freeze()
            && !matches!(
                self.self_status(),
                Some(MemberStatus::Down | MemberStatus::Exiting) | None
            )
    }

    /// Answers a node that asks whether it may join through this one: only a member that is
    /// not on its way out says yes, with its verdict on the joiner's configuration (the
    /// joiner's `Join` is checked again, `handle_join`).
    pub(super) fn answer_init_join(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        config: &JoinConfig,
        out: &mut Vec<Effect>,
    ) {
        let me = self.self_node.clone();
        if !self.can_welcome() {
            return self.send(
                from.address.clone(),
                Message::InitJoinNack { from: me },
                out,
            );
        }
        let differences = self.cfg.join_compat.differences(&self.join_config, config);
        let check = match self.judge(from, "init-join", differences, out) {
            Some(reason) => ConfigCheck::Incompatible(reason),
            None => {
                self.remember_init_join(now, from);
                ConfigCheck::Compatible
            }
        };
        self.send(
            from.address.clone(),
            Message::InitJoinAck { from: me, check },
            out,
        );
    }

    /// A seed accepted us: join it, unless it found our configuration incompatible.
    pub(super) fn receive_init_join_ack(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        check: &ConfigCheck,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        let seeds = match &self.phase {
            Phase::Seeding { seeds, .. } => seeds.clone(),
            _ => return self.drop_input(DropReason::Unexpected, msg, out),
        };
        match check {
            ConfigCheck::Compatible => self.send_join(now, from.address.clone(), seeds, out),
            ConfigCheck::Incompatible(why) => {
                self.enter(Phase::Stopped);
                out.push(Effect::Shutdown(ShutdownReason::IncompatibleConfig(
                    refusal(from, why),
                )));
            }
        }
    }

    /// A seed cannot take us (yet).
    pub(super) fn receive_init_join_nack(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        let others = self.other_seed_count();
        let me = self.self_node.address.clone();
        let Phase::Seeding {
            form_cluster_at,
            nacks,
            ..
        } = &mut self.phase
        else {
            return self.drop_input(DropReason::Unexpected, msg, out);
        };
        // A seed that turned out to be this node under an alias answers its own `InitJoin`
        // too; only the other seeds' answers count.
        if from.address != me {
            nacks.insert(from.address.clone());
        }
        // Only the first seed may form a cluster, and only when every other seed said no.
        let form_now = form_cluster_at.is_some() && nacks.len() >= others;
        if form_now {
            self.join_self(now, out);
        }
    }

    /// The node we joined sent the cluster's state: we are a member now. A member that joined
    /// again (`not_known.rs`) merges the state instead.
    pub(super) fn receive_welcome(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        gossip: &Arc<Gossip>,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        if self.is_member() {
            return self.receive_rejoin_welcome(now, from, gossip, msg, out);
        }
        if !matches!(self.phase, Phase::Joining { .. } | Phase::Seeding { .. }) {
            return self.drop_input(DropReason::Unexpected, msg, out);
        }
        if !gossip.has_member(&self.self_node) {
            return self.drop_input(DropReason::NotInGossip, msg, out);
        }
        let from = from.clone();
        let mut g = Gossip::clone(gossip);
        g.see(&self.self_node);
        self.become_member(now);
        self.joined_through_other = from != self.self_node;
        self.set_gossip(now, g, out);
        self.send_gossip_to(&from, out);
    }

    pub(super) fn start_seeding(
        &mut self,
        now: Instant,
        seeds: Vec<Address>,
        out: &mut Vec<Effect>,
    ) {
        let me = &self.self_node.address;
        if seeds.iter().all(|s| self.identity_of(s) == me) {
            return self.join_self(now, out);
        }
        let form_cluster_at =
            (self.identity_of(&seeds[0]) == me).then(|| now + self.cfg.seed_node_timeout);
        self.enter(Phase::Seeding {
            seeds,
            started_at: now,
            form_cluster_at,
            nacks: BTreeSet::new(),
        });
        self.timers.join = Some(now);
        self.join_tick(now, out);
    }

    /// Seed process tick: resend `InitJoin` every second; the first seed forms a cluster at its
    /// deadline; a `Join` without `Welcome` is retried from the seeds.
    pub(super) fn join_tick(&mut self, now: Instant, out: &mut Vec<Effect>) {
        match self.phase.clone() {
            Phase::Seeding {
                seeds,
                form_cluster_at,
                ..
            } => {
                if form_cluster_at.is_some_and(|t| t <= now) {
                    return self.join_self(now, out);
                }
                // Each seed is asked under the address it was configured with (an alias keeps
                // being looked up, so a name that moves to another node is followed); a seed
                // known to be this node is not asked.
                let others: Vec<Address> = seeds
                    .iter()
                    .filter(|s| *self.identity_of(s) != self.self_node.address)
                    .cloned()
                    .collect();
                for s in others {
                    let msg = Message::InitJoin {
                        from: self.self_node.clone(),
                        config: self.join_config.clone(),
                    };
                    self.send(s, msg, out);
                }
                self.count_join_attempt(now);
                self.report_unanswered_seeds(now, out);
                let next = now + Duration::from_secs(1);
                self.timers.join = Some(form_cluster_at.map_or(next, |t| t.min(next)));
            }
            Phase::Joining {
                seeds,
                give_up_at,
                target,
            } => {
                if give_up_at <= now {
                    if seeds.is_empty() {
                        self.enter(Phase::Idle);
                        self.send_join(now, target, seeds, out);
                    } else {
                        self.enter(Phase::Idle);
                        self.start_seeding(now, seeds, out);
                    }
                } else {
                    self.report_unanswered_seeds(now, out);
                    let report_at = self.next_seed_report().unwrap_or(give_up_at);
                    self.timers.join = Some(give_up_at.min(report_at));
                }
            }
            _ => {}
        }
    }

    pub(super) fn send_join(
        &mut self,
        now: Instant,
        target: Address,
        seeds: Vec<Address>,
        out: &mut Vec<Effect>,
    ) {
        let give_up_at = now + self.cfg.retry_unsuccessful_join_after;
        if seeds.is_empty() {
            // A join to a given node (no seed process counts the attempts).
            self.count_join_attempt(now);
        }
        self.enter(Phase::Joining {
            target: target.clone(),
            seeds,
            give_up_at,
        });
        let report_at = self.next_seed_report().unwrap_or(give_up_at);
        self.timers.join = Some(give_up_at.min(report_at));
        let msg = self.join_message();
        self.send(target, msg, out);
    }

    /// This node's `Join`, with the configuration the member checks.
    pub(super) fn join_message(&self) -> Message {
        Message::Join {
            node: self.self_node.clone(),
            roles: self.cfg.roles.clone(),
            app_version: self.cfg.app_version.clone(),
            config: Some(Box::new(self.join_config.clone())),
        }
    }

    pub(super) fn join_self(&mut self, now: Instant, out: &mut Vec<Effect>) {
        let me = Member::joining(
            self.self_node.clone(),
            self.cfg.roles.clone(),
            self.cfg.app_version.clone(),
        );
        let mut g = Gossip::with_members([me]);
        g.version.increment(&self.self_node);
        g.see(&self.self_node);
        self.become_member(now);
        self.set_gossip(now, g, out);
    }

    pub(super) fn become_member(&mut self, now: Instant) {
        self.enter(Phase::Member);
        self.timers.join = None;
        self.unanswered_seeds = None;
        self.member_since = now;
        // Each periodic task starts at a random phase within its interval, so that nodes that
        // became members together do not all gossip at the same instant (a node that receives a
        // new state then waits on average half a round, not a whole one, to pass it on).
        let delay = self.cfg.periodic_tasks_initial_delay;
        let gossip_phase = self.random_fraction_of(self.cfg.gossip_interval / 3);
        let leader_phase = self.random_fraction_of(self.cfg.leader_actions_interval);
        let reaper_phase = self.random_fraction_of(self.cfg.unreachable_nodes_reaper_interval);
        self.timers.gossip = Some(now + delay + gossip_phase);
        self.timers.leader = Some(now + delay + leader_phase);
        self.timers.reaper = Some(now + delay + reaper_phase);
        self.timers.heartbeat = Some(now);
    }

    fn random_fraction_of(&mut self, d: Duration) -> Duration {
        d.mul_f64(self.rng.random::<f64>())
    }

    /// A node asks to become a member through this one (`msg` is its `Join`).
    pub(super) fn handle_join(&mut self, now: Instant, msg: &Message, out: &mut Vec<Effect>) {
        let Message::Join {
            node,
            roles,
            app_version,
            config,
        } = msg
        else {
            return self.drop_input(DropReason::Unexpected, msg, out);
        };
        let (node, config) = (node.clone(), config.as_deref());
        if !self.can_welcome() {
            return self.drop_input(DropReason::NotAMember, msg, out);
        }
        if self.gossip.has_member(&node) {
            // A retried join: the joiner missed the welcome.
            let welcome = Message::Welcome {
                from: self.self_node.clone(),
                gossip: Arc::clone(&self.gossip),
            };
            return self.send(node.address.clone(), welcome, out);
        }
        if self.preparing_for_shutdown {
            // Nobody new while every node is about to stop (the reference ignores such joins
            // too). Not even a new incarnation of a member: downing its old one would change
            // the state for a node that will not be let in. The joiner retries its join, and
            // gets in once the cluster has been started again.
            return self.drop_input(DropReason::PreparingForShutdown, msg, out);
        }
        if self.gossip.tombstones.contains_key(&node) {
            return self.drop_input(DropReason::JoinRefused, msg, out);
        }
        // Checked before anything changes: an incompatible joiner, a restarted member's new
        // incarnation included, must not even get its old incarnation downed.
        let differences = self.join_differences(now, &node, config);
        if let Some(reason) = self.judge(&node, "join", differences, out) {
            let reply = Message::JoinRefused {
                from: self.self_node.clone(),
                to: node.clone(),
                reason,
            };
            return self.send(node.address.clone(), reply, out);
        }
        if let Some(old) = self.member_at(&node.address) {
            // A new incarnation at the same host:port: the old one is dead for good. Down it;
            // the new one is accepted when it retries after the old one was removed.
            let mut g = Gossip::clone(&self.gossip);
            g.reachability.terminated(&self.self_node, &old);
            if g.member(&old)
                .is_some_and(|m| m.status != MemberStatus::Down)
            {
                g.mark_down(&old);
            }
            self.update_gossip(now, g, out);
            return self.drop_input(DropReason::JoinRefused, msg, out);
        }
        let mut g = Gossip::clone(&self.gossip);
        g.update_member(Member::joining(
            node.clone(),
            roles.clone(),
            app_version.clone(),
        ));
        self.update_gossip(now, g, out);
        let welcome = Message::Welcome {
            from: self.self_node.clone(),
            gossip: Arc::clone(&self.gossip),
        };
        self.send(node.address.clone(), welcome, out);
    }
}
