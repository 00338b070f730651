//! Unit tests of join compatibility: the keys sent, the differences named, missing keys.

use super::*;

fn config(name: &str, values: &[(&str, &str)]) -> JoinConfig {
    JoinConfig {
        cluster_name: name.into(),
        must_match: values
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn compat() -> JoinCompat {
    JoinCompat::new(vec![
        Arc::new(MustMatch::new("shards", "1000", WhenMissing::Refuse)),
        Arc::new(MustMatch::new("mode", "forward", WhenMissing::Accept)),
        Arc::new(
            MustMatch::new("tls", "on", WhenMissing::Accept).with_note("cannot really differ"),
        ),
    ])
}

#[test]
fn the_values_sent_are_every_checkers_keys() {
    let c = compat();
    assert_eq!(
        c.values(),
        config(
            "x",
            &[("shards", "1000"), ("mode", "forward"), ("tls", "on")]
        )
        .must_match
    );
}

#[test]
fn each_difference_names_the_key_and_both_values() {
    let c = compat();
    let own = JoinConfig {
        cluster_name: "home".into(),
        must_match: c.values(),
    };
    assert!(c.differences(&own, &own).is_empty());
    let joiner = config(
        "away",
        &[("shards", "500"), ("mode", "drop"), ("tls", "off")],
    );
    assert_eq!(
        c.differences(&own, &joiner),
        vec![
            "`cluster.name` differs: the cluster has `home`, the joiner has `away`",
            "`shards` differs: the cluster has `1000`, the joiner has `500`",
            "`mode` differs: the cluster has `forward`, the joiner has `drop`",
            "`tls` differs: the cluster has `on`, the joiner has `off` (cannot really differ)",
        ]
    );
}

#[test]
fn a_missing_key_refuses_or_accepts_as_its_checker_says() {
    let c = compat();
    let own = config(
        "home",
        &[("shards", "1000"), ("mode", "forward"), ("tls", "on")],
    );
    // An older joiner knows only the key that was always sent.
    assert!(
        c.differences(&own, &config("home", &[("shards", "1000")]))
            .is_empty()
    );
    let missing = c.differences(&own, &config("home", &[("mode", "forward")]));
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(
        missing[0]
            .starts_with("`shards` differs: the cluster has `1000`, the joiner sent no value")
    );
}

#[test]
fn keys_the_member_does_not_check_are_ignored() {
    let c = compat();
    let own = config(
        "home",
        &[("shards", "1000"), ("mode", "forward"), ("tls", "on")],
    );
    let joiner = config(
        "home",
        &[
            ("shards", "1000"),
            ("mode", "forward"),
            ("tls", "on"),
            ("app.extra", "1"),
        ],
    );
    assert!(c.differences(&own, &joiner).is_empty());
}

#[test]
fn equality_compares_enforcement_and_checkers() {
    let a = compat();
    assert_eq!(a, a.clone());
    let mut off = a.clone();
    off.enforce_on_join = false;
    assert_ne!(a, off);
    assert_ne!(a, JoinCompat::default());
}
