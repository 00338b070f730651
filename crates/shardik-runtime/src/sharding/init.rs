//! Registering an entity kind on a node ([`Sharding::init`]): region or proxy, the kind's
//! remembered entities and leases, and the task that runs it.

use std::sync::Arc;

use shardik_core::sharding::entities::EntitySettings;
use tokio::sync::mpsc;

use super::api::{Codec, Entity, EntityKind};
use super::entity_ref::{EntityRegion, ShardIds};
use super::handle::Sharding;
use super::init_error::InitError;
use super::inner::KindEntry;
use super::kind::KindTask;
use super::pending::AnswerRoute;

use super::remember_settings::{RememberChoice, RememberSettings};
use super::{handlers, leases, local_queue, resolve};

impl Sharding {
    /// Registers an entity kind and returns its region: a full region when this node has the
    /// kind's role, a proxy that only routes otherwise.
    pub fn init<E: Entity, C: Codec>(
        &self,
        kind: EntityKind<E, C>,
    ) -> Result<EntityRegion<E>, InitError> {
        // Called from the application's task: the kind's tasks spawned here belong to the node.
        let _node_span = self.inner.span.clone().entered();
        if kind.name.is_empty() || kind.name.len() > 255 {
            return Err(InitError::InvalidName(kind.name.to_string()));
        }
        // Leases set to "auto" apply to a kind with a store of its own (durable kinds) that
        // every node shares.
        let shared_store = kind.own_store.as_ref().is_some_and(|s| s.is_shared());
        let cfg = &self.inner.config.for_kind(shared_store);
        let role = cfg.kind_role(kind.role.as_deref());
        let snapshot = self.inner.node.snapshot();
        let self_roles = snapshot
            .members
            .iter()
            .find(|m| m.addr == self.inner.self_node)
            .map(|m| m.roles.clone());
        // Before the node joined, its roles are not in the snapshot yet; the node's own
        // configured roles decide, which the caller passes via the membership config. A node
        // that lacks the role runs a proxy.
        let proxy = match (&role, self_roles) {
            (None, _) => false,
            (Some(r), Some(roles)) => !roles.contains(r),
            (Some(r), None) => !cfg.self_roles.contains(r),
        };
        let uses_leases = cfg.region.lease.is_some() || cfg.coordinator_lease.is_some();
        let remember = match &kind.remember {
            RememberChoice::On(settings) => Some(settings.clone()),
            RememberChoice::Off => None,
            RememberChoice::Configured => match (cfg.remember_entities, &kind.own_store) {
                (None, _) => None,
                (Some(recovery), Some(store)) => Some(RememberSettings {
                    store: Arc::clone(store),
                    recovery,
                }),
                // A proxy hosts no entity: it needs no store.
                (Some(_), None) if proxy => None,
                (Some(_), None) => return Err(InitError::NoRememberStore(kind.name.to_string())),
            },
        };
        let leases = match (&kind.own_store, uses_leases && !proxy) {
            (_, false) => None,
            (None, true) => return Err(InitError::NoLeaseStore(kind.name.to_string())),
            (Some(store), true) => {
                let timing = cfg.region.lease.or(cfg.coordinator_lease);
                let timing = timing.expect("one of the leases is on");
                Some(leases::KindLeases::new(
                    Arc::clone(store),
                    &cfg.cluster_name,
                    &kind.name,
                    &self.inner.self_node,
                    timing.operation_timeout,
                    timing.ttl,
                    Arc::clone(&self.inner.lease_health),
                ))
            }
        };
        let (local_tx, local_rx) = local_queue::channel(cfg.region.buffer_size.clamp(1, 1 << 20));
        let (control_tx, control_rx) = mpsc::channel(4096);
        let region = EntityRegion::<E> {
            name: kind.name.clone(),
            local: local_tx,
            control: control_tx.clone(),
            shards: ShardIds::new(cfg.number_of_shards, kind.extractor.clone()),
            replies: Arc::clone(&self.inner.replies),
            answers: Arc::new(AnswerRoute::new(
                kind.name.clone(),
                self.inner.self_node.clone(),
                Arc::downgrade(&self.inner.replies),
            )),
        };
        {
            let mut kinds = self.inner.kinds.lock().unwrap_or_else(|e| e.into_inner());
            if kinds.contains_key(&kind.name) {
                return Err(InitError::AlreadyRegistered(kind.name.to_string()));
            }
            kinds.insert(
                kind.name.clone(),
                KindEntry {
                    control: control_tx.clone(),
                    role: role.clone(),
                    region: Box::new(region.clone()),
                },
            );
        }
        // How the kind's entities live; the core's lifecycle applies the rules (a plain idle
        // timeout is a scan of last-use times, limit strategies keep their own bookkeeping,
        // remembered entities are never passivated automatically).
        let entity_settings = EntitySettings {
            passivation: kind.effective_passivation(&cfg.passivation),
            ..cfg.entity_settings(remember.is_some())
        };
        let task = KindTask {
            name: kind.name.clone(),
            me: self.inner.self_node.clone(),
            codec: Arc::clone(&kind.codec),
            settings: cfg.kind_node_settings(role, proxy),
            configured_allocation: cfg.allocation,
            entities: handlers::Entities::new(
                &entity_settings,
                Arc::clone(&kind.factory),
                kind.stop_message.clone(),
                shardik_core::Instant::ZERO,
            ),
            handlers: handlers::Handlers::new(
                self.inner.self_node.clone(),
                kind.handler_lanes.unwrap_or(cfg.handler_lanes),
            ),
            sender: self.inner.sender.clone(),
            pending: self.inner.pending.clone(),
            local: local_rx,
            control: control_rx,
            membership: self.inner.node.cluster_view(),
            allocation: kind.allocation.clone(),
            control_back: control_tx.downgrade(),
            resolver: {
                let weak: resolve::Resolver = Arc::downgrade(&self.inner) as _;
                weak
            },
            remember,
            leases,
            held_back: Arc::clone(&self.inner.held_back),
        };
        // Answers its handlers make during one poll leave together (see `pending::gathering`).
        let replies = Arc::clone(&self.inner.replies);
        let running = crate::task::spawn(super::pending::gathering(task.run(), move |answers| {
            replies.send_gathered(answers)
        }));
        let mut tasks = self
            .inner
            .kind_tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(running);
        Ok(region)
    }
}
