//! The join-compatibility checks a node's settings imply (Akka's `JoinConfigCompatChecker`s
//! of the cluster and sharding modules): the core's built-in checks over this node's values.

use shardik_core::membership::JoinCompat;
use shardik_core::membership::config::BuiltInJoinKeys;

use crate::downing::DowningProvider;
use crate::settings::Settings;

impl Settings {
    /// What a joiner must share with this node ([`BuiltInJoinKeys::checks`] says which keys
    /// and why), and whether a difference refuses it
    /// (`cluster.configuration-compatibility-check.enforce-on-join`).
    #[doc(hidden)] // the mapping to the cores, for the runtime and the simulator
    pub fn join_compat(&self) -> JoinCompat {
        let c = &self.cluster;
        let sbr = c.downing_provider == DowningProvider::SplitBrainResolver;
        let mut compat = BuiltInJoinKeys {
            number_of_shards: c.sharding.number_of_shards,
            handoff_mode: c.sharding.handoff_mode.as_str(),
            downing_provider: c.downing_provider.as_str(),
            active_strategy: sbr.then(|| c.split_brain_resolver.active_strategy.as_str()),
            tls_enabled: self.transport.tls.enabled,
        }
        .checks();
        compat.enforce_on_join = c.configuration_compatibility_check.enforce_on_join;
        compat
    }
}

#[cfg(test)]
mod tests {
    use shardik_core::Instant;
    use shardik_core::membership::{
        Address, Command, Effect, Input, Membership, Message, UniqueAddress,
    };

    use shardik_core::membership::config::{ACTIVE_STRATEGY_JOIN_KEY, TLS_ENABLED_JOIN_KEY};

    use super::*;

    /// Sends `joiner`'s `Join` straight to a member configured by `member` (the path of
    /// `POST /cluster/members`) and returns the member's reports: (differences, refused).
    fn direct_join(member: &Settings, joiner: &Settings) -> Vec<(Vec<String>, bool)> {
        let t0 = Instant::ZERO;
        let m_node = UniqueAddress::new(Address::new("127.0.0.1", 2551), 1);
        let j_node = UniqueAddress::new(Address::new("127.0.0.1", 2552), 2);
        let mut m = Membership::new(member.membership_config(), m_node.clone(), 1, t0);
        let mut j = Membership::new(joiner.membership_config(), j_node.clone(), 2, t0);
        let mut out = Vec::new();
        m.handle(
            t0,
            Input::Command(Command::Join(m_node.address.clone())),
            &mut out,
        );
        out.clear();
        j.handle(
            t0,
            Input::Command(Command::Join(m_node.address.clone())),
            &mut out,
        );
        let join = out
            .drain(..)
            .find_map(|e| match e {
                Effect::Send {
                    msg: msg @ Message::Join { .. },
                    ..
                } => Some(msg),
                _ => None,
            })
            .expect("a join");
        let input = Input::Message {
            msg: join,
            from: j_node,
            received_at: t0,
        };
        m.handle(t0, input, &mut out);
        out.into_iter()
            .filter_map(|e| match e {
                Effect::JoinIncompatible {
                    differences,
                    refused,
                    ..
                } => Some((differences, refused)),
                _ => None,
            })
            .collect()
    }

    fn settings(toml: &str) -> Settings {
        Settings::from_toml_str(toml).unwrap_or_else(|e| panic!("{toml}: {e}"))
    }

    #[test]
    fn each_checked_key_refuses_a_joiner_naming_the_key_and_both_values() {
        let member = Settings::reference();
        for (toml, expected) in [
            (
                "[cluster.sharding]\nnumber-of-shards = 500",
                "`cluster.sharding.number-of-shards` differs: the cluster has `1000`, the joiner has `500`",
            ),
            (
                "[cluster.sharding]\nhandoff-mode = \"drop\"",
                "`cluster.sharding.handoff-mode` differs: the cluster has `forward`, the joiner has `drop`",
            ),
            (
                "[cluster]\ndowning-provider = \"off\"",
                "`cluster.downing-provider` differs: the cluster has `split-brain-resolver`, the joiner has `off`",
            ),
            (
                "[cluster.split-brain-resolver]\nactive-strategy = \"keep-oldest\"",
                "`cluster.split-brain-resolver.active-strategy` differs: the cluster has `keep-majority`, the joiner has `keep-oldest`",
            ),
            (
                "[cluster]\nname = \"other\"",
                "`cluster.name` differs: the cluster has `shardik`, the joiner has `other`",
            ),
        ] {
            let reports = direct_join(&member, &settings(toml));
            assert_eq!(reports, vec![(vec![expected.to_string()], true)], "{toml}");
        }
        // TLS on one side only (files are not read here): the message says it is odd.
        let mut joiner = Settings::reference();
        joiner.transport.tls.enabled = true;
        let reports = direct_join(&member, &joiner);
        assert_eq!(reports.len(), 1, "{reports:?}");
        let why = &reports[0].0[0];
        assert!(
            why.starts_with("`transport.tls.enabled` differs: the cluster has `off`, the joiner has `on` (a node with TLS and one without cannot normally even complete a handshake"),
            "{why}"
        );
        // Keys nobody checks may differ.
        let joiner = settings(
            "[cluster.sharding]\nhandoff-timeout = \"30s\"\n[cluster]\napp-version = \"2\"",
        );
        assert!(direct_join(&member, &joiner).is_empty());
    }

    #[test]
    fn with_enforcement_off_the_member_lets_the_joiner_in_and_reports_every_difference() {
        let member =
            settings("[cluster.configuration-compatibility-check]\nenforce-on-join = \"off\"");
        assert!(!member.join_compat().enforce_on_join);
        assert!(Settings::reference().join_compat().enforce_on_join);
        let joiner =
            settings("[cluster.sharding]\nnumber-of-shards = 500\nhandoff-mode = \"drop\"");
        let reports = direct_join(&member, &joiner);
        assert_eq!(reports.len(), 1, "{reports:?}");
        assert_eq!(reports[0].0.len(), 2, "{reports:?}");
        assert!(!reports[0].1, "let in");
    }

    #[test]
    fn the_strategy_is_sent_only_when_the_resolver_downs() {
        let off = settings("[cluster]\ndowning-provider = \"off\"");
        assert!(
            !off.join_compat()
                .values()
                .contains_key(ACTIVE_STRATEGY_JOIN_KEY)
        );
        let values = Settings::reference().join_compat().values();
        assert_eq!(values[ACTIVE_STRATEGY_JOIN_KEY], "keep-majority");
        assert_eq!(values[TLS_ENABLED_JOIN_KEY], "off");
        // Two nodes without downing agree whatever strategy they would use.
        let other = settings(
            "[cluster]\ndowning-provider = \"off\"\n[cluster.split-brain-resolver]\nactive-strategy = \"down-all\"",
        );
        assert!(direct_join(&off, &other).is_empty());
    }
}
