//! The management HTTP API over a fake node (a watch channel holding a snapshot of three
//! members, one unreachable, and a command responder that records what it was asked), and
//! over real nodes with sharding for readiness and joining.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use shardik_core::membership::{
    Address, CommandError, Member, MemberStatus, MembershipConfig, UniqueAddress,
};
use shardik_runtime::config::{Settings, ShardingHealthCheckSettings};
use shardik_runtime::http::{self, PROMETHEUS_CONTENT_TYPE};
use shardik_runtime::metrics::{self as shardik_metrics, Metrics};
use shardik_runtime::node::{self, NodeOptions, RunningNode};
use shardik_runtime::sharding::{EntityKind, Sharding, ShardingConfig};
use shardik_runtime::transport::TransportConfig;
use shardik_runtime::{ControlCommand, MembershipSnapshot, NodeHandle, UnreachableMember};
use tokio::sync::{mpsc, oneshot, watch};

const BIG_UID: u64 = 18_000_000_000_000_000_001;

fn ua(port: u16, uid: u64) -> UniqueAddress {
    UniqueAddress::new(Address::new("127.0.0.1", port), uid)
}

fn member(port: u16, uid: u64, status: MemberStatus, roles: &[&str], up: u32) -> Member {
    let roles: BTreeSet<String> = roles.iter().map(|r| r.to_string()).collect();
    let mut m = Member::joining(ua(port, uid), roles, "1.0.0");
    m.status = status;
    m.up_number = up;
    m
}

/// Three members, 2553 unreachable from the other two; 2554 is a member whose commands the
/// fake node refuses in various ways (see `respond`).
fn snapshot(self_status: Option<MemberStatus>) -> MembershipSnapshot {
    let mut oldest_per_role = BTreeMap::new();
    oldest_per_role.insert("backend".to_string(), ua(2551, 1));
    let mut snapshot = MembershipSnapshot::not_joined(ua(2551, 1));
    snapshot.self_status = self_status;
    snapshot.leader = Some(ua(2551, 1));
    snapshot.oldest = Some(ua(2551, 1));
    snapshot.oldest_per_role = oldest_per_role;
    snapshot.members = vec![
        member(2551, 1, MemberStatus::Up, &["backend", "api"], 1),
        member(2552, 2, MemberStatus::Up, &[], 2),
        member(2553, BIG_UID, MemberStatus::Up, &["backend"], 3),
    ];
    snapshot.unreachable = vec![UnreachableMember {
        node: ua(2553, BIG_UID),
        observed_by: vec![ua(2551, 1), ua(2552, 2)],
    }];
    snapshot
}

#[derive(Clone, Debug, PartialEq)]
enum Call {
    Join(Address),
    Leave(Address),
    Down(Address),
    PrepareForFullClusterShutdown,
}

struct Fake {
    base: String,
    calls: Arc<Mutex<Vec<Call>>>,
    snapshot: watch::Sender<Arc<MembershipSnapshot>>,
    client: reqwest::Client,
    _shutdown: oneshot::Sender<()>,
}

/// The fake node's answers: port 2552 is refused as not a member of the node's view
/// (`UnknownMember`), 2553 with another refusal, 2551 has its reply dropped (the node
/// stopped); everything else succeeds.
fn respond(address: &Address, reply: oneshot::Sender<Result<(), CommandError>>) {
    match address.port {
        2552 => {
            let _ = reply.send(Err(CommandError::UnknownMember(address.clone())));
        }
        2553 => {
            let _ = reply.send(Err(CommandError::NotAMember));
        }
        2551 => drop(reply),
        _ => {
            let _ = reply.send(Ok(()));
        }
    }
}

async fn start(
    snap: MembershipSnapshot,
    read_only: bool,
    metrics: Option<shardik_metrics::MetricsHandle>,
) -> Fake {
    let (snap_tx, snap_rx) = watch::channel(Arc::new(snap));
    let (cmd_tx, mut cmd_rx) = mpsc::channel::<ControlCommand>(16);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let recorded = calls.clone();
    tokio::spawn(async move {
        while let Some(cmd) = cmd_rx.recv().await {
            match cmd {
                ControlCommand::Join(a, reply) => {
                    recorded.lock().unwrap().push(Call::Join(a.clone()));
                    // 2554: the node already joined a cluster.
                    let _ = reply.send(if a.port == 2554 {
                        Err(CommandError::AlreadyJoining)
                    } else {
                        Ok(())
                    });
                }
                ControlCommand::Leave(a, reply) => {
                    recorded.lock().unwrap().push(Call::Leave(a.clone()));
                    respond(&a, reply);
                }
                ControlCommand::Down(a, reply) => {
                    recorded.lock().unwrap().push(Call::Down(a.clone()));
                    respond(&a, reply);
                }
                ControlCommand::PrepareForFullClusterShutdown(reply) => {
                    recorded
                        .lock()
                        .unwrap()
                        .push(Call::PrepareForFullClusterShutdown);
                    let _ = reply.send(Ok(()));
                }
                // No management route joins through seed nodes (cluster bootstrap does).
                ControlCommand::JoinSeedNodes(_, reply) => {
                    let _ = reply.send(Err(CommandError::NoSeeds));
                }
            }
        }
    });
    let handle = NodeHandle::new(snap_rx, cmd_tx);
    let router = http::router(handle, metrics, read_only, None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    tokio::spawn(http::serve(listener, router, async {
        let _ = shutdown_rx.await;
    }));
    Fake {
        base,
        calls,
        snapshot: snap_tx,
        client: reqwest::Client::new(),
        _shutdown: shutdown_tx,
    }
}

impl Fake {
    /// The same requests as against a real node's API.
    fn api(&self) -> Api {
        Api {
            base: self.base.clone(),
            client: self.client.clone(),
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.api().get(path).await
    }

    async fn put_form(&self, path: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
        self.api().send_form(reqwest::Method::PUT, path, form).await
    }

    async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
        self.api().post_form(path, form).await
    }

    async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .client
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap())
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

fn message(v: &Value) -> &str {
    v["message"].as_str().expect("error bodies have a message")
}

#[tokio::test]
async fn members_lists_the_cluster_in_akka_management_shape() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f.get("/cluster/members").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["selfNode"], "127.0.0.1:2551");
    assert_eq!(v["leader"], "127.0.0.1:2551");
    assert_eq!(v["oldest"], "127.0.0.1:2551");
    assert_eq!(v["oldestPerRole"]["backend"], "127.0.0.1:2551");
    let members = v["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    assert_eq!(members[0]["node"], "127.0.0.1:2551");
    assert_eq!(members[0]["nodeUid"], "1");
    assert_eq!(members[0]["status"], "Up");
    assert_eq!(members[0]["roles"], serde_json::json!(["api", "backend"]));
    // Uids are decimal strings, exact even beyond 2^53.
    assert_eq!(members[2]["nodeUid"], BIG_UID.to_string());
    let unreachable = v["unreachable"].as_array().unwrap();
    assert_eq!(unreachable.len(), 1);
    assert_eq!(unreachable[0]["node"], "127.0.0.1:2553");
    assert_eq!(
        unreachable[0]["observedBy"],
        serde_json::json!(["127.0.0.1:2551", "127.0.0.1:2552"])
    );
}

#[tokio::test]
async fn leader_and_oldest_are_null_when_unknown() {
    let f = start(MembershipSnapshot::not_joined(ua(2551, 1)), false, None).await;
    let (status, v) = f.get("/cluster/members").await;
    assert_eq!(status, StatusCode::OK);
    assert!(v["leader"].is_null());
    assert!(v["oldest"].is_null());
    assert_eq!(v["members"], serde_json::json!([]));
    assert_eq!(v["oldestPerRole"], serde_json::json!({}));
}

#[tokio::test]
async fn one_member_or_404_or_400() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f.get("/cluster/members/127.0.0.1:2552").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["node"], "127.0.0.1:2552");
    assert_eq!(v["nodeUid"], "2");
    assert_eq!(v["status"], "Up");
    assert_eq!(v["roles"], serde_json::json!([]));

    let (status, v) = f.get("/cluster/members/127.0.0.1:9999").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(message(&v), "Member [127.0.0.1:9999] not found");

    let (status, v) = f.get("/cluster/members/not-an-address").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("host:port"), "{v}");
}

#[tokio::test]
async fn put_leave_and_down_reach_the_node() {
    let mut snap = snapshot(Some(MemberStatus::Up));
    snap.members
        .push(member(2560, 60, MemberStatus::Up, &[], 4));
    let f = start(snap, false, None).await;

    let (status, v) = f
        .put_form("/cluster/members/127.0.0.1:2560", &[("operation", "Leave")])
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(message(&v), "Leaving 127.0.0.1:2560");

    // Case-insensitive, as Akka Management.
    let (status, v) = f
        .put_form("/cluster/members/127.0.0.1:2560", &[("operation", "down")])
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(message(&v), "Downing 127.0.0.1:2560");

    let (status, v) = f.delete("/cluster/members/127.0.0.1:2560").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(message(&v), "Leaving 127.0.0.1:2560");

    let a = Address::new("127.0.0.1", 2560);
    assert_eq!(
        f.calls(),
        vec![
            Call::Leave(a.clone()),
            Call::Down(a.clone()),
            Call::Leave(a)
        ]
    );
}

#[tokio::test]
async fn put_with_bad_or_missing_operation_is_400() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f
        .put_form(
            "/cluster/members/127.0.0.1:2552",
            &[("operation", "Explode")],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("Explode"), "{v}");
    assert!(message(&v).contains("`Leave` or `Down`"), "{v}");

    let (status, v) = f.put_form("/cluster/members/127.0.0.1:2552", &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("`Leave` or `Down`"), "{v}");
    assert!(f.calls().is_empty());
}

#[tokio::test]
async fn put_cluster_prepares_for_a_full_shutdown_and_refuses_other_operations() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f
        .put_form(
            "/cluster",
            &[("operation", "PrepareForFullClusterShutdown")],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        serde_json::json!({"message": "Preparing for full cluster shutdown"})
    );
    let (status, v) = f.put_form("/cluster", &[("operation", "Leave")]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("[Leave]"), "{v}");
    assert!(
        message(&v).contains("`PrepareForFullClusterShutdown`"),
        "{v}"
    );
    let (status, v) = f.put_form("/cluster", &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("missing operation"), "{v}");
    assert_eq!(f.calls(), vec![Call::PrepareForFullClusterShutdown]);

    // A write: refused in read-only mode, before the node is asked.
    let ro = start(snapshot(Some(MemberStatus::Up)), true, None).await;
    let (status, v) = ro
        .put_form(
            "/cluster",
            &[("operation", "PrepareForFullClusterShutdown")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        message(&v).contains("management.http.route-providers-read-only"),
        "{v}"
    );
    assert!(ro.calls().is_empty());
}

#[tokio::test]
async fn put_and_delete_unknown_or_malformed_addresses() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f
        .put_form("/cluster/members/10.1.1.1:1", &[("operation", "Down")])
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(message(&v), "Member [10.1.1.1:1] not found");

    let (status, v) = f.delete("/cluster/members/10.1.1.1:1").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(message(&v), "Member [10.1.1.1:1] not found");

    let (status, v) = f
        .put_form("/cluster/members/hostwithoutport", &[("operation", "Down")])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("malformed member address"), "{v}");

    let (status, v) = f.delete("/cluster/members/host:notaport").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("host:port"), "{v}");
    assert!(f.calls().is_empty());
}

#[tokio::test]
async fn node_errors_map_to_status_codes() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    // The node itself does not know the member: 404.
    let (status, v) = f
        .put_form("/cluster/members/127.0.0.1:2552", &[("operation", "Down")])
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(message(&v), "Member [127.0.0.1:2552] not found");
    // Another refusal: 409.
    let (status, v) = f
        .put_form("/cluster/members/127.0.0.1:2553", &[("operation", "Down")])
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(message(&v).contains("not a member"), "{v}");
    // The node went away without answering: 503.
    let (status, v) = f.delete("/cluster/members/127.0.0.1:2551").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(message(&v).contains("shutting down"), "{v}");
    assert_eq!(f.calls().len(), 3);
}

#[tokio::test]
async fn post_members_asks_the_node_to_join() {
    let f = start(snapshot(None), false, None).await;
    let (status, v) = f
        .post_form("/cluster/members", &[("address", "10.0.0.5:2552")])
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(message(&v), "Joining 10.0.0.5:2552");
    assert_eq!(f.calls(), vec![Call::Join(Address::new("10.0.0.5", 2552))]);
}

#[tokio::test]
async fn post_members_refuses_bad_input_and_a_second_join() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f.post_form("/cluster/members", &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&v).contains("missing form field `address`"), "{v}");
    assert!(message(&v).contains("host:port"), "{v}");
    for bad in ["nohost", "host:notaport", ""] {
        let (status, v) = f.post_form("/cluster/members", &[("address", bad)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {v}");
        assert!(
            message(&v).contains(&format!("malformed address [{bad}]")),
            "{v}"
        );
    }
    assert!(f.calls().is_empty());
    // The node refuses because it already joined: 409 with what to do instead.
    let (status, v) = f
        .post_form("/cluster/members", &[("address", "127.0.0.1:2554")])
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(message(&v).contains("already joined"), "{v}");
    assert!(message(&v).contains("it is Up"), "{v}");
    assert!(message(&v).contains("leave"), "{v}");
}

#[tokio::test]
async fn read_only_mode_refuses_state_changes() {
    let f = start(snapshot(Some(MemberStatus::Up)), true, None).await;
    let (status, v) = f
        .put_form("/cluster/members/127.0.0.1:2552", &[("operation", "Down")])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        message(&v).contains("management.http.route-providers-read-only"),
        "{v}"
    );
    let (status, v) = f.delete("/cluster/members/127.0.0.1:2552").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(message(&v).contains("disabled"), "{v}");
    // Refused before the address is even read.
    let (status, _) = f.delete("/cluster/members/not-an-address").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, v) = f
        .post_form("/cluster/members", &[("address", "127.0.0.1:2552")])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(message(&v).contains("join"), "{v}");
    assert!(f.calls().is_empty());
    // Reading still works.
    let (status, _) = f.get("/cluster/members").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn ready_follows_self_status_and_alive_always_answers() {
    let f = start(snapshot(Some(MemberStatus::Joining)), false, None).await;
    let (status, v) = f.get("/ready").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(message(&v).contains("Joining"), "{v}");
    let (status, v) = f.get("/alive").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["status"], "alive");

    f.snapshot
        .send(Arc::new(snapshot(Some(MemberStatus::WeaklyUp))))
        .unwrap();
    let (status, v) = f.get("/ready").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["status"], "ready");

    f.snapshot
        .send(Arc::new(snapshot(Some(MemberStatus::Up))))
        .unwrap();
    assert_eq!(f.get("/ready").await.0, StatusCode::OK);

    f.snapshot
        .send(Arc::new(MembershipSnapshot::not_joined(ua(2551, 1))))
        .unwrap();
    assert_eq!(f.get("/ready").await.0, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn shards_route_exists_but_has_no_region_yet() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f.get("/cluster/shards/counter").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        message(&v),
        "no shard region for entity type [counter] on this node: the application never \
         called sharding().init for it here"
    );
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_json() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f.get("/cluster/nodes").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(message(&v).contains("/cluster/nodes"), "{v}");

    let (status, v) = f.delete("/cluster/members").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(message(&v).contains("DELETE"), "{v}");
}

#[tokio::test]
async fn metrics_are_prometheus_text_or_404() {
    let f = start(snapshot(Some(MemberStatus::Up)), false, None).await;
    let (status, v) = f.get("/metrics").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(message(&v).contains("metrics"), "{v}");

    let handle = Metrics::install().unwrap();
    // A second install shares the first recorder instead of failing.
    Metrics::install().unwrap();
    metrics::counter!(shardik_metrics::GOSSIP_RECEIVED_TOTAL).increment(3);
    metrics::gauge!(shardik_metrics::MEMBERS, "status" => "Up").set(3.0);
    let f = start(snapshot(Some(MemberStatus::Up)), false, Some(handle)).await;
    let r = f
        .client
        .get(format!("{}/metrics", f.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        PROMETHEUS_CONTENT_TYPE
    );
    let body = r.text().await.unwrap();
    assert!(body.contains("shardik_gossip_received_total 3"), "{body}");
    assert!(body.contains("shardik_members{status=\"Up\"} 3"), "{body}");
    assert!(
        body.contains("# HELP shardik_gossip_received_total"),
        "{body}"
    );
}

#[test]
fn metric_names_follow_prometheus_conventions() {
    for name in shardik_metrics::ALL_NAMES {
        assert!(name.starts_with("shardik_"), "{name}");
        assert!(
            name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name}"
        );
    }
    let unique: BTreeSet<_> = shardik_metrics::ALL_NAMES.iter().collect();
    assert_eq!(unique.len(), shardik_metrics::ALL_NAMES.len());
}

// ---- real nodes ----

fn free_port() -> u16 {
    shardik_runtime::testkit::free_port().expect("a free loopback port")
}

fn local(port: u16) -> Address {
    Address::new("127.0.0.1", port)
}

/// A client of one management API.
struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap())
    }

    async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
        self.send_form(reqwest::Method::POST, path, form).await
    }

    async fn send_form(
        &self,
        method: reqwest::Method,
        path: &str,
        form: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let r = self
            .client
            .request(method, format!("{}{path}", self.base))
            .form(form)
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap())
    }

    /// GETs `path` until `done` holds for the answer (at most 20 s), and returns that answer.
    async fn poll(
        &self,
        path: &str,
        what: &str,
        done: impl Fn(StatusCode, &Value) -> bool,
    ) -> (StatusCode, Value) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (status, v) = self.get(path).await;
            if done(status, &v) {
                return (status, v);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: last answer {status} {v}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A real node (loopback TCP) with sharding and its management API.
struct RealNode {
    running: RunningNode,
    sharding: Sharding,
    api: Api,
    _shutdown: oneshot::Sender<()>,
}

/// Starts a node at `port` joining `seeds`, with sharding and a management API that
/// `configure` sets up beyond the node's handle and sharding.
async fn real_node(
    port: u16,
    seeds: Vec<Address>,
    configure: impl FnOnce(http::ManagementApi) -> http::ManagementApi,
) -> RealNode {
    let running = node::start(NodeOptions {
        bind: local(port),
        advertise: None,
        seeds,
        membership: MembershipConfig {
            cluster_name: "http-test".into(),
            seed_node_timeout: Duration::from_millis(500),
            periodic_tasks_initial_delay: Duration::from_millis(100),
            gossip_interval: Duration::from_millis(200),
            leader_actions_interval: Duration::from_millis(200),
            ..MembershipConfig::default()
        },
        transport: TransportConfig::default(),
        leave_timeout: Duration::from_secs(10),
    })
    .await
    .expect("node starts");
    let mut config = ShardingConfig {
        number_of_shards: 20,
        ..ShardingConfig::default()
    };
    config.region.retry_interval = Duration::from_millis(200);
    let sharding = Sharding::start(&running, config).expect("sharding starts");
    let router =
        configure(http::ManagementApi::new(running.handle.clone()).sharding(sharding.clone()))
            .router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    tokio::spawn(http::serve(listener, router, async {
        let _ = shutdown_rx.await;
    }));
    RealNode {
        running,
        sharding,
        api: Api {
            base,
            client: reqwest::Client::new(),
        },
        _shutdown: shutdown_tx,
    }
}

fn health(names: &[&str], disabled_after: Duration) -> ShardingHealthCheckSettings {
    let mut settings = Settings::reference().cluster.sharding.healthcheck;
    settings.names = names.iter().map(|n| n.to_string()).collect();
    settings.timeout = Duration::from_secs(2);
    settings.disabled_after = disabled_after;
    settings
}

fn not_ready_kinds(v: &Value) -> Vec<String> {
    v["notReadyKinds"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|k| k["kind"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_waits_until_every_named_kind_is_registered_with_its_coordinator() {
    let port = free_port();
    let n = real_node(port, vec![local(port)], |api| {
        api.sharding_health_check(health(&["counter", "cart"], Duration::from_secs(600)))
    })
    .await;
    n.sharding.init(counter_kind()).expect("counter registers");

    // Up, with the counter region registered: only `cart`, which this node does not run,
    // keeps it unready, and the answer says so.
    let (status, v) = n
        .api
        .poll("/ready", "only cart not ready", |status, v| {
            status == StatusCode::SERVICE_UNAVAILABLE && not_ready_kinds(v) == ["cart"]
        })
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["status"], "not-ready");
    assert!(
        v["notReadyKinds"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("not initialized here"),
        "{v}"
    );
    assert!(message(&v).contains("[cart]"), "{v}");
    assert_eq!(
        n.running.handle.snapshot().self_status,
        Some(MemberStatus::Up)
    );

    // Once `cart` runs here and its region has registered, the node is ready.
    n.sharding
        .init(EntityKind::new("cart", |_| Counter::default()))
        .expect("cart registers");
    let (_, v) = n
        .api
        .poll("/ready", "ready once cart registers", |status, _| {
            status == StatusCode::OK
        })
        .await;
    assert_eq!(v["status"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_stops_waiting_for_sharding_after_disabled_after() {
    let port = free_port();
    let disabled_after = Duration::from_secs(1);
    let n = real_node(port, vec![local(port)], |api| {
        api.sharding_health_check(health(&["never"], disabled_after))
    })
    .await;
    n.sharding.init(counter_kind()).expect("counter registers");
    // The node is Up but `never` is not a kind it runs: not ready...
    n.api
        .poll("/ready", "Up but waiting for `never`", |status, v| {
            status == StatusCode::SERVICE_UNAVAILABLE && not_ready_kinds(v) == ["never"]
        })
        .await;
    let first_seen_up = tokio::time::Instant::now();
    // ...until `disabled-after` has passed since the check first saw it Up.
    let (_, v) = n
        .api
        .poll("/ready", "ready after disabled-after", |status, _| {
            status == StatusCode::OK
        })
        .await;
    assert_eq!(v["status"], "ready");
    // The check's clock started at the first check that saw the node Up, at most one poll
    // before `first_seen_up`: so nearly all of `disabled-after` must have passed since.
    assert!(
        first_seen_up.elapsed() >= disabled_after / 2,
        "passed after {:?}",
        first_seen_up.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_route_waits_for_regions_as_long_as_the_query_timeout_says() {
    let (pa, pb) = (free_port(), free_port());
    let query_timeout = Duration::from_millis(300);
    let a = real_node(pa, vec![local(pa)], |api| {
        api.shard_region_query_timeout(query_timeout)
    })
    .await;
    a.sharding.init(counter_kind()).expect("counter registers");
    // B is a member without sharding: it never answers a statistics request.
    let b = node::start(NodeOptions {
        bind: local(pb),
        advertise: None,
        seeds: vec![local(pa)],
        membership: MembershipConfig {
            cluster_name: "http-test".into(),
            periodic_tasks_initial_delay: Duration::from_millis(100),
            gossip_interval: Duration::from_millis(200),
            leader_actions_interval: Duration::from_millis(200),
            ..MembershipConfig::default()
        },
        transport: TransportConfig::default(),
        leave_timeout: Duration::from_secs(10),
    })
    .await
    .expect("node starts");
    a.api
        .poll("/cluster/members", "two members Up", |_, v| {
            v["members"]
                .as_array()
                .is_some_and(|m| m.iter().filter(|m| m["status"] == "Up").count() == 2)
        })
        .await;

    let started = tokio::time::Instant::now();
    let (status, v) = a.api.get("/cluster/shards/counter").await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["selfNode"], local(pa).to_string(), "{v}");
    assert_eq!(
        v["cluster"]["failed"],
        serde_json::json!([local(pb).to_string()]),
        "{v}"
    );
    // It waited the 300 ms configured for B, not the reference default (and the old
    // hard-coded value) of 3 s.
    assert!(
        took >= query_timeout && took < Duration::from_secs(2),
        "answered after {took:?}"
    );
    drop(b);
}

fn up_members(v: &Value) -> Vec<String> {
    v["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["status"] == "Up")
                .map(|m| m["node"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_without_seeds_form_a_cluster_through_post_members() {
    let (pa, pb) = (free_port(), free_port());
    // Joining is a state-changing route: enabled here (read-only by default).
    let a = real_node(pa, Vec::new(), |api| api.read_only(false)).await;
    let b = real_node(pb, Vec::new(), |api| api.read_only(false)).await;
    for n in [&a, &b] {
        let (_, v) = n.api.get("/cluster/members").await;
        assert_eq!(
            v["members"],
            serde_json::json!([]),
            "no seeds, no cluster: {v}"
        );
    }
    let a_addr = local(pa).to_string();

    // A joins itself: a new cluster. B joins through A.
    let (status, v) = a
        .api
        .post_form("/cluster/members", &[("address", &a_addr)])
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(message(&v), format!("Joining {a_addr}"));
    let (status, v) = b
        .api
        .post_form("/cluster/members", &[("address", &a_addr)])
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(message(&v), format!("Joining {a_addr}"));

    let both = {
        let mut both = vec![a_addr.clone(), local(pb).to_string()];
        both.sort();
        both
    };
    for n in [&a, &b] {
        n.api
            .poll("/cluster/members", "both members Up", |_, v| {
                let mut up = up_members(v);
                up.sort();
                up == both
            })
            .await;
    }
    assert_eq!(
        b.running.handle.snapshot().self_status,
        Some(MemberStatus::Up)
    );

    // A member does not join again.
    let (status, v) = b
        .api
        .post_form("/cluster/members", &[("address", &a_addr)])
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    assert!(message(&v).contains("already joined"), "{v}");
}

/// A small entity for the sharding routes: a number per id.
#[derive(Debug, Default)]
struct Counter(u64);

impl shardik_runtime::sharding::Entity for Counter {
    type Command = ();

    async fn handle(&mut self, _: (), _: &mut shardik_runtime::sharding::EntityContext<Self>) {
        self.0 += 1;
    }
}

fn counter_kind() -> EntityKind<Counter> {
    EntityKind::new("counter", |_| Counter::default())
}

#[tokio::test]
async fn bootstrap_seed_nodes_lists_reachable_members_that_can_take_a_join() {
    // 2553 is unreachable; add a Leaving member and more Up and Joining ones than are shown.
    let mut snap = snapshot(Some(MemberStatus::Up));
    snap.members
        .push(member(2554, 4, MemberStatus::Leaving, &[], 4));
    for port in 2555..2560 {
        let status = if port % 2 == 0 {
            MemberStatus::Joining
        } else {
            MemberStatus::Up
        };
        snap.members
            .push(member(port, u64::from(port), status, &["api"], 5));
    }
    let f = start(snap, true, None).await;
    let (status, v) = f.get("/bootstrap/seed-nodes").await;
    assert_eq!(status, StatusCode::OK, "read-only API still answers: {v}");
    assert_eq!(v["selfNode"], "127.0.0.1:2551");
    let nodes: Vec<&str> = v["seedNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["node"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        [
            "127.0.0.1:2551",
            "127.0.0.1:2552",
            "127.0.0.1:2555",
            "127.0.0.1:2556",
            "127.0.0.1:2557"
        ],
        "at most five, lowest first, no unreachable or Leaving member: {v}"
    );
    assert_eq!(v["seedNodes"][0]["nodeUid"], "1");
    assert_eq!(v["seedNodes"][0]["status"], "Up");
    assert_eq!(v["seedNodes"][3]["status"], "Joining");

    // A node in no cluster lists nobody.
    let mut alone = snapshot(None);
    alone.members.clear();
    alone.unreachable.clear();
    let f = start(alone, true, None).await;
    let (_, v) = f.get("/bootstrap/seed-nodes").await;
    assert_eq!(v["seedNodes"].as_array().map(Vec::len), Some(0), "{v}");
}
