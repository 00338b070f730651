//! What the event-evolution tests share: the two versions of the cart, the fixture journal
//! written by version 1, and the recovery by version 2 that every store must give alike.

#![allow(dead_code)] // each test binary uses its own part (the PostgreSQL one never writes the fixture)

pub mod cart_v1;
pub mod cart_v2;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use shardik_persistence::{Store, persistence_id};
use shardik_runtime::persistence::{EventSourcedKind, Persistence, StorageCodec};
use shardik_runtime::sharding::Sharding;

use crate::common::{free_port, start_sharding_node, wait_up};

pub const ASK: Duration = Duration::from_secs(10);

/// The carts of the fixture, and how many events version 1 stored for each.
pub const CARTS: [(&str, usize); 3] = [("alice", 4), ("bob", 3), ("carol", 2)];

/// The journal version 1 wrote (`regenerate_the_journal_v1_fixture` in
/// `tests/event_evolution.rs` writes it again): the committed file is what the tests read.
pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/journal-v1.sqlite")
}

/// A copy of the fixture in `dir`: opening a SQLite file migrates it and writes beside it,
/// and the committed file must stay as it is.
pub fn fixture_copy(dir: &Path) -> PathBuf {
    let copy = dir.join("journal-v1.sqlite");
    std::fs::copy(fixture(), &copy).expect("the fixture is in the repository");
    copy
}

/// A single-node cluster of its own with sharding.
pub async fn one_node(cluster: &str) -> (shardik_runtime::node::RunningNode, Sharding) {
    let port = free_port();
    let (node, sharding) = start_sharding_node(cluster, port, port, &[]).await;
    wait_up(&[&node], 1).await;
    (node, sharding)
}

/// Version 1's kind: CBOR, events of version 1.
pub fn register_v1(sharding: &Sharding, persistence: &Persistence) {
    let kind = EventSourcedKind::new(cart_v1::CART, persistence, |_| cart_v1::Cart::default())
        .with_storage_codec(StorageCodec::Cbor)
        .with_event_version(1);
    sharding.init(kind.into_kind()).expect("kind registers");
}

/// Version 2's kind: CBOR, events of version 2, older ones through the adapter.
pub fn register_v2(sharding: &Sharding, persistence: &Persistence) {
    let kind = EventSourcedKind::new(cart_v2::CART, persistence, |_| cart_v2::Cart::default())
        .with_storage_codec(StorageCodec::Cbor)
        .with_event_version(cart_v2::VERSION)
        .with_event_adapter(cart_v2::adapt);
    sharding.init(kind.into_kind()).expect("kind registers");
}

/// The manifests of a cart's journal, in order.
pub async fn manifests(store: &dyn Store, cart: &str) -> Vec<String> {
    let pid = persistence_id(cart_v2::CART.name(), cart);
    let events = store.read_events(&pid, 1, u64::MAX, 100).await.unwrap();
    events.iter().map(|e| e.manifest.to_string()).collect()
}

async fn get(sharding: &Sharding, cart: &str) -> cart_v2::Cart {
    let cart = sharding.entity_ref_for(cart_v2::CART, cart).unwrap();
    cart.ask(cart_v2::Command::Get, ASK).await.unwrap()
}

fn line(quantity: u32, currency: &str) -> cart_v2::Line {
    cart_v2::Line {
        quantity,
        currency: currency.into(),
    }
}

fn cart(lines: &[(&str, cart_v2::Line)], closed: bool, events: u32) -> cart_v2::Cart {
    cart_v2::Cart {
        lines: lines
            .iter()
            .map(|(item, line)| (item.to_string(), line.clone()))
            .collect(),
        closed,
        close_reason: None,
        events,
    }
}

/// Recovers the fixture's carts from `store`, which holds the fixture's events, with version
/// 2 and checks each value; then writes a version-2 event beside the old ones and recovers the
/// mixed journal on a second node.
pub async fn recover_with_version_2(store: Arc<dyn Store>, cluster: &str) {
    for (name, count) in CARTS {
        assert_eq!(
            manifests(&*store, name).await,
            vec!["cbor/1"; count],
            "{name}: the fixture's events, all of version 1"
        );
    }
    let (_node, sharding) = one_node(&format!("{cluster}-a")).await;
    register_v2(&sharding, &Persistence::new(Arc::clone(&store)));

    // alice: an added field filled by default, an event split in two, one dropped, a renamed
    // variant.
    let expected = cart(
        &[
            ("apple", line(2, "EUR")),
            ("pear", line(1, "EUR")),
            ("plum", line(3, "EUR")),
        ],
        true,
        4,
    );
    assert_eq!(get(&sharding, "alice").await, expected);
    // bob: two adds of one item, a view dropped between them.
    assert_eq!(
        get(&sharding, "bob").await,
        cart(&[("apple", line(5, "EUR"))], false, 2)
    );
    // carol: an empty split and a dropped view: nothing at all.
    assert_eq!(get(&sharding, "carol").await, cart(&[], false, 0));

    // Version 2 writes its own events after version 1's.
    let bob = sharding.entity_ref_for(cart_v2::CART, "bob").unwrap();
    let add = |reply_to| cart_v2::Command::Add {
        item: "kiwi".into(),
        quantity: 1,
        currency: "USD".into(),
        reply_to,
    };
    let after_add = bob.ask(add, ASK).await.unwrap();
    let bob_now = cart(
        &[("apple", line(5, "EUR")), ("kiwi", line(1, "USD"))],
        false,
        3,
    );
    assert_eq!(after_add, bob_now);
    assert_eq!(
        manifests(&*store, "bob").await,
        ["cbor/1", "cbor/1", "cbor/1", "cbor/2"]
    );

    // A node that never saw bob recovers the mixed journal to the same state.
    let (_second, sharding) = one_node(&format!("{cluster}-b")).await;
    register_v2(&sharding, &Persistence::new(Arc::clone(&store)));
    assert_eq!(get(&sharding, "bob").await, bob_now);
}
