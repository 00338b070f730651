//! Keeping every node slot's sharding layer in step with its membership core: a new
//! incarnation gets a fresh layer, a node that crashed or shut down loses its layer (its
//! entities, shards and messages) at that instant, the view the core gives when its state
//! changed reaches the kinds, and an Exiting node's exit is confirmed once its regions stopped.

use std::sync::Arc;

use super::{ShardingWorld, Slot};
use crate::sharding::node::ShardNode;
use crate::world::NodeId;

impl ShardingWorld {
    /// Brings every slot's layer in line with its membership core, and confirms the exit of
    /// Exiting nodes whose regions have all stopped (their exit tasks are done).
    pub(super) fn sync(&mut self) {
        loop {
            self.sync_layers();
            let done: Vec<NodeId> = self
                .world
                .awaiting_exit()
                .filter(|&id| {
                    self.slots
                        .get(id)
                        .and_then(|s| s.layer.as_ref())
                        .is_none_or(ShardNode::all_regions_stopped)
                })
                .collect();
            if done.is_empty() {
                return;
            }
            for id in done {
                self.note(Some(id), "exit tasks done: confirming Exiting".to_string());
                self.world.confirm_exit(id);
            }
        }
    }

    fn sync_layers(&mut self) {
        let now = self.now();
        for id in 0..self.world.len() {
            if id == self.slots.len() {
                self.slots.push(Slot::default());
                self.timer_of.push(None);
            }
            let uid = self.world.core(id).self_node().clone();
            let alive = self.world.is_alive(id);
            if self.slots[id].uid.as_ref() != Some(&uid) {
                if self.slots[id].layer.is_some() {
                    self.kill(id, "replaced by a new incarnation");
                }
                let roles = self.world.core(id).config().roles.clone();
                self.by_node.insert(uid.clone(), id);
                let slot = &mut self.slots[id];
                slot.uid = Some(uid.clone());
                let store = self.store.as_ref().map(|s| s.store.clone());
                let (remembered, incarnations) =
                    (self.remembered.clone(), Arc::clone(&self.incarnations));
                slot.layer = alive.then(|| {
                    ShardNode::new(uid, &roles, &self.cfg, store, remembered, incarnations, now)
                });
                self.reschedule(id);
                // The application on the new incarnation starts its producer again.
                self.start_producer(id);
            } else if !alive && self.slots[id].layer.is_some() {
                let why = match self.world.shutdown_reason(id) {
                    Some(r) => format!("shut down ({r:?})"),
                    None => "crashed".to_string(),
                };
                self.kill(id, &why);
                continue;
            }
            let Some(layer) = self.slots[id].layer.as_mut() else {
                continue;
            };
            // The same view the runtime's kinds act on, taken when the state changed.
            let Some(view) = self.world.take_view(id) else {
                continue;
            };
            let mut out = std::mem::take(&mut self.scratch);
            layer.membership_changed(now, &view.members, &view.unreachable, &mut out);
            self.dispatch(id, &mut out);
            self.scratch = out;
        }
    }

    fn kill(&mut self, id: NodeId, why: &str) {
        let Some(mut layer) = self.slots[id].layer.take() else {
            return;
        };
        // The producer dies with its node: what it held that its queue has is sent by its
        // next incarnation.
        self.slots[id].producer = None;
        self.note(Some(id), format!("sharding layer gone: {why}"));
        let mut out = std::mem::take(&mut self.scratch);
        layer.kill(&mut out);
        self.dispatch_as(id, layer.me().clone(), &mut out);
        self.scratch = out;
        for p in self.net.take_held(id) {
            self.lose(&p);
        }
        self.unschedule(id);
    }
}
