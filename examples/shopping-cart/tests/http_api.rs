//! The carts' HTTP API on one in-process node over an in-memory store: what each route
//! answers for changes, refusals and malformed requests, and what a busy cart leaves in the
//! store (a snapshot every 100 events, every event kept and tagged).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use shardik::persistence::{MemoryStore, Persistence, Store};
use shardik::{Node, Settings};
use shopping_cart::cart::{SNAPSHOT_EVERY, TAG};
use shopping_cart::{CART, Cart, CartCommand, CartRequest, api, cart_kind};

const TIMEOUT: Duration = Duration::from_secs(10);

/// A node that forms a cluster by itself, carts on a memory store, and the API served on a
/// local port. Returns the node, the store and the API's base URL.
async fn start() -> (Node, Arc<MemoryStore>, String) {
    let port = shardik::testkit::free_port().expect("a free loopback port");
    let address: shardik::Address = format!("127.0.0.1:{port}").parse().unwrap();
    let mut settings = Settings::reference();
    // Timers for a test that takes a second, not the production defaults.
    settings.cluster.seed_node_timeout = Duration::from_millis(300);
    settings.cluster.periodic_tasks_initial_delay = Duration::from_millis(50);
    settings.cluster.gossip_interval = Duration::from_millis(100);
    settings.cluster.leader_actions_interval = Duration::from_millis(100);
    let node = Node::builder(settings)
        .bind(address.clone())
        .seeds([address])
        .start()
        .await
        .expect("the node starts");
    let store = Arc::new(MemoryStore::new());
    let persistence = Persistence::new(Arc::clone(&store) as Arc<dyn Store>);
    node.sharding()
        .init(cart_kind(&persistence))
        .expect("the kind registers");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = api::routes(node.sharding().clone(), TIMEOUT);
    tokio::spawn(async move { axum::serve(listener, router).await });
    (node, store, base)
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(base: String) -> Self {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(TIMEOUT)
            .build()
            .unwrap();
        Client { http, base }
    }

    /// Sends `method path` with `body` (raw text, sent as JSON) and returns the status and
    /// the JSON answer.
    async fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.expect("the API answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{path} answered {status} and not JSON ({e}): {text:?}"));
        (status, value)
    }

    /// `call` expecting 200; returns the cart's items.
    async fn ok(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        let (status, answer) = self.call(method, path, body).await;
        assert_eq!(status, 200, "{method} {path}: {answer}");
        answer["items"].clone()
    }

    /// `call` expecting `status` and a message containing `contains`.
    async fn refused(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        status: u16,
        contains: &str,
    ) {
        let (got, answer) = self.call(method, path, body).await;
        assert_eq!(got, status, "{method} {path}: {answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(contains),
            "{method} {path}: message {message:?} should contain {contains:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_changes_refusals_and_malformed_requests() {
    let (node, _store, base) = start().await;
    let c = Client::new(base);
    let socks = Some(r#"{"item": "socks", "quantity": 2}"#);

    let (status, answer) = c.call("POST", "/carts/a/items", socks).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], "a");
    assert_eq!(answer["items"], json!({"socks": 2}));
    assert_eq!(answer["checked_out"], false);
    assert_eq!(answer["node"], node.self_node().address.to_string());

    // Refused by the cart, in its state: 409.
    c.refused("POST", "/carts/a/items", socks, 409, "already in the cart")
        .await;
    c.refused(
        "PUT",
        "/carts/a/items/hat",
        Some(r#"{"quantity": 1}"#),
        409,
        "not in the cart",
    )
    .await;
    c.refused("DELETE", "/carts/a/items/hat", None, 409, "not in the cart")
        .await;
    c.refused("POST", "/carts/empty/checkout", None, 409, "empty cart")
        .await;

    // Malformed: 400, with a JSON message like every other failure.
    let zero = Some(r#"{"item": "hat", "quantity": 0}"#);
    c.refused("POST", "/carts/a/items", zero, 400, "at least 1")
        .await;
    c.refused(
        "PUT",
        "/carts/a/items/socks",
        Some(r#"{"quantity": 0}"#),
        400,
        "at least 1",
    )
    .await;
    for body in [
        "{",
        r#"{"item": "hat"}"#,
        r#"{"item": "hat", "quantity": -1}"#,
    ] {
        c.refused("POST", "/carts/a/items", Some(body), 400, "")
            .await;
    }
    let empty_item = Some(r#"{"item": "", "quantity": 1}"#);
    c.refused("POST", "/carts/a/items", empty_item, 400, "item name")
        .await;
    let long_id = format!("/carts/{}", "x".repeat(300));
    c.refused("GET", &long_id, None, 400, "cart id").await;
    c.refused("PATCH", "/carts/a", None, 405, "not allowed")
        .await;

    // Changes, item names with spaces included (percent-encoded in the path).
    let items = c
        .ok("PUT", "/carts/a/items/socks", Some(r#"{"quantity": 5}"#))
        .await;
    assert_eq!(items, json!({"socks": 5}));
    let red_hat = Some(r#"{"item": "red hat", "quantity": 1}"#);
    let items = c.ok("POST", "/carts/a/items", red_hat).await;
    assert_eq!(items, json!({"red hat": 1, "socks": 5}));
    let items = c.ok("DELETE", "/carts/a/items/red%20hat", None).await;
    assert_eq!(items, json!({"socks": 5}));

    // Checkout, then every change is refused and the cart stays as it was.
    let (status, answer) = c.call("POST", "/carts/a/checkout", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["checked_out"], true);
    assert!(answer["checked_out_at_ms"].as_u64().is_some(), "{answer}");
    let hat = Some(r#"{"item": "hat", "quantity": 1}"#);
    let one = Some(r#"{"quantity": 1}"#);
    c.refused("POST", "/carts/a/items", hat, 409, "checked out")
        .await;
    c.refused("PUT", "/carts/a/items/socks", one, 409, "checked out")
        .await;
    c.refused("DELETE", "/carts/a/items/socks", None, 409, "checked out")
        .await;
    c.refused("POST", "/carts/a/checkout", None, 409, "checked out")
        .await;
    // The message of a refusal is the cart's reason, and nothing else.
    let (_, answer) = c.call("POST", "/carts/a/items", hat).await;
    assert_eq!(
        answer,
        json!({"message": "the cart is checked out and can no longer be changed"})
    );
    let (status, answer) = c.call("GET", "/carts/a", None).await;
    assert_eq!(status, 200);
    assert_eq!(answer["items"], json!({"socks": 5}));
    assert_eq!(answer["checked_out"], true);

    // A cart never written to reads as empty.
    assert_eq!(c.ok("GET", "/carts/never", None).await, json!({}));
    node.leave().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_cart_is_snapshotted_every_100_events_and_keeps_its_tagged_events() {
    let (node, store, _base) = start().await;
    let cart = node.sharding().entity_ref_for(CART, "busy").unwrap();
    let add = CartCommand::AddItem {
        item: "socks".into(),
        quantity: 1,
    };
    cart.ask_result(CartRequest::of(add), TIMEOUT)
        .await
        .unwrap();
    // Event k (k >= 2) sets the quantity to k: 150 events in all.
    for quantity in 2..=150 {
        let adjust = CartCommand::AdjustQuantity {
            item: "socks".into(),
            quantity,
        };
        let summary = cart
            .ask_result(CartRequest::of(adjust), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(summary.items["socks"], quantity);
    }

    // Snapshots are saved in the background, after the answer.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let snapshot = loop {
        if let Some(s) = store.latest_snapshot("cart|busy").await.unwrap() {
            break s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no snapshot after 150 events"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(snapshot.seq, SNAPSHOT_EVERY);
    let state: Cart = serde_json::from_slice(&snapshot.payload).expect("a JSON snapshot");
    assert_eq!(state.items()["socks"], 100, "the cart after event 100");

    let events = store
        .read_events("cart|busy", 1, u64::MAX, 1000)
        .await
        .unwrap();
    assert_eq!(events.len(), 150, "events before the snapshot are kept");
    let tagged = store.events_by_tag(TAG, 0, 1000).await.unwrap();
    assert_eq!(tagged.len(), 150);
    assert!(tagged.iter().all(|e| &*e.persistence_id == "cart|busy"));
    node.leave().await;
}
