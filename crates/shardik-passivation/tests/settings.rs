//! Configuration parsing, defaults and validation errors.

use std::time::Duration;

use shardik_passivation::{
    AdmissionFilterSettings, IdleCheck, PassivationSettings, PassivationStrategy,
    ReplacementPolicy, ResolvedStrategy, StrategyConfig,
};

#[test]
fn default_is_idle_two_minutes() {
    let r = PassivationSettings::default().validate().unwrap();
    assert_eq!(
        r,
        ResolvedStrategy::Idle(IdleCheck {
            timeout_ms: 120_000,
            interval_ms: 60_000
        })
    );
    let s = PassivationSettings::default().build::<String>().unwrap();
    assert_eq!(s.scheduled_interval(), Some(Duration::from_secs(60)));
}

#[test]
fn default_strategy_is_w_tinylfu() {
    let r = PassivationSettings::default()
        .with_strategy("default-strategy")
        .validate()
        .unwrap();
    let ResolvedStrategy::Composite {
        per_region_limit,
        settings,
        idle,
    } = r
    else {
        panic!("expected composite, got {r:?}");
    };
    assert_eq!(per_region_limit, 100_000);
    assert_eq!(idle, None);
    assert_eq!(settings.window, Some(ReplacementPolicy::LeastRecentlyUsed));
    assert_eq!(
        settings.main,
        ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.2, 0.8])
    );
    assert_eq!(settings.filter, AdmissionFilterSettings::default());
    let hc = settings.optimizer.unwrap();
    assert_eq!(
        (
            hc.adjust_multiplier,
            hc.initial_step,
            hc.restart_threshold,
            hc.step_decay
        ),
        (10.0, 0.0625, 0.05, 0.98)
    );
    assert_eq!(settings.initial_window_proportion, 0.01);
}

#[test]
fn json_config_with_overrides_and_custom_strategies() {
    let s = PassivationSettings::from_json(
        r#"{ "strategy": "default-strategy",
             "default-strategy": { "active-entity-limit": 5000, "idle-entity": { "timeout": "30 minutes" } } }"#,
    )
    .unwrap();
    match s.validate().unwrap() {
        ResolvedStrategy::Composite {
            per_region_limit,
            idle,
            ..
        } => {
            assert_eq!(per_region_limit, 5000);
            assert_eq!(
                idle,
                Some(IdleCheck {
                    timeout_ms: 1_800_000,
                    interval_ms: 900_000
                })
            );
        }
        other => panic!("{other:?}"),
    }
    let s = PassivationSettings::from_json(
        r#"{ "strategy": "custom-lfu",
             "custom-lfu": { "active-entity-limit": 1000,
                             "replacement": { "policy": "least-frequently-used",
                                              "least-frequently-used": { "dynamic-aging": true } } } }"#,
    )
    .unwrap();
    assert_eq!(
        s.validate().unwrap(),
        ResolvedStrategy::Limit {
            per_region_limit: 1000,
            policy: ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: true
            },
            idle: None
        }
    );
    let s = PassivationSettings::from_json(
        r#"{ "strategy": "s4", "s4": { "active-entity-limit": 10,
             "replacement": { "policy": "least-recently-used", "least-recently-used": { "segmented": { "levels": 4 } } } } }"#,
    )
    .unwrap();
    assert!(matches!(
        s.validate().unwrap(),
        ResolvedStrategy::Limit { policy: ReplacementPolicy::SegmentedLeastRecentlyUsed(p), .. } if p == vec![0.25; 4]
    ));
    assert_eq!(
        PassivationSettings::from_json(r#"{"strategy": "none"}"#)
            .unwrap()
            .validate()
            .unwrap(),
        ResolvedStrategy::Disabled
    );
}

#[test]
fn builder_api() {
    let settings = PassivationSettings::default().with_custom_strategy(
        "mine",
        StrategyConfig::new()
            .with_active_entity_limit(300)
            .with_replacement(&ReplacementPolicy::MostRecentlyUsed)
            .with_idle_timeout(Duration::from_secs(10))
            .with_idle_interval(Duration::from_secs(1)),
    );
    assert_eq!(
        settings.validate().unwrap(),
        ResolvedStrategy::Limit {
            per_region_limit: 300,
            policy: ReplacementPolicy::MostRecentlyUsed,
            idle: Some(IdleCheck {
                timeout_ms: 10_000,
                interval_ms: 1_000
            })
        }
    );
    let composite = PassivationSettings::default().with_custom_strategy(
        "w",
        StrategyConfig::new()
            .with_active_entity_limit(50)
            .with_admission_window(&ReplacementPolicy::LeastRecentlyUsed, false)
            .with_window_proportion(0.2)
            .with_frequency_sketch_filter(true),
    );
    let mut s = composite.build::<u64>().unwrap();
    let mut out = Vec::new();
    for id in 0..100u64 {
        s.entity_touched(&id, 0, &mut out);
    }
    assert_eq!(s.len(), 50);
}

#[test]
fn validation_names_key_and_value() {
    let e = PassivationSettings::from_json(
        r#"{ "strategy": "default-strategy", "default-strategy": { "admission": { "window": { "proportion": 1.5 } } } }"#,
    )
    .unwrap()
    .validate()
    .unwrap_err();
    assert_eq!(
        e.key,
        "passivation.default-strategy.admission.window.proportion"
    );
    assert_eq!(e.value, "1.5");
    assert!(e.to_string().contains("admission.window.proportion"));

    let e = PassivationSettings::default()
        .with_strategy("missing")
        .validate()
        .unwrap_err();
    assert_eq!(e.key, "passivation.strategy");
    assert_eq!(e.value, "missing");

    let e = PassivationSettings::from_json(
        r#"{ "strategy": "x", "x": { "active-entity-limit": 10, "replacement": { "policy": "random" } } }"#,
    )
    .unwrap()
    .validate()
    .unwrap_err();
    assert_eq!(e.key, "passivation.x.replacement.policy");
    assert_eq!(e.value, "random");

    let e = PassivationSettings::from_json(
        r#"{ "strategy": "x", "x": { "active-entity-limit": 10 } }"#,
    )
    .unwrap()
    .validate()
    .unwrap_err();
    assert_eq!(e.key, "passivation.x.replacement.policy");

    let e = PassivationSettings::from_json(
        r#"{ "strategy": "x", "x": { "idle-entity": { "timeout": "ten minutes" } } }"#,
    )
    .unwrap()
    .validate()
    .unwrap_err();
    assert_eq!(e.key, "passivation.x.idle-entity.timeout");

    let e = PassivationSettings::from_json(
        r#"{ "strategy": "default-strategy", "default-strategy": { "admission": { "frequency-sketch": { "counter-bits": 3 } } } }"#,
    )
    .unwrap()
    .validate()
    .unwrap_err();
    assert_eq!(
        e.key,
        "passivation.default-strategy.admission.frequency-sketch.counter-bits"
    );

    // unknown keys inside a block are rejected by the parser
    assert!(
        PassivationSettings::from_json(r#"{ "default-strategy": { "active-entity-limt": 1 } }"#)
            .is_err()
    );
}
