//! Join compatibility on the accepting member (see `membership/compat.rs`): judging a
//! joiner's configuration, remembering the `InitJoin`s found compatible (for `Join`s of the
//! previous version, which carry none), and a joiner's stop when refused.

use super::io::{DropReason, Effect, ShutdownReason};
use super::{Membership, Phase};
use crate::address::UniqueAddress;
use crate::membership::messages::{JoinConfig, Message};
use crate::time::Instant;

/// How many incarnations whose `InitJoin` was found compatible a member remembers (see
/// `remember_init_join`).
const INIT_JOIN_CHECKED_MAX: usize = 256;

/// The difference reported for a `Join` without configuration from an incarnation that did
/// not ask through `InitJoin` here first.
const NO_CONFIG_IN_JOIN: &str = "the joiner sent no configuration with its `Join` (a node of \
     a version before joins were checked on every path; it may join through seed nodes, whose \
     `InitJoin` carries its configuration)";

/// The reason a refused joiner stops with: who refused, and the differences.
pub(super) fn refusal(from: &UniqueAddress, differences: &str) -> String {
    format!(
        "the member at {} refused this node's configuration: {differences}",
        from.address
    )
}

impl Membership {
    /// Reports a joiner's differences, if any, and says whether they refuse it: `Some(reason)`
    /// with `enforce-on-join` on, `None` when it may join (no difference, or enforcement off).
    pub(super) fn judge(
        &mut self,
        joiner: &UniqueAddress,
        via: &'static str,
        differences: Vec<String>,
        out: &mut Vec<Effect>,
    ) -> Option<String> {
        if differences.is_empty() {
            return None;
        }
        let refused = self.cfg.join_compat.enforce_on_join;
        let reason = differences.join("; ");
        out.push(Effect::JoinIncompatible {
            joiner: joiner.clone(),
            via,
            differences,
            refused,
        });
        refused.then_some(reason)
    }

    /// Notes that `node`'s `InitJoin` was found compatible now, so that its `Join` is
    /// welcomed even without a configuration (a node of the version before `Join` carried
    /// one always asks through `InitJoin` first when it joins through seeds). Entries older
    /// than `retry-unsuccessful-join-after` are forgotten (such a joiner asks again), and at
    /// most [`INIT_JOIN_CHECKED_MAX`] are kept, the oldest going first, so that strangers'
    /// `InitJoin`s cannot grow it.
    pub(super) fn remember_init_join(&mut self, now: Instant, node: &UniqueAddress) {
        let horizon = self.cfg.retry_unsuccessful_join_after;
        self.init_join_checked
            .retain(|_, at| now.saturating_duration_since(*at) <= horizon);
        if self.init_join_checked.len() >= INIT_JOIN_CHECKED_MAX
            && !self.init_join_checked.contains_key(node)
            && let Some(oldest) = self
                .init_join_checked
                .iter()
                .min_by_key(|(n, at)| (**at, (*n).clone()))
                .map(|(n, _)| n.clone())
        {
            self.init_join_checked.remove(&oldest);
        }
        self.init_join_checked.insert(node.clone(), now);
    }

    /// The differences that keep `node`, whose `Join` carried `config`, out: its
    /// configuration's against this member's; without one (a node of the version before
    /// `Join` carried it), none if its `InitJoin` was found compatible here lately, and
    /// otherwise that it sent none.
    pub(super) fn join_differences(
        &self,
        now: Instant,
        node: &UniqueAddress,
        config: Option<&JoinConfig>,
    ) -> Vec<String> {
        match config {
            Some(config) => self.cfg.join_compat.differences(&self.join_config, config),
            None => {
                let horizon = self.cfg.retry_unsuccessful_join_after;
                let asked_lately = self
                    .init_join_checked
                    .get(node)
                    .is_some_and(|at| now.saturating_duration_since(*at) <= horizon);
                if asked_lately {
                    Vec::new()
                } else {
                    vec![NO_CONFIG_IN_JOIN.to_string()]
                }
            }
        }
    }

    /// The member this node asked to join refused its configuration: stop. Only the node
    /// this one sent its `Join` to may say so (`senders.rs`), and only to this incarnation.
    pub(super) fn receive_join_refused(
        &mut self,
        from: &UniqueAddress,
        to: &UniqueAddress,
        reason: &str,
        msg: &Message,
        out: &mut Vec<Effect>,
    ) {
        if *to != self.self_node {
            return self.drop_input(DropReason::WrongIncarnation, msg, out);
        }
        if !matches!(self.phase, Phase::Joining { .. }) {
            return self.drop_input(DropReason::Unexpected, msg, out);
        }
        self.enter(Phase::Stopped);
        out.push(Effect::Shutdown(ShutdownReason::IncompatibleConfig(
            refusal(from, reason),
        )));
    }
}
