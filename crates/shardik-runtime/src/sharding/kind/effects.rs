//! Carrying out what the core asks: the kind node's effects (protocol sends, forwards,
//! deliveries, shard starts and stops, leases, strategy questions) and the entity lifecycle's
//! outputs (replies, empty shards, failures, the remember store's writes).

use super::*;

impl<E: Entity, C: Codec> KindTask<E, C> {
    pub(super) fn apply_effects(
        &mut self,
        st: &mut State<E>,
        effects: &mut Vec<KindEffect<Payload<E>>>,
    ) {
        for e in effects.drain(..) {
            match e {
                KindEffect::Send { to, msg } => self.send_protocol(st, to, msg),
                KindEffect::Forward { to, env } => self.forward(st, &to, env),
                KindEffect::Deliver(env) => self.deliver(st, env),
                KindEffect::ShardStarted(shard) => {
                    debug!(kind = %self.name, %shard, "shard started here");
                    if let Some(remember) = &self.remember {
                        self.entities.load_started(&shard);
                        crate::task::spawn(remember::load_and_start(
                            self.name.clone(),
                            shard,
                            remember.clone(),
                            self.settings.region.retry_interval,
                            self.control_back.clone(),
                        ));
                    }
                }
                KindEffect::StopEntities(shard) => {
                    let now = self.now(st);
                    let mut out = std::mem::take(&mut st.host_out);
                    self.entities
                        .stop_shard(now, &shard, &mut self.handlers, &mut out);
                    st.host_out = out;
                    self.apply_host_outputs(st);
                }
                KindEffect::ForceStopEntities(shard) => {
                    let now = self.now(st);
                    let mut out = std::mem::take(&mut st.host_out);
                    self.entities
                        .force_stop_shard(now, &shard, &mut self.handlers, &mut out);
                    self.handlers.withdraw_shard(&shard, &mut out);
                    st.host_out = out;
                    self.apply_host_outputs(st);
                }
                KindEffect::ShardStopped(shard) => {
                    debug!(kind = %self.name, %shard, "shard stopped here");
                    if let Some(leases) = &self.leases {
                        self.handlers.clear_fence(&shard);
                        let name = leases.name(&LeaseKey::Shard(shard));
                        leases.health().recovered(&name);
                    }
                }
                KindEffect::Lease(request) => {
                    if let Some(leases) = &mut self.leases {
                        leases.call(request, self.control_back.clone());
                    }
                }
                KindEffect::ReadShardLeases { id, shards } => {
                    if let Some(leases) = &self.leases {
                        leases.read(id, shards, self.control_back.clone());
                    }
                }
                KindEffect::ShardLeased { shard, token } => {
                    if let Some(leases) = &self.leases {
                        let fence = leases.fence(&shard, token);
                        leases.health().recovered(&fence.scope);
                        debug!(kind = %self.name, %shard, token, "shard lease acquired");
                        self.handlers.set_fence(shard, fence);
                    }
                }
                KindEffect::ShardLeaseLost { shard, reason } => {
                    self.handlers.clear_fence(&shard);
                    metrics::counter!(m::LEASE_LOSSES_TOTAL, "reason" => reason.as_str())
                        .increment(1);
                    warn!(kind = %self.name, %shard, reason = reason.as_str(), "shard lease lost: its entities were stopped");
                }
                KindEffect::Fenced(true) => {
                    metrics::counter!(m::SELF_FENCES_TOTAL).increment(1);
                    warn!(kind = %self.name, "no majority seen for the resolver's decision time: this node stopped its shards and coordinator until it sees one again (self-fence)");
                }
                KindEffect::Fenced(false) => {
                    info!(kind = %self.name, "a majority is back: shards run here again")
                }
                KindEffect::CoordinatorLeaseLost(reason) => {
                    metrics::counter!(m::LEASE_LOSSES_TOTAL, "reason" => reason.as_str())
                        .increment(1);
                    warn!(kind = %self.name, reason = reason.as_str(), "coordinator lease lost: the coordinator stopped");
                }
                KindEffect::LeaseUnavailable { key, error } => {
                    warn!(kind = %self.name, lease = ?key, %error, "lease store failing");
                    if let Some(leases) = &self.leases {
                        leases.health().failed(leases.name(&key), error);
                    }
                }
                KindEffect::LeaseRecovered(key) => {
                    info!(kind = %self.name, lease = ?key, "lease no longer failing (its store answers again, or it is no longer wanted)");
                    if let Some(leases) = &self.leases {
                        leases.health().recovered(&leases.name(&key));
                    }
                }
                KindEffect::Dropped { env, reason } => self.dropped(st, env, reason),
                KindEffect::CoordinatorRunning(true) => {
                    info!(kind = %self.name, "this node now runs the coordinator");
                    if let Some(leases) = &self.leases {
                        leases
                            .health()
                            .recovered(&leases.name(&LeaseKey::Coordinator));
                    }
                }
                KindEffect::CoordinatorRunning(false) => {
                    info!(kind = %self.name, "this node no longer runs the coordinator");
                    // Hand-offs it started are no longer its to report.
                    st.handoffs = HandOffRounds::default();
                    self.allocation_proceeds(st);
                }
                KindEffect::Coordinator(CoordinatorEvent::RegionsUnheard(silent)) => {
                    self.warn_unheard(st, &silent)
                }
                KindEffect::Coordinator(CoordinatorEvent::StateComplete) => {
                    info!(kind = %self.name, "coordinator heard from every region: allocating");
                    self.allocation_proceeds(st);
                }
                KindEffect::Coordinator(ev) => {
                    log_coordinator_event(&self.name, &ev, &mut st.handoffs)
                }
                KindEffect::CoordinatorNodeLacksKind(node) => {
                    if st.coordinator_lacks_kind_log.check().is_some() {
                        warn!(
                            kind = %self.name,
                            coordinator_node = %node.address,
                            "the oldest member, {}, which must run the coordinator of entity kind \
                             {}, has not started that kind: no shard of it can be allocated \
                             until that node calls sharding().init for {} or leaves the cluster",
                            node.address, self.name, self.name
                        );
                    }
                }
                KindEffect::AllocationAsked {
                    requester,
                    shard,
                    snapshot,
                } => {
                    if let Some(strategy) = self.allocation.deferred() {
                        answer_allocation(
                            strategy,
                            self.control_back.clone(),
                            requester,
                            shard,
                            snapshot,
                        );
                    }
                }
                KindEffect::RebalanceAsked {
                    snapshot,
                    in_progress,
                } => {
                    if let Some(strategy) = self.allocation.deferred() {
                        answer_rebalance(
                            strategy,
                            self.control_back.clone(),
                            snapshot,
                            in_progress,
                        );
                    }
                }
                KindEffect::RegionStopped => {
                    info!(kind = %self.name, "region stopped");
                    st.shutdown_done = true;
                    for w in st.shutdown_waiters.drain(..) {
                        let _ = w.send(());
                    }
                }
            }
        }
    }

    pub(super) fn apply_host_outputs(&mut self, st: &mut State<E>) {
        if st.host_out.is_empty() {
            return;
        }
        let mut outputs = std::mem::take(&mut st.host_out);
        for o in outputs.drain(..) {
            match o {
                HostOutput::Reply(to, result) => self.reply(st, to, result),
                HostOutput::ShardEmpty(shard) => {
                    self.input(st, KindInput::EntitiesStopped(shard));
                }
                // The lifecycle's own record of incarnations; the gauge counts them.
                HostOutput::Started { .. } | HostOutput::Stopped { .. } => {}
                HostOutput::Failed { shard, id, why } => {
                    tracing::error!(kind = %self.name, entity = %id, %shard, %why, "entity failed; this incarnation is dropped");
                    metrics::counter!(m::ENTITY_FAILURES_TOTAL).increment(1);
                }
                HostOutput::Forget { shard, id } => {
                    if let Some(writer) = self.handlers.remember_writer() {
                        writer.stopped(&shard, &id);
                    }
                }
                HostOutput::Restarted { shard, id } => {
                    info!(kind = %self.name, entity = %id, %shard, "failed remembered entity started again after entity-restart-backoff");
                }
                HostOutput::Refused { id, reply, why } => {
                    self.count_drop("wrong-shard");
                    warn!(kind = %self.name, entity = %id, %why, "command refused");
                    self.reply(st, reply, Err(why));
                }
            }
        }
        // Kept for the next completion: handing out a fresh vector each time cost an
        // allocation and a free per command.
        if st.host_out.is_empty() {
            st.host_out = outputs;
        }
    }
}
