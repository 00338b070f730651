//! Join compatibility on every join path: the member that accepts a join judges the joiner's
//! configuration, on `InitJoin` (seed path) and on `Join` (direct joins, re-joins, and the
//! `Join` that follows every seed path), and only the node a joiner asked can stop it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::membership::address::Address;
use crate::membership::compat::{JoinCompat, JoinConfigCompatChecker, MustMatch, WhenMissing};
use crate::membership::config::{NUMBER_OF_SHARDS_JOIN_KEY, number_of_shards_check};
use crate::membership::messages::ConfigCheck;
use crate::membership::node::*;

fn addr(port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port) * 1000 + 7)
}

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

fn with_shards(shards: u32) -> MembershipConfig {
    MembershipConfig {
        join_compat: JoinCompat::new(vec![Arc::new(number_of_shards_check(shards))]),
        ..MembershipConfig::default()
    }
}

/// A node that formed a cluster of itself (`addr(1)`) and `addr(2)`, both Up.
fn member(cfg: MembershipConfig) -> Membership {
    let me = addr(1);
    let mut node = Membership::new(cfg, me.clone(), 1, t(0));
    let mut g = Gossip::default();
    for (i, a) in [me.clone(), addr(2)].into_iter().enumerate() {
        let mut m = Member::joining(a.clone(), Default::default(), "1");
        m.status = MemberStatus::Up;
        m.up_number = i as u32 + 1;
        Arc::make_mut(&mut g.members).insert(a, m);
    }
    g.version.increment(&me);
    g.seen = g.members.keys().cloned().collect();
    node.start_as_member(t(0), Arc::new(g));
    node
}

fn deliver(node: &mut Membership, at: u64, from: &UniqueAddress, msg: Message) -> Vec<Effect> {
    let mut out = Vec::new();
    let input = Input::Message {
        msg,
        from: from.clone(),
        received_at: t(at),
    };
    node.handle(t(at), input, &mut out);
    out
}

fn command(node: &mut Membership, at: u64, cmd: Command) -> Vec<Effect> {
    let mut out = Vec::new();
    node.handle(t(at), Input::Command(cmd), &mut out);
    out
}

fn sent(out: &[Effect]) -> Vec<(Address, Message)> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Send { to, msg } => Some((to.clone(), msg.clone())),
            _ => None,
        })
        .collect()
}

fn dropped(out: &[Effect]) -> Vec<DropReason> {
    out.iter()
        .filter_map(|e| match e {
            Effect::Dropped { reason, .. } => Some(*reason),
            _ => None,
        })
        .collect()
}

/// The `JoinIncompatible` reports in `out`: (via, differences, refused).
fn reports(out: &[Effect]) -> Vec<(&'static str, Vec<String>, bool)> {
    out.iter()
        .filter_map(|e| match e {
            Effect::JoinIncompatible {
                via,
                differences,
                refused,
                ..
            } => Some((*via, differences.clone(), *refused)),
            _ => None,
        })
        .collect()
}

fn shutdown(out: &[Effect]) -> Option<ShutdownReason> {
    out.iter().find_map(|e| match e {
        Effect::Shutdown(r) => Some(r.clone()),
        _ => None,
    })
}

const SHARDS_DIFFER: &str =
    "`cluster.sharding.number-of-shards` differs: the cluster has `1000`, the joiner has `500`";

/// A joiner with 500 shards that asked `target` to join directly (`POST /cluster/members`),
/// and the `Join` it sent.
fn direct_joiner(target: &UniqueAddress) -> (Membership, Message) {
    let mut joiner = Membership::new(with_shards(500), addr(3), 3, t(0));
    let out = command(&mut joiner, 0, Command::Join(target.address.clone()));
    let (to, join) = sent(&out).pop().expect("a join is sent");
    assert_eq!(to, target.address);
    (joiner, join)
}

#[test]
fn a_direct_join_is_checked_and_the_refused_joiner_stops_naming_the_key_and_both_values() {
    let mut m = member(with_shards(1000));
    let (mut joiner, join) = direct_joiner(m.self_node());
    let Message::Join { config, .. } = &join else {
        panic!("{join:?}")
    };
    assert_eq!(
        config.as_ref().map(|c| c.must_match.clone()),
        Some(BTreeMap::from([(
            NUMBER_OF_SHARDS_JOIN_KEY.to_string(),
            "500".to_string()
        )]))
    );

    let out = deliver(&mut m, 10, &addr(3), join);
    assert_eq!(
        reports(&out),
        vec![("join", vec![SHARDS_DIFFER.to_string()], true)]
    );
    let replies = sent(&out);
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(replies[0].0, addr(3).address);
    assert!(
        !m.gossip().members.keys().any(|n| *n == addr(3)),
        "a refused joiner is never added"
    );

    let out = deliver(&mut joiner, 20, m.self_node(), replies[0].1.clone());
    let Some(ShutdownReason::IncompatibleConfig(why)) = shutdown(&out) else {
        panic!("{out:?}")
    };
    assert_eq!(
        why,
        format!(
            "the member at {} refused this node's configuration: {SHARDS_DIFFER}",
            m.self_node().address
        )
    );
    assert!(joiner.is_stopped());
}

#[test]
fn with_enforcement_off_the_member_welcomes_the_joiner_and_reports_the_difference() {
    let mut cfg = with_shards(1000);
    cfg.join_compat.enforce_on_join = false;
    let mut m = member(cfg);
    let (_, join) = direct_joiner(m.self_node());
    let out = deliver(&mut m, 10, &addr(3), join);
    assert_eq!(
        reports(&out),
        vec![("join", vec![SHARDS_DIFFER.to_string()], false)]
    );
    assert!(
        sent(&out)
            .iter()
            .any(|(_, msg)| matches!(msg, Message::Welcome { .. }))
    );
    assert!(m.gossip().has_member(&addr(3)));
}

#[test]
fn the_seed_path_refuses_and_reports_and_enforcement_off_lets_the_joiner_in() {
    for enforce in [true, false] {
        let mut cfg = with_shards(1000);
        cfg.join_compat.enforce_on_join = enforce;
        let mut m = member(cfg);
        let init_join = Message::InitJoin {
            from: addr(3),
            config: JoinConfig {
                cluster_name: "shardik".into(),
                must_match: with_shards(500).join_compat.values(),
            },
        };
        let out = deliver(&mut m, 10, &addr(3), init_join);
        assert_eq!(
            reports(&out),
            vec![("init-join", vec![SHARDS_DIFFER.to_string()], enforce)]
        );
        let expected = if enforce {
            ConfigCheck::Incompatible(SHARDS_DIFFER.to_string())
        } else {
            ConfigCheck::Compatible
        };
        assert!(
            matches!(&sent(&out)[..], [(_, Message::InitJoinAck { check, .. })] if *check == expected),
            "{out:?}"
        );
    }
}

#[test]
fn only_the_member_asked_can_refuse_a_joiner_and_never_a_member() {
    let mut m = member(with_shards(1000));
    let (mut joiner, _) = direct_joiner(m.self_node());
    let stranger = UniqueAddress::new(Address::new("10.6.6.6", 2552), 66);
    let refusal = |from: &UniqueAddress, to: &UniqueAddress| Message::JoinRefused {
        from: from.clone(),
        to: to.clone(),
        reason: "forged".into(),
    };

    // A stranger cannot stop the joiner.
    let out = deliver(&mut joiner, 10, &stranger, refusal(&stranger, &addr(3)));
    assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
    // A refusal meant for another incarnation at the joiner's address is not for it.
    let earlier = UniqueAddress::new(addr(3).address, 1);
    let out = deliver(&mut joiner, 11, &me_of(&m), refusal(&me_of(&m), &earlier));
    assert_eq!(dropped(&out), vec![DropReason::WrongIncarnation]);
    assert!(!joiner.is_stopped());

    // Nobody can stop a member with a refusal, not even another member.
    let me = m.self_node().clone();
    for from in [addr(2), stranger] {
        let out = deliver(&mut m, 20, &from, refusal(&from, &me));
        assert_eq!(dropped(&out), vec![DropReason::NotFromMember]);
        assert!(shutdown(&out).is_none());
    }
    assert!(!m.is_stopped());
}

#[test]
fn a_restarted_member_with_another_configuration_is_refused_and_its_old_incarnation_stays() {
    let mut m = member(with_shards(1000));
    let restarted = UniqueAddress::new(addr(2).address, 999);
    let join = Message::Join {
        node: restarted.clone(),
        roles: Default::default(),
        app_version: "1".into(),
        config: Some(Box::new(JoinConfig {
            cluster_name: "shardik".into(),
            must_match: with_shards(500).join_compat.values(),
        })),
    };
    let out = deliver(&mut m, 10, &restarted, join);
    assert_eq!(
        reports(&out),
        vec![("join", vec![SHARDS_DIFFER.to_string()], true)]
    );
    assert!(matches!(
        &sent(&out)[..],
        [(_, Message::JoinRefused { to, .. })] if *to == restarted
    ));
    assert_eq!(
        m.gossip().member(&addr(2)).map(|x| x.status),
        Some(MemberStatus::Up),
        "an incompatible incarnation must not get the old one downed"
    );
}

fn me_of(m: &Membership) -> UniqueAddress {
    m.self_node().clone()
}

fn join_without_config(node: &UniqueAddress) -> Message {
    Message::Join {
        node: node.clone(),
        roles: Default::default(),
        app_version: "1".into(),
        config: None,
    }
}

fn init_join(node: &UniqueAddress, config: JoinConfig) -> Message {
    Message::InitJoin {
        from: node.clone(),
        config,
    }
}

/// The previous version's `InitJoin` carried the cluster name and the number of shards.
fn previous_version_config() -> JoinConfig {
    JoinConfig {
        cluster_name: "shardik".into(),
        must_match: BTreeMap::from([(NUMBER_OF_SHARDS_JOIN_KEY.to_string(), "1000".to_string())]),
    }
}

#[test]
fn a_join_without_configuration_is_welcomed_only_after_a_compatible_init_join_lately() {
    let mut m = member(with_shards(1000));
    let old = addr(4);
    // Straight to `Join` (a direct join by a node of the previous version): refused.
    let out = deliver(&mut m, 10, &old, join_without_config(&old));
    let r = reports(&out);
    assert_eq!(r.len(), 1, "{out:?}");
    assert!(
        r[0].2 && r[0].1[0].contains("sent no configuration"),
        "{r:?}"
    );
    assert!(!m.gossip().has_member(&old));

    // Through the seed path: its `InitJoin` is checked, then its `Join` is welcomed.
    let out = deliver(&mut m, 20, &old, init_join(&old, previous_version_config()));
    assert!(reports(&out).is_empty(), "{out:?}");
    let out = deliver(&mut m, 30, &old, join_without_config(&old));
    assert!(reports(&out).is_empty(), "{out:?}");
    assert!(m.gossip().has_member(&old));

    // An `InitJoin` found incompatible does not count, nor does one too long ago.
    let other = addr(5);
    let mut bad = previous_version_config();
    bad.must_match
        .insert(NUMBER_OF_SHARDS_JOIN_KEY.to_string(), "7".to_string());
    let _ = deliver(&mut m, 40, &other, init_join(&other, bad));
    let out = deliver(&mut m, 50, &other, join_without_config(&other));
    assert!(reports(&out).first().is_some_and(|r| r.2), "{out:?}");
    let late = addr(6);
    let _ = deliver(
        &mut m,
        60,
        &late,
        init_join(&late, previous_version_config()),
    );
    let after = 60 + m.config().retry_unsuccessful_join_after.as_millis() as u64 + 1;
    // The node's timers run meanwhile (a node whose timers stood still that long was frozen,
    // and welcomes nobody until its members answer again: `freeze.rs`).
    while let Some(due) = m.poll_timeout().filter(|d| d.as_millis() < after) {
        m.handle_timeout(due, &mut Vec::new());
    }
    let out = deliver(&mut m, after, &late, join_without_config(&late));
    assert!(reports(&out).first().is_some_and(|r| r.2), "{out:?}");
}

#[test]
fn strangers_init_joins_cannot_grow_what_a_member_remembers() {
    let mut m = member(with_shards(1000));
    for i in 0..1_000u64 {
        let s = UniqueAddress::new(Address::new("10.9.9.9", 2552), i);
        let _ = deliver(&mut m, 100, &s, init_join(&s, previous_version_config()));
    }
    assert!(
        m.init_join_checked.len() <= 256,
        "{}",
        m.init_join_checked.len()
    );
}

#[test]
fn keys_new_in_this_version_may_be_missing_from_an_older_joiner() {
    let cfg = MembershipConfig {
        join_compat: JoinCompat::new(vec![
            Arc::new(number_of_shards_check(1000)),
            Arc::new(MustMatch::new(
                "cluster.sharding.handoff-mode",
                "forward",
                WhenMissing::Accept,
            )),
        ]),
        ..MembershipConfig::default()
    };
    let mut m = member(cfg);
    let old = addr(4);
    let out = deliver(&mut m, 10, &old, init_join(&old, previous_version_config()));
    assert!(reports(&out).is_empty(), "{out:?}");
    assert!(matches!(
        &sent(&out)[..],
        [(
            _,
            Message::InitJoinAck {
                check: ConfigCheck::Compatible,
                ..
            }
        )]
    ));
}

/// A user's own check (`NodeBuilder::join_config_compat_checker` in the runtime).
#[derive(Debug)]
struct SchemaAtLeast(u32);

impl JoinConfigCompatChecker for SchemaAtLeast {
    fn required_keys(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("app.schema".to_string(), self.0.to_string())])
    }

    fn check(
        &self,
        joiner: &BTreeMap<String, String>,
        _: &BTreeMap<String, String>,
    ) -> Vec<String> {
        match joiner.get("app.schema").and_then(|v| v.parse::<u32>().ok()) {
            Some(v) if v >= self.0 => Vec::new(),
            other => vec![format!(
                "`app.schema` is too old: the cluster needs at least `{}`, the joiner has `{other:?}`",
                self.0
            )],
        }
    }
}

#[test]
fn a_users_checker_travels_with_the_join_and_decides_on_the_member() {
    let with_schema = |v: u32| MembershipConfig {
        join_compat: JoinCompat::new(vec![Arc::new(number_of_shards_check(1000))])
            .with(Arc::new(SchemaAtLeast(v))),
        ..MembershipConfig::default()
    };
    let mut m = member(with_schema(3));
    for (port, schema, refused) in [(3, 2, true), (4, 3, false), (5, 9, false)] {
        let mut joiner = Membership::new(with_schema(schema), addr(port), 3, t(0));
        let out = command(&mut joiner, 0, Command::Join(m.self_node().address.clone()));
        let (_, join) = sent(&out).pop().expect("join");
        let out = deliver(&mut m, 10, &addr(port), join);
        assert_eq!(
            !reports(&out).is_empty(),
            refused,
            "schema {schema}: {out:?}"
        );
        assert_eq!(m.gossip().has_member(&addr(port)), !refused);
    }
    // The check is the member's: a joiner without the checker, sending nothing, is refused.
    let mut joiner = Membership::new(with_shards(1000), addr(6), 3, t(0));
    let out = command(&mut joiner, 0, Command::Join(m.self_node().address.clone()));
    let (_, join) = sent(&out).pop().expect("join");
    let out = deliver(&mut m, 10, &addr(6), join);
    assert!(reports(&out).first().is_some_and(|r| r.2), "{out:?}");
}
