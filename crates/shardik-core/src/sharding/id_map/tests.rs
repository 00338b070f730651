//! Unit tests of the id map.

use super::*;

#[test]
fn equal_texts_in_different_allocations_are_one_key() {
    let mut m = IdMap::default();
    let a: Arc<str> = Arc::from("entity-1");
    let b: Arc<str> = Arc::from("entity-1");
    assert!(!Arc::ptr_eq(&a, &b));
    m.insert(a.clone(), 1);
    assert_eq!(m.get(&b), Some(&1));
    assert_eq!(m.get(&a), Some(&1));
    *m.get_or_insert_with(&b, || 0) += 1;
    assert_eq!(m.len(), 1);
    assert_eq!(m.remove(&b), Some(2));
    assert!(m.is_empty());
    assert!(!m.contains_key(&a));
}
