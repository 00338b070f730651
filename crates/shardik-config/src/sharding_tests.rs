//! Tests of `cluster.sharding.*` (and of the joining check on `number-of-shards`).

use std::time::Duration;

use shardik_core::membership::config::NUMBER_OF_SHARDS_JOIN_KEY;
use shardik_core::sharding::AllocationSettings;
use shardik_passivation::ResolvedStrategy;

use crate::{ConfigError, HandOffModeSetting, Settings, env_var_to_key};
use shardik_core::membership::{
    Address, Command, Effect, Input, Membership, Message, ShutdownReason, UniqueAddress,
};
use shardik_core::time::Instant;
use shardik_passivation::{IdleCheck, PassivationSettings, ReplacementPolicy};

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn err_text(toml: &str) -> (ConfigError, String) {
    let e = Settings::from_toml_str(toml).expect_err("configuration should be refused");
    let text = e.to_string();
    (e, text)
}

/// Leases by default for kinds with a store of their own, short enough that a crashed node's
/// shards wait seconds, not minutes; `""` turns them off and `"store"` on for every kind.
#[test]
fn leases_are_automatic_and_short_by_default() {
    use shardik_core::sharding::LeaseTiming;
    let s = Settings::reference();
    let sh = s.node_settings().sharding;
    let timing = LeaseTiming {
        ttl: Duration::from_secs(6),
        renew_interval: Duration::from_secs(2),
        operation_timeout: Duration::from_millis(1500),
        retry_interval: Duration::from_secs(1),
    };
    assert_eq!(sh.region.lease, None);
    assert_eq!(sh.coordinator_lease, None);
    assert_eq!(sh.auto_shard_lease, Some(timing));
    assert_eq!(sh.auto_coordinator_lease, Some(timing));
    let durable = sh.for_kind(true);
    assert_eq!(durable.region.lease, Some(timing));
    assert_eq!(durable.coordinator_lease, Some(timing));
    assert_eq!(sh.for_kind(false).region.lease, None);

    let off = Settings::from_toml_str(
        "[cluster.sharding]\nuse-lease = \"\"\n[cluster.sharding.coordinator-singleton]\nuse-lease = \"\"\n",
    )
    .unwrap()
    .node_settings()
    .sharding;
    assert_eq!(off.for_kind(true).region.lease, None);
    assert_eq!(off.for_kind(true).coordinator_lease, None);

    let forced = Settings::from_toml_str("[cluster.sharding]\nuse-lease = \"store\"\n")
        .unwrap()
        .node_settings()
        .sharding;
    assert_eq!(forced.for_kind(false).region.lease, Some(timing));
    assert_eq!(forced.for_kind(false).coordinator_lease, None, "still auto");
}

#[test]
fn sharding_defaults_are_the_reference_values() {
    let s = Settings::reference();
    let sh = &s.cluster.sharding;
    assert_eq!(sh.number_of_shards, 1000);
    assert_eq!(sh.role, "");
    assert_eq!(sh.host_role(), None);
    assert_eq!(sh.buffer_size, 100_000);
    assert_eq!(sh.retry_interval, Duration::from_secs(2));
    assert_eq!(sh.handoff_timeout, Duration::from_secs(60));
    assert_eq!(sh.shard_start_timeout, Duration::from_secs(10));
    assert_eq!(sh.rebalance_interval, Duration::from_secs(10));
    assert_eq!(sh.unheard_region_warning_after, Duration::from_secs(10));
    assert_eq!(sh.shard_region_query_timeout, Duration::from_secs(3));
    assert_eq!(sh.coordinator_failure_backoff, Duration::from_secs(5));
    assert_eq!(sh.entity_restart_backoff, Duration::from_secs(10));
    assert_eq!(sh.handoff_mode, HandOffModeSetting::Forward);
    assert_eq!(sh.handoff_mode.as_str(), "forward");
    let a = &sh.least_shard_allocation_strategy;
    assert_eq!(a.rebalance_absolute_limit, 20);
    assert_eq!(a.rebalance_relative_limit, 0.1);
    assert_eq!(a.rebalance_threshold, 1);
    assert_eq!(a.max_simultaneous_rebalance, 3);
    // Our documented difference (new algorithm by default) lives in the core's defaults;
    // the reference file must agree with them.
    assert_eq!(sh.allocation_settings(), AllocationSettings::default());
    assert_eq!(sh.passivation.strategy, "default-idle-strategy");
    assert_eq!(
        sh.passivation_strategy().unwrap(),
        ResolvedStrategy::Idle(IdleCheck::new(Duration::from_secs(120)))
    );
    // The documented default-strategy block resolves to the reference's recommended
    // composite strategy, exactly as the passivation crate's built-in block does.
    assert_eq!(
        sh.passivation
            .clone()
            .with_strategy("default-strategy")
            .validate()
            .unwrap(),
        PassivationSettings::default()
            .with_strategy("default-strategy")
            .validate()
            .unwrap()
    );
    assert!(sh.healthcheck.names.is_empty());
    assert_eq!(sh.healthcheck.timeout, Duration::from_secs(5));
    assert_eq!(sh.healthcheck.disabled_after, Duration::from_secs(10));
    assert_eq!(s.cluster.down_removal_margin, None);
    assert_eq!(
        s.membership_config().join_compat.values()[NUMBER_OF_SHARDS_JOIN_KEY],
        "1000"
    );
}

#[test]
fn down_removal_margin_follows_the_reference_rule() {
    // "off" with the split-brain resolver: its `stable-after`.
    let s =
        Settings::from_toml_str("[cluster.split-brain-resolver]\nstable-after = \"8s\"").unwrap();
    assert_eq!(
        s.cluster.effective_down_removal_margin(),
        Duration::from_secs(8)
    );
    assert_eq!(
        Settings::reference()
            .cluster
            .effective_down_removal_margin(),
        Duration::from_secs(20)
    );
    // "off" with manual downing: no margin.
    let s = Settings::from_toml_str("[cluster]\ndowning-provider = \"off\"").unwrap();
    assert_eq!(s.cluster.effective_down_removal_margin(), Duration::ZERO);
    // Set explicitly: used whoever downs.
    for downing in ["off", "split-brain-resolver"] {
        let s = Settings::from_toml_str(&format!(
            "[cluster]\ndown-removal-margin = \"7s\"\ndowning-provider = \"{downing}\""
        ))
        .unwrap();
        assert_eq!(s.cluster.down_removal_margin, Some(Duration::from_secs(7)));
        assert_eq!(
            s.cluster.effective_down_removal_margin(),
            Duration::from_secs(7),
            "{downing}"
        );
    }
    let s = Settings::from_toml_str("[cluster]\ndown-removal-margin = false").unwrap();
    assert_eq!(s.cluster.down_removal_margin, None);
}

#[test]
fn sharding_keys_are_read_from_a_file() {
    let s = Settings::from_toml_str(
        r#"
[cluster]
down-removal-margin = "30s"

[cluster.sharding]
number-of-shards = 128
role = "backend"
buffer-size = 50
retry-interval = "500ms"
handoff-mode = "drop"

[cluster.sharding.least-shard-allocation-strategy]
rebalance-absolute-limit = 0
rebalance-relative-limit = 1.0
rebalance-threshold = 2
max-simultaneous-rebalance = 5

[cluster.sharding.passivation]
strategy = "none"

[cluster.sharding.healthcheck]
names = ["counter", "cart"]
"#,
    )
    .unwrap();
    let sh = &s.cluster.sharding;
    assert_eq!(sh.number_of_shards, 128);
    assert_eq!(sh.host_role(), Some("backend"));
    assert_eq!(sh.buffer_size, 50);
    assert_eq!(sh.retry_interval, Duration::from_millis(500));
    assert_eq!(sh.handoff_mode, HandOffModeSetting::Drop);
    assert_eq!(
        sh.allocation_settings(),
        AllocationSettings {
            rebalance_absolute_limit: 0,
            rebalance_relative_limit: 1.0,
            rebalance_threshold: 2,
            max_simultaneous_rebalance: 5,
        }
    );
    assert_eq!(
        sh.passivation_strategy().unwrap(),
        ResolvedStrategy::Disabled
    );
    assert_eq!(sh.healthcheck.names, ["counter", "cart"]);
    assert_eq!(
        s.cluster.effective_down_removal_margin(),
        Duration::from_secs(30)
    );
    // Untouched keys keep their defaults.
    assert_eq!(sh.handoff_timeout, Duration::from_secs(60));
    assert_eq!(
        s.membership_config().join_compat.values()[NUMBER_OF_SHARDS_JOIN_KEY],
        "128"
    );
    // Akka's "off" is accepted for "none".
    let s = Settings::from_toml_str("[cluster.sharding.passivation]\nstrategy = \"off\"").unwrap();
    assert_eq!(
        s.cluster.sharding.passivation_strategy().unwrap(),
        ResolvedStrategy::Disabled
    );
}

#[test]
fn passivation_strategies_are_chosen_and_tuned_by_key() {
    // The recommended limit-based strategy, with a smaller limit and an idle timeout.
    let s = Settings::from_toml_str(
        r#"
[cluster.sharding.passivation]
strategy = "default-strategy"
[cluster.sharding.passivation.default-strategy]
active-entity-limit = 5000
[cluster.sharding.passivation.default-strategy.idle-entity]
timeout = "10m"
"#,
    )
    .unwrap();
    match s.cluster.sharding.passivation_strategy().unwrap() {
        ResolvedStrategy::Composite {
            per_region_limit,
            settings,
            idle,
        } => {
            assert_eq!(per_region_limit, 5000);
            assert_eq!(
                settings.main,
                ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.2, 0.8])
            );
            assert!(settings.optimizer.is_some(), "hill climbing stays on");
            assert_eq!(idle, Some(IdleCheck::new(Duration::from_secs(600))));
        }
        other => panic!("expected the composite strategy, got {other:?}"),
    }
    // A custom block: plain LFU with dynamic aging and a limit of 300.
    let s = Settings::from_toml_str(
        r#"
[cluster.sharding.passivation]
strategy = "lfuda-300"
[cluster.sharding.passivation.lfuda-300]
active-entity-limit = 300
replacement.policy = "least-frequently-used"
replacement.least-frequently-used.dynamic-aging = true
"#,
    )
    .unwrap();
    assert_eq!(
        s.cluster.sharding.passivation_strategy().unwrap(),
        ResolvedStrategy::Limit {
            per_region_limit: 300,
            policy: ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: true
            },
            idle: None,
        }
    );
    // S4LRU from the environment alone.
    let vars = env(&[
        (
            "SHARDIK_CLUSTER__SHARDING__PASSIVATION__STRATEGY",
            "default-strategy",
        ),
        (
            "SHARDIK_CLUSTER__SHARDING__PASSIVATION__DEFAULT_STRATEGY__ACTIVE_ENTITY_LIMIT",
            "40",
        ),
        (
            "SHARDIK_CLUSTER__SHARDING__PASSIVATION__DEFAULT_STRATEGY__ADMISSION__WINDOW__POLICY",
            "off",
        ),
        (
            "SHARDIK_CLUSTER__SHARDING__PASSIVATION__DEFAULT_STRATEGY__ADMISSION__FILTER",
            "off",
        ),
        (
            "SHARDIK_CLUSTER__SHARDING__PASSIVATION__DEFAULT_STRATEGY__REPLACEMENT__LEAST_RECENTLY_USED__SEGMENTED__LEVELS",
            "4",
        ),
        (
            "SHARDIK_CLUSTER__SHARDING__PASSIVATION__DEFAULT_STRATEGY__REPLACEMENT__LEAST_RECENTLY_USED__SEGMENTED__PROPORTIONS",
            "[0.25, 0.25, 0.25, 0.25]",
        ),
    ]);
    let s = Settings::load_with_env(None, &vars).unwrap();
    assert_eq!(
        s.cluster.sharding.passivation_strategy().unwrap(),
        ResolvedStrategy::Limit {
            per_region_limit: 40,
            policy: ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.25; 4]),
            idle: None,
        }
    );
    // The idle strategy's check interval is a key of its own.
    let s = Settings::from_toml_str(
        "[cluster.sharding.passivation.default-idle-strategy.idle-entity]\ninterval = \"1s\"",
    )
    .unwrap();
    let mut check = IdleCheck::new(Duration::from_secs(120));
    check.interval_ms = 1000;
    assert_eq!(
        s.cluster.sharding.passivation_strategy().unwrap(),
        ResolvedStrategy::Idle(check)
    );
}

#[test]
fn sharding_keys_are_overridden_from_the_environment() {
    let vars = env(&[
        ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "500"),
        ("SHARDIK_CLUSTER__SHARDING__HANDOFF_MODE", "drop"),
        ("SHARDIK_CLUSTER__SHARDING__ROLE", "backend"),
        (
            "SHARDIK_CLUSTER__SHARDING__LEAST_SHARD_ALLOCATION_STRATEGY__REBALANCE_RELATIVE_LIMIT",
            "0.5",
        ),
        (
            "SHARDIK_CLUSTER__SHARDING__PASSIVATION__DEFAULT_IDLE_STRATEGY__IDLE_ENTITY__TIMEOUT",
            "30s",
        ),
        (
            "SHARDIK_CLUSTER__SHARDING__HEALTHCHECK__NAMES",
            "counter,cart",
        ),
        ("SHARDIK_CLUSTER__DOWN_REMOVAL_MARGIN", "15s"),
    ]);
    let s = Settings::load_with_env(None, &vars).unwrap();
    let sh = &s.cluster.sharding;
    assert_eq!(sh.number_of_shards, 500);
    assert_eq!(sh.handoff_mode, HandOffModeSetting::Drop);
    assert_eq!(sh.role, "backend");
    assert_eq!(
        sh.least_shard_allocation_strategy.rebalance_relative_limit,
        0.5
    );
    assert_eq!(
        sh.passivation_strategy().unwrap(),
        ResolvedStrategy::Idle(IdleCheck::new(Duration::from_secs(30)))
    );
    assert_eq!(sh.healthcheck.names, ["counter", "cart"]);
    assert_eq!(s.cluster.down_removal_margin, Some(Duration::from_secs(15)));
    assert_eq!(
        s.membership_config().join_compat.values()[NUMBER_OF_SHARDS_JOIN_KEY],
        "500"
    );
    assert_eq!(
        env_var_to_key("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS").as_deref(),
        Some("cluster.sharding.number-of-shards")
    );
}

#[test]
fn bad_sharding_values_name_the_key_and_what_is_allowed() {
    let cases = [
        (
            "[cluster.sharding]\nhandoff-mode = \"sideways\"",
            "`cluster.sharding.handoff-mode` = `sideways`",
            "one of `forward`, `drop`",
        ),
        (
            "[cluster.sharding]\nnumber-of-shards = 0",
            "`cluster.sharding.number-of-shards` = `0`",
            "at least 1",
        ),
        (
            "[cluster.sharding]\nnumber-of-shards = -5",
            "`cluster.sharding.number-of-shards` = `-5`",
            "a whole number from 0 to 4294967295",
        ),
        (
            "[cluster.sharding]\nbuffer-size = 0",
            "`cluster.sharding.buffer-size` = `0`",
            "greater than zero",
        ),
        (
            "[cluster.sharding.least-shard-allocation-strategy]\nrebalance-relative-limit = 2.0",
            "`cluster.sharding.least-shard-allocation-strategy.rebalance-relative-limit` = `2`",
            "greater than 0 and at most 1",
        ),
        (
            "[cluster.sharding.least-shard-allocation-strategy]\nrebalance-relative-limit = 0.0",
            "`cluster.sharding.least-shard-allocation-strategy.rebalance-relative-limit` = `0`",
            "greater than 0 and at most 1",
        ),
        (
            "[cluster.sharding.least-shard-allocation-strategy]\nrebalance-threshold = 0",
            "`cluster.sharding.least-shard-allocation-strategy.rebalance-threshold` = `0`",
            "greater than zero",
        ),
        (
            "[cluster.sharding]\nhandoff-timeout = \"0s\"",
            "`cluster.sharding.handoff-timeout` = `0s`",
            "greater than zero",
        ),
        (
            "[cluster.sharding]\nretry-interval = \"soon\"",
            "`cluster.sharding.retry-interval` = `soon`",
            "a duration like `1s`",
        ),
        (
            "[cluster.sharding.passivation]\nstrategy = \"lru\"",
            "`cluster.sharding.passivation.strategy` = `lru`",
            "expected default-idle-strategy, default-strategy, none, or a custom block",
        ),
        (
            "[cluster.sharding.passivation.default-idle-strategy.idle-entity]\ntimeout = \"0s\"",
            "`cluster.sharding.passivation.default-idle-strategy.idle-entity.timeout` = `0s`",
            "must be positive",
        ),
        (
            "[cluster.sharding.passivation.default-idle-strategy.idle-entity]\ntimeout = 120",
            "`cluster.sharding.passivation.default-idle-strategy.idle-entity.timeout` = `120`",
            "like `1s`",
        ),
        (
            // Refused even while another strategy is selected.
            "[cluster.sharding.passivation.default-strategy]\nactive-entity-limit = 0",
            "`cluster.sharding.passivation.default-strategy.active-entity-limit` = `0`",
            "at least 1",
        ),
        (
            "[cluster.sharding.passivation]\nstrategy = \"default-strategy\"\n\
             [cluster.sharding.passivation.default-strategy.replacement.least-recently-used.segmented]\n\
             levels = 4",
            "`cluster.sharding.passivation.default-strategy.replacement.least-recently-used.segmented.proportions`",
            "expected 4 proportions",
        ),
        (
            "[cluster.sharding.healthcheck]\nnames = [\"counter\", \"\"]",
            "`cluster.sharding.healthcheck.names`",
            "none of them empty",
        ),
        (
            "[cluster]\ndown-removal-margin = \"on\"",
            "`cluster.down-removal-margin` = `on`",
            "\"off\"",
        ),
        (
            "[cluster]\ndown-removal-margin = \"0s\"",
            "`cluster.down-removal-margin` = `0s`",
            "greater than zero",
        ),
        (
            "[cluster]\ndown-removal-margin = 20",
            "`cluster.down-removal-margin` = `20`",
            "like `20s`",
        ),
    ];
    for (toml, head, allowed) in cases {
        let (e, text) = err_text(toml);
        assert!(
            matches!(
                e,
                ConfigError::InvalidValue { .. } | ConfigError::Refused { .. }
            ),
            "{toml}: {e:?}"
        );
        assert!(text.starts_with(head), "{toml}: {text}");
        assert!(text.contains(allowed), "{toml}: {text}");
    }
    // From the environment, the variable is named.
    let text = Settings::load_with_env(
        None,
        &env(&[("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "0")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        text.contains("`cluster.sharding.number-of-shards` = `0`")
            && text.contains("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS"),
        "{text}"
    );
}

#[test]
fn remember_entities_and_its_recovery_strategy_are_read() {
    let s = Settings::from_toml_str(
        "[cluster.sharding]\nremember-entities = \"on\"\nentity-recovery-strategy = \"constant\"\n\
         [cluster.sharding.entity-recovery-constant-rate-strategy]\nnumber-of-entities = 7\nfrequency = \"250ms\"",
    )
    .expect("valid");
    assert!(s.cluster.sharding.remember_entities);
    assert_eq!(
        s.cluster.sharding.entity_recovery(),
        shardik_core::sharding::EntityRecovery::ConstantRate {
            entities: 7,
            frequency: Duration::from_millis(250),
        }
    );
    let (e, _) = err_text(
        "[cluster.sharding.entity-recovery-constant-rate-strategy]\nnumber-of-entities = 0",
    );
    assert!(matches!(e, ConfigError::InvalidValue { .. }), "{e:?}");
}

#[test]
fn entity_restart_backoff_is_read_overridden_checked_and_reaches_sharding() {
    let s = Settings::from_toml_str("[cluster.sharding]\nentity-restart-backoff = \"250ms\"")
        .expect("valid");
    assert_eq!(
        s.cluster.sharding.entity_restart_backoff,
        Duration::from_millis(250)
    );
    assert_eq!(
        s.node_settings().sharding.entity_restart_backoff,
        Duration::from_millis(250)
    );
    let vars = env(&[("SHARDIK_CLUSTER__SHARDING__ENTITY_RESTART_BACKOFF", "3s")]);
    let s = Settings::load_with_env(None, &vars).unwrap();
    assert_eq!(
        s.cluster.sharding.entity_restart_backoff,
        Duration::from_secs(3)
    );
    let (e, text) = err_text("[cluster.sharding]\nentity-restart-backoff = \"0s\"");
    assert!(matches!(e, ConfigError::InvalidValue { .. }), "{e:?}");
    assert!(
        text.contains("cluster.sharding.entity-restart-backoff"),
        "{text}"
    );
}

#[test]
fn handler_lanes_default_to_one_per_worker_and_are_read_overridden_checked_and_mapped() {
    let s = Settings::from_toml_str("").expect("valid");
    assert_eq!(s.cluster.sharding.handler_lanes, 0);
    assert_eq!(s.node_settings().sharding.handler_lanes, 0);
    let s = Settings::from_toml_str("[cluster.sharding]\nhandler-lanes = 3").expect("valid");
    assert_eq!(s.cluster.sharding.handler_lanes, 3);
    assert_eq!(s.node_settings().sharding.handler_lanes, 3);
    let vars = env(&[("SHARDIK_CLUSTER__SHARDING__HANDLER_LANES", "1")]);
    let s = Settings::load_with_env(None, &vars).unwrap();
    assert_eq!(s.node_settings().sharding.handler_lanes, 1);
    let (e, text) = err_text("[cluster.sharding]\nhandler-lanes = 5000");
    assert!(matches!(e, ConfigError::InvalidValue { .. }), "{e:?}");
    assert!(
        text.contains("cluster.sharding.handler-lanes") && text.contains("1024"),
        "{text}"
    );
    let (_, text) = err_text("[cluster.sharding]\nhandler-lanes = -1");
    assert!(text.contains("handler-lanes"), "{text}");
}

#[test]
fn unknown_sharding_keys_are_refused() {
    let (e, text) = err_text("[cluster.sharding]\nnumber-of-shard = 10");
    assert!(matches!(e, ConfigError::UnknownKey { .. }), "{e:?}");
    assert!(
        text.contains("unknown key `cluster.sharding.number-of-shard`")
            && text.contains("did you mean `cluster.sharding.number-of-shards`"),
        "{text}"
    );
    for (toml, key) in [
        (
            "[cluster.sharding]\nremember-entitys = true",
            "cluster.sharding.remember-entitys",
        ),
        (
            "[cluster.sharding.least-shard-allocation-strategy]\nlimit = 3",
            "cluster.sharding.least-shard-allocation-strategy.limit",
        ),
        (
            "[cluster.sharding.passivation.default-idle-strategy.idle-entity]\nintreval = \"1s\"",
            "cluster.sharding.passivation.default-idle-strategy.idle-entity.intreval",
        ),
        (
            // Would otherwise be taken for a custom strategy block that nothing selects.
            "[cluster.sharding.passivation.default-stratgy]\nactive-entity-limit = 10",
            "cluster.sharding.passivation.default-stratgy",
        ),
        (
            "[cluster.sharding.passivation]\nstratgy = \"default-strategy\"",
            "cluster.sharding.passivation.stratgy",
        ),
        (
            "[cluster.sharding.passivation.default-strategy]\nactive-entity-limt = 10",
            "cluster.sharding.passivation.default-strategy.active-entity-limt",
        ),
        (
            "[cluster.sharding.healthcheck]\nname = []",
            "cluster.sharding.healthcheck.name",
        ),
        (
            // Its path in Akka is `cluster.down-removal-margin`, not under sharding.
            "[cluster.sharding]\ndown-removal-margin = \"5s\"",
            "cluster.sharding.down-removal-margin",
        ),
    ] {
        let (e, text) = err_text(toml);
        assert!(matches!(e, ConfigError::UnknownKey { .. }), "{toml}: {e:?}");
        assert!(
            text.contains(&format!("unknown key `{key}`")),
            "{toml}: {text}"
        );
    }
}

/// Drives two membership cores configured from `seed` and `joiner` through the join
/// handshake and returns what the joiner does with the seed's verdict.
fn join_attempt(seed: &Settings, joiner: &Settings) -> Vec<Effect> {
    let t0 = Instant::ZERO;
    let seed_node = UniqueAddress::new(Address::new("127.0.0.1", 2551), 1);
    let joiner_node = UniqueAddress::new(Address::new("127.0.0.1", 2552), 2);
    let mut a = Membership::new(seed.membership_config(), seed_node.clone(), 1, t0);
    let mut b = Membership::new(joiner.membership_config(), joiner_node, 2, t0);
    let mut out = Vec::new();
    a.handle(
        t0,
        Input::Command(Command::Join(seed_node.address.clone())),
        &mut out,
    );
    assert!(a.is_member());

    let mut out = Vec::new();
    b.handle(
        t0,
        Input::Command(Command::JoinSeedNodes(vec![seed_node.address.clone()])),
        &mut out,
    );
    let init_join = out
        .into_iter()
        .find_map(|e| match e {
            Effect::Send {
                msg: msg @ Message::InitJoin { .. },
                ..
            } => Some(msg),
            _ => None,
        })
        .expect("the joiner asks the seed");

    let mut out = Vec::new();
    a.handle(
        t0,
        Input::Message {
            from: init_join.sender().expect("names its sender").clone(),
            msg: init_join,
            received_at: t0,
        },
        &mut out,
    );
    let ack = out
        .into_iter()
        .find_map(|e| match e {
            Effect::Send {
                msg: msg @ Message::InitJoinAck { .. },
                ..
            } => Some(msg),
            _ => None,
        })
        .expect("the seed answers");

    let mut out = Vec::new();
    b.handle(
        t0,
        Input::Message {
            from: ack.sender().expect("names its sender").clone(),
            msg: ack,
            received_at: t0,
        },
        &mut out,
    );
    out
}

#[test]
fn joiner_with_another_number_of_shards_is_refused() {
    let cluster = Settings::reference();
    let joiner = Settings::from_toml_str("[cluster.sharding]\nnumber-of-shards = 500").unwrap();
    let out = join_attempt(&cluster, &joiner);
    let why = out
        .iter()
        .find_map(|e| match e {
            Effect::Shutdown(ShutdownReason::IncompatibleConfig(why)) => Some(why.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("the joiner must stop: {out:?}"));
    assert!(
        why.contains("`cluster.sharding.number-of-shards` differs")
            && why.contains("`1000`")
            && why.contains("`500`"),
        "{why}"
    );

    // The same number (with sharding keys that need not match differing) joins.
    let joiner = Settings::from_toml_str(
        "[cluster.sharding]\nnumber-of-shards = 1000\nhandoff-timeout = \"30s\"",
    )
    .unwrap();
    let out = join_attempt(&cluster, &joiner);
    assert!(
        out.iter().any(|e| matches!(
            e,
            Effect::Send {
                msg: Message::Join { .. },
                ..
            }
        )),
        "{out:?}"
    );
    assert!(
        !out.iter().any(|e| matches!(e, Effect::Shutdown(_))),
        "{out:?}"
    );
}
