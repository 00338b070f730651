//! `NodeBuilder::management()` and `Node::merge_routes`: a node serves Akka Management's
//! routes from the moment it is started, the application's routes beside them once given
//! (counted under their own route in the request metrics), and a port already in use stops
//! the node before it joins.

mod common;

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use common::{BOUND, free_port};
use shardik_core::membership::Address;
use shardik_runtime::config::Settings;
use shardik_runtime::node::StartError;
use shardik_runtime::{NoManagementApi, Node};

fn settings(management_port: u16) -> Settings {
    let mut settings = Settings::from_toml_str(
        r#"
        [cluster]
        seed-node-timeout = "500ms"
        periodic-tasks-initial-delay = "100ms"
        gossip-interval = "200ms"
        leader-actions-interval = "200ms"
        "#,
    )
    .expect("settings");
    settings.management.http.hostname = "127.0.0.1".to_string();
    settings.management.http.port = management_port;
    settings
}

async fn get_status(http: &reqwest::Client, url: &str) -> Result<(u16, String), String> {
    let resp = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp.text().await.map_err(|e| e.to_string())?;
    Ok((status, body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_management_api_serves_at_start_and_the_applications_routes_once_merged() {
    let (port, mgmt) = (free_port(), free_port());
    let me = Address::new("127.0.0.1", port);
    let node = Node::builder(settings(mgmt))
        .bind(me.clone())
        .seeds([me])
        .metrics()
        .management()
        .start()
        .await
        .expect("node starts");
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{mgmt}");

    // Served as soon as start() returned: the liveness probe, and the API's JSON 404 for a
    // route the application has not given yet.
    let (status, _) = get_status(&http, &format!("{base}/alive")).await.unwrap();
    assert_eq!(status, 200);
    let (status, body) = get_status(&http, &format!("{base}/app/greeting"))
        .await
        .unwrap();
    assert_eq!(status, 404);
    assert!(body.contains("no route for /app/greeting"), "{body}");

    // The application's routes, given later, answer beside the API's.
    node.merge_routes(Router::new().route("/app/greeting", get(|| async { "hello" })))
        .unwrap();
    node.merge_routes(Router::new().route("/app/{name}/count", get(|| async { "7" })))
        .unwrap();
    let (status, body) = get_status(&http, &format!("{base}/app/greeting"))
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, "hello"));
    let (status, body) = get_status(&http, &format!("{base}/app/x/count"))
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, "7"));
    // The API's own routes still win and still answer.
    node.wait_until_up().await.expect("up");
    let (status, _) = get_status(&http, &format!("{base}/ready")).await.unwrap();
    assert_eq!(status, 200);

    // Each application route is counted under its template, not as unmatched.
    let counted = |text: &str, route: &str| {
        text.lines().any(|l| {
            l.starts_with("shardik_http_requests_total")
                && l.contains(&format!("route=\"{route}\""))
                && l.contains("status=\"200\"")
        })
    };
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let (_, text) = get_status(&http, &format!("{base}/metrics")).await.unwrap();
        if counted(&text, "/app/greeting") && counted(&text, "/app/{name}/count") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the application's routes are not counted by route:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(node.write_guard().is_some());

    // The node leaves; its management port stops with it.
    let reason = tokio::time::timeout(Duration::from_secs(30), node.leave())
        .await
        .expect("left in time");
    assert_eq!(reason.exit_code(), 0);
    let gone = http.get(format!("{base}/alive")).send().await;
    assert!(gone.is_err(), "the port is closed once the node stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_management_port_in_use_stops_the_node_before_it_joins_and_routes_need_management() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mgmt = taken.local_addr().unwrap().port();
    let port = free_port();
    let me = Address::new("127.0.0.1", port);
    let err = Node::builder(settings(mgmt))
        .bind(me.clone())
        .seeds([me.clone()])
        .management()
        .start()
        .await
        .expect_err("the port is taken");
    assert!(matches!(err, StartError::Management(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{mgmt}")) && text.contains("management.http.port"),
        "{text}"
    );
    // Nothing was bound for the cluster: the same cluster port is free again.
    std::net::TcpListener::bind(("127.0.0.1", port)).expect("the cluster port was never bound");

    // Without management(), merge_routes says so.
    let node = Node::builder(settings(free_port()))
        .bind(me.clone())
        .seeds([me])
        .start()
        .await
        .expect("node starts");
    assert_eq!(
        node.merge_routes(Router::new().route("/x", get(|| async { "x" }))),
        Err(NoManagementApi)
    );
    assert!(node.write_guard().is_none());
    let _ = tokio::time::timeout(Duration::from_secs(30), node.leave()).await;
}
