//! Unit tests of shard identifiers: the entity-id to shard mapping is fixed forever.

use super::*;

/// Pins the contract: these values were computed once and must never change.
#[test]
fn shard_id_table_is_fixed_forever() {
    let table: &[(&str, u32, &str)] = &[
        ("", 1000, "138"),
        ("a", 1000, "719"),
        ("entity-1", 1000, "655"),
        ("entity-2", 1000, "521"),
        ("user:42", 1000, "826"),
        ("order/2024/0001", 1000, "10"),
        ("žluťoučký kůň", 1000, "131"),
        ("entity-1", 100, "55"),
        ("entity-1", 7, "4"),
        ("entity-1", 1, "0"),
        ("entity-1", u32::MAX, "830541960"),
    ];
    for (id, n, expected) in table {
        assert_eq!(
            shard_id_for(id, *n).as_deref(),
            Ok(*expected),
            "shard_id_for({id:?}, {n})"
        );
    }
}

/// The underlying hash is XXH3-64 with seed 0: pin one raw value too, so a swap of the
/// hash variant (seeded, 128-bit, XXH64) is caught even where the modulus would hide it.
#[test]
fn raw_hash_is_xxh3_64_seed_0() {
    assert_eq!(xxh3_64(b"entity-1"), 11_071_694_344_604_516_655);
    // The published XXH3-64 test value for empty input (seed 0).
    assert_eq!(xxh3_64(b""), 0x2D06_8005_38D3_94C2);
}

#[test]
fn zero_shards_is_an_error() {
    assert_eq!(shard_id_for("x", 0), Err(ShardIdError::ZeroShards));
}

#[test]
fn always_in_range() {
    let n = NonZeroU32::new(13).unwrap();
    for i in 0..1000 {
        let s = shard_number_for(&format!("e{i}"), n);
        assert!(s < 13);
    }
}
