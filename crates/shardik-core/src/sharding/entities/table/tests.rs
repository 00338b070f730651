//! Unit tests of the entity table.

use std::sync::Arc;

use super::*;

fn id(s: &str) -> Arc<str> {
    Arc::from(s)
}

/// A record with a value and its shard.
#[derive(Debug, PartialEq)]
struct Rec(u32, u32);

impl Homed for Rec {
    fn shard(&self) -> u32 {
        self.1
    }
    fn set_shard(&mut self, at: u32) {
        self.1 = at;
    }
}

fn rec(v: u32) -> Rec {
    Rec(v, u32::MAX)
}

#[test]
fn an_entity_is_found_in_its_own_shard_only() {
    let mut t: Table<Rec> = Table::default();
    let (a, b) = (id("shard-a"), id("shard-b"));
    assert!(t.ensure_shard(&a, || None));
    assert!(!t.ensure_shard(&a, || None));
    let (slot, added) = t.insert_with(&a, &id("e1"), || rec(7));
    assert!(added);
    assert_eq!(slot.0, 7);
    // Another allocation of the same texts finds it too.
    assert!(matches!(
        t.find(&id("shard-a"), &id("e1")),
        Found::Here(Rec(7, _))
    ));
    assert!(matches!(t.find(&b, &id("e1")), Found::Elsewhere(s) if *s == *"shard-a"));
    assert!(matches!(t.find(&a, &id("e2")), Found::Absent));
    // A second insert of a live id adds nothing, whatever shard it names.
    t.ensure_shard(&b, || None);
    let (_, added) = t.insert_with(&b, &id("e1"), || rec(9));
    assert!(!added);
    assert_eq!(t.iter().count(), 1);
    assert_eq!((t.shard_len(&a), t.shard_len(&b)), (1, 0));
    assert_eq!(t.remove(&b, &id("e1")), None);
    assert_eq!(t.remove(&a, &id("e1")).map(|r| r.0), Some(7));
    assert_eq!(t.shard_len(&a), 0);
}

#[test]
fn members_follow_inserts_and_removals_and_shard_indexes_are_reused() {
    let mut t: Table<Rec> = Table::default();
    let (a, b) = (id("a"), id("b"));
    t.ensure_shard(&a, || None);
    t.ensure_shard(&b, || None);
    for e in ["a1", "a2", "a3"] {
        t.insert_with(&a, &id(e), || rec(0));
    }
    t.insert_with(&b, &id("b1"), || rec(0));
    assert_eq!(t.members(&a), vec![id("a1"), id("a2"), id("a3")]);
    // The index now exists: later changes are seen through it.
    t.insert_with(&b, &id("b2"), || rec(0));
    t.remove(&b, &id("b1"));
    assert_eq!(t.members(&b), vec![id("b2")]);
    t.forget_members();
    assert_eq!(t.members(&b), vec![id("b2")]);
    // Emptied and removed, `a`'s index is reused by a new shard, whose members are its own.
    for e in ["a1", "a2", "a3"] {
        t.remove(&a, &id(e));
    }
    assert!(t.remove_shard(&a));
    assert!(!t.has_shard(&a));
    let c = id("c");
    t.ensure_shard(&c, || None);
    t.insert_with(&c, &id("c1"), || rec(0));
    assert_eq!(t.members(&c), vec![id("c1")]);
    assert_eq!(t.shard_count(), 2);
    let mut all: Vec<(String, String)> = t
        .iter()
        .map(|(s, e, _)| (s.to_string(), e.to_string()))
        .collect();
    all.sort();
    assert_eq!(
        all,
        vec![("b".into(), "b2".into()), ("c".into(), "c1".into())]
    );
}
