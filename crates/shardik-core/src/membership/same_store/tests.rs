//! Unit tests of the same-store join check.

use super::*;

fn keys(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_same_store_under_another_name_is_welcome() {
    let ours = SameStore::new("aa", "sqlite:/a.db");
    let joiner = keys(&[
        (STORE_IDENTITY_JOIN_KEY, "aa"),
        (STORE_LOCATION_JOIN_KEY, "sqlite:/link/to/a.db"),
    ]);
    assert!(ours.check(&joiner, &ours.required_keys()).is_empty());
}

#[test]
fn another_store_is_refused_naming_both_and_the_fix() {
    let ours = SameStore::new("aa", "sqlite:/n1/shardik.db");
    let joiner = SameStore::new("bb", "sqlite:/n2/shardik.db").required_keys();
    let refusal = ours.check(&joiner, &ours.required_keys());
    assert_eq!(refusal.len(), 1, "{refusal:?}");
    for part in [
        "`persistence.store` differs",
        "sqlite:/n1/shardik.db (store aa)",
        "sqlite:/n2/shardik.db (store bb)",
        "one PostgreSQL server",
        "one SQLite file",
    ] {
        assert!(refusal[0].contains(part), "{part:?} in {}", refusal[0]);
    }
}

#[test]
fn a_joiner_without_a_store_is_welcome() {
    let ours = SameStore::new("aa", "sqlite:/a.db");
    let joiner = keys(&[("cluster.sharding.number-of-shards", "1000")]);
    assert!(ours.check(&joiner, &ours.required_keys()).is_empty());
}
