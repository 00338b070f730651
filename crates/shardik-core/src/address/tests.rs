//! Unit tests of node identity: parsing, ordering, deep copies and the ring hash.

use super::*;

#[test]
fn a_deep_copy_is_equal_and_shares_no_host() {
    let a = UniqueAddress::new(Address::new("10.0.0.1", 2552), 42);
    let copy = a.deep_copy();
    assert_eq!(copy, a);
    assert!(!Arc::ptr_eq(&copy.address.host, &a.address.host));
    assert_eq!(Arc::strong_count(&a.address.host), 1);
}

#[test]
fn parses_host_port_and_rejects_garbage() {
    assert_eq!(
        "127.0.0.1:2552".parse(),
        Ok(Address::new("127.0.0.1", 2552))
    );
    assert_eq!("[::1]:7".parse(), Ok(Address::new("::1", 7)));
    assert!(matches!(
        "nohost".parse::<Address>(),
        Err(AddressParseError::MissingPort(_))
    ));
    assert!(matches!(
        "h:99999".parse::<Address>(),
        Err(AddressParseError::BadPort(_))
    ));
    assert!(matches!(
        ":1".parse::<Address>(),
        Err(AddressParseError::EmptyHost(_))
    ));
}

#[test]
fn ordering_is_host_then_port_then_uid() {
    let a = UniqueAddress::new(Address::new("a", 2), 9);
    let b = UniqueAddress::new(Address::new("a", 10), 1);
    let c = UniqueAddress::new(Address::new("b", 1), 0);
    let a2 = UniqueAddress::new(Address::new("a", 2), 10);
    let mut v = vec![c.clone(), a2.clone(), b.clone(), a.clone()];
    v.sort();
    assert_eq!(v, vec![a, a2, b, c]);
}

#[test]
fn ring_hash_matches_java_long_hashcode() {
    // Long.hashCode(0x1_0000_0002) = (int)(x ^ x>>>32) = 3
    let u = UniqueAddress::new(Address::new("h", 1), 0x1_0000_0002);
    assert_eq!(u.ring_hash(), 3);
    let neg = UniqueAddress::new(Address::new("h", 1), u64::MAX);
    assert_eq!(neg.ring_hash(), 0);
}
