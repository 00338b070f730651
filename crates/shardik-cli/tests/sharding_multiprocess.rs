//! Sharding across real `shardik node --demo-counters` processes over loopback: counters are
//! created on first use, live on exactly one node, answer through every node, and are re-homed
//! when their node is killed or leaves.

mod support;

use std::collections::BTreeMap;

use serde_json::Value;
use support::*;

/// Sharding timers shortened like the membership ones in `support::FAST`.
const SHARDING_FAST: &[(&str, &str)] = &[
    ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "50"),
    ("SHARDIK_CLUSTER__SHARDING__RETRY_INTERVAL", "300ms"),
    ("SHARDIK_CLUSTER__SHARDING__REBALANCE_INTERVAL", "1s"),
    ("SHARDIK_CLUSTER__SHARDING__HANDOFF_TIMEOUT", "10s"),
];

async fn counter_cluster(http: &reqwest::Client, prefix: &str, n: usize) -> Vec<Node> {
    counter_cluster_with(http, prefix, n, &[]).await
}

/// As [`counter_cluster`], with further configuration from environment variables.
async fn counter_cluster_with(
    http: &reqwest::Client,
    prefix: &str,
    n: usize,
    extra: &[(&str, &str)],
) -> Vec<Node> {
    let env: Vec<(&str, &str)> = SHARDING_FAST.iter().chain(extra).copied().collect();
    // Every cluster has a store of its own: the counters start from zero.
    let store = fresh_sqlite_store(prefix);
    let args = ["--demo-counters", "--store", &store];
    let mut nodes = start_cluster_with_args(http, prefix, n, &env, &args).await;
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    // Every region must be known to the coordinator before the first counter is touched;
    // otherwise shards allocated meanwhile all land on the regions that registered first and
    // the tests' placement assumptions (every node hosts some counters) race registration.
    let mgmt: Vec<String> = refs.iter().map(|n| n.spec.management.clone()).collect();
    eventually(
        "every region is registered with the coordinator",
        BOUND,
        &mut refs,
        || {
            let mgmt = &mgmt;
            async move {
                for m in mgmt {
                    let v = counter_shards(http, m).await?;
                    if v["registered"] != Value::Bool(true) {
                        return Err(format!("{m} not registered yet: {v}"));
                    }
                }
                Ok(())
            }
        },
    )
    .await;
    nodes
}

/// `POST .../increment` or `GET` of counter `id` through the node at `management`.
async fn counter(
    http: &reqwest::Client,
    management: &str,
    id: &str,
    increment: bool,
) -> Result<(u64, String), String> {
    let url = if increment {
        format!("http://{management}/demo/counter/{id}/increment")
    } else {
        format!("http://{management}/demo/counter/{id}")
    };
    let req = if increment {
        http.post(url)
    } else {
        http.get(url)
    };
    let resp = req.send().await.map_err(|e| format!("{management}: {e}"))?;
    let status = resp.status().as_u16();
    let body: Value = resp
        .json()
        .await
        .map_err(|e| format!("{management}: {e}"))?;
    if status != 200 {
        return Err(format!("{management} {id}: {status} {body}"));
    }
    assert_eq!(body["id"], id, "{body}");
    Ok((
        body["value"].as_u64().ok_or("no value")?,
        body["node"].as_str().ok_or("no node")?.to_string(),
    ))
}

/// Increments each counter of `ids` once through `management`, retrying until every one has
/// answered; returns each counter's answer (its value and the node that ran it).
async fn increment_each(
    http: &reqwest::Client,
    nodes: &mut [Node],
    management: &str,
    ids: &[String],
) -> BTreeMap<String, (u64, String)> {
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let found = std::sync::Mutex::new(BTreeMap::new());
    eventually(
        "every counter answers an increment",
        BOUND,
        &mut refs,
        || {
            let found = &found;
            async move {
                for id in ids {
                    if found.lock().unwrap().contains_key(id) {
                        continue;
                    }
                    let answer = counter(http, management, id, true).await?;
                    found.lock().unwrap().insert(id.clone(), answer);
                }
                Ok(())
            }
        },
    )
    .await;
    found.into_inner().unwrap()
}

fn ids(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("c{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_live_on_one_node_and_answer_through_all() {
    let http = client();
    let mut nodes = counter_cluster(&http, "count", 3).await;
    let mgmt: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let ids = ids(90);
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    // The first increments may meet regions that are still registering; retry until each
    // answers, then never again.
    eventually(
        "every counter answers an increment",
        BOUND,
        &mut refs,
        || {
            let (http, mgmt, ids) = (&http, &mgmt, &ids);
            async move {
                for (i, id) in ids.iter().enumerate() {
                    let (v, _) = counter(http, &mgmt[i % 3], id, false).await?;
                    if v == 0 {
                        counter(http, &mgmt[i % 3], id, true).await?;
                    }
                }
                Ok(())
            }
        },
    )
    .await;
    // Every node sees the same value and the same home for every counter.
    let mut homes: BTreeMap<String, String> = BTreeMap::new();
    for id in &ids {
        let mut seen = Vec::new();
        for m in &mgmt {
            seen.push(counter(&http, m, id, false).await.expect("answers"));
        }
        assert!(seen.iter().all(|s| *s == seen[0]), "{id}: {seen:?}");
        assert_eq!(seen[0].0, 1, "{id}: incremented once");
        assert!(addrs.contains(&seen[0].1));
        homes.insert(id.clone(), seen[0].1.clone());
    }
    let used: std::collections::BTreeSet<&String> = homes.values().collect();
    assert_eq!(used.len(), 3, "counters spread over the three nodes");

    // The management API reports the same placement, cluster-wide and per node.
    let v = counter_shards(&http, &mgmt[0]).await.expect("shards");
    assert_eq!(v["cluster"]["failed"], serde_json::json!([]), "{v}");
    let regions = v["cluster"]["regions"].as_array().expect("regions");
    assert_eq!(regions.len(), 3, "{v}");
    let total: u64 = regions
        .iter()
        .flat_map(|r| r["shards"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["numEntities"].as_u64())
        .sum();
    assert_eq!(total, ids.len() as u64, "{v}");
    let per_node = live_counter_ids(&http, &mgmt).await;
    for (node, listed) in addrs.iter().zip(&per_node) {
        let expected: Vec<&String> = homes
            .iter()
            .filter(|(_, h)| *h == node)
            .map(|(id, _)| id)
            .collect();
        assert_eq!(listed.len(), expected.len(), "{node}: {listed:?}");
        assert!(
            listed.iter().all(|id| homes[id] == *node),
            "{node}: {listed:?}"
        );
    }
    // An unknown entity type is a clear 404.
    let s = http
        .get(format!("http://{}/cluster/shards/nothing", mgmt[1]))
        .send()
        .await
        .expect("answer")
        .status()
        .as_u16();
    assert_eq!(s, 404);

    // At INFO a node's log tells what changed in the cluster; one line per shard started or
    // per connection accepted is routine, and DEBUG (90 counters over 3 nodes here).
    for node in &nodes {
        let routine = routine_info_lines(&node.stderr());
        assert!(
            routine.is_empty(),
            "{} logs routine lines at INFO:\n{}",
            node.spec.name,
            routine.join("\n")
        );
    }
}

/// The INFO lines of a JSON log that are about one shard or one connection.
fn routine_info_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["level"] == "INFO")
        .filter(|line| {
            let fields = &line["fields"];
            !fields["shard"].is_null()
                || fields["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("accepted connection"))
        })
        .map(|line| line.to_string())
        .collect()
}

/// Kills a node with SIGKILL (`graceful = false`) or stops it with SIGTERM; every counter
/// answers afterwards from a survivor with its value.
async fn stop_one_and_check_rehoming(prefix: &str, graceful: bool) {
    let http = client();
    let mut nodes = counter_cluster(&http, prefix, 3).await;
    let mgmt: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let ids = ids(60);
    let homes: BTreeMap<String, String> = increment_each(&http, &mut nodes, &mgmt[0], &ids)
        .await
        .into_iter()
        .map(|(id, (_, home))| (id, home))
        .collect();
    let mut victim = nodes.remove(2);
    let victim_addr = victim.addr().to_string();
    assert!(
        homes.values().any(|h| *h == victim_addr),
        "the victim hosts some counters"
    );
    if graceful {
        victim.signal("TERM");
        let status = victim.wait_exit(BOUND).await;
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{}",
            victim.report()
        );
        assert_handed_off_before_exit(&victim);
    } else {
        victim.kill9();
    }
    let survivors: Vec<String> = mgmt[..2].to_vec();
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    eventually(
        "every counter answers from a survivor",
        BOUND,
        &mut refs,
        || {
            let (http, survivors, ids, victim) = (&http, &survivors, &ids, &victim_addr);
            async move {
                for (i, id) in ids.iter().enumerate() {
                    let (_, home) = counter(http, &survivors[i % 2], id, false).await?;
                    if home == *victim {
                        return Err(format!("{id} still answered by {victim}"));
                    }
                }
                Ok(())
            }
        },
    )
    .await;
    // Counters are event sourced: moved or not, each keeps its acknowledged increment.
    for id in &ids {
        let (value, _) = counter(&http, &survivors[0], id, false)
            .await
            .expect("answers");
        let moved = homes[id] == victim_addr;
        assert_eq!(value, 1, "{id} keeps its value (moved: {moved})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_rehomes_the_dead_nodes_counters() {
    stop_one_and_check_rehoming("kill", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_off_then_exits_zero() {
    stop_one_and_check_rehoming("term", true).await;
}

/// The node ran its exit tasks (the shard hand-off) and only then confirmed its exit.
fn assert_handed_off_before_exit(node: &Node) {
    let log = node.stderr();
    let ran = log.find("running exit task");
    let done = log.find("exit tasks done");
    assert!(
        log.contains("cluster-sharding-shutdown-region") && ran.is_some() && ran < done,
        "the node handed its shards off before confirming its exit:\n{}",
        node.stderr_tail(40)
    );
}

/// What [`counter`] answers: the value and the node that ran it, or what went wrong.
type CounterAnswer = Result<(u64, String), String>;

/// One acknowledged increment: the counter's value after it and the node that ran it.
#[derive(Debug)]
struct Ack {
    value: u64,
    node: String,
}

/// A leave asked of another node through the management API (not the leaving process's own
/// signal handler) still hands every shard off first: under steady increments, the leaving
/// node exits 0, every counter it hosted answers from a survivor, and no increment is lost:
/// each one is acknowledged, and each counter's acknowledged values count up by one across
/// the move (counters are event sourced: the new home recovers the value) and end where its
/// value ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leave_through_the_management_api_hands_off_and_loses_nothing() {
    let http = client();
    // The leave goes through the management API.
    let mut nodes = counter_cluster_with(&http, "apileave", 3, &[WRITES_ENABLED]).await;
    let mgmt: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let ids = ids(40);
    let mut acks: BTreeMap<String, Vec<Ack>> = increment_each(&http, &mut nodes, &mgmt[0], &ids)
        .await
        .into_iter()
        .map(|(id, (value, node))| (id, vec![Ack { value, node }]))
        .collect();
    let victim_addr = nodes[2].addr().to_string();
    let hosted: Vec<String> = acks
        .iter()
        .filter(|(_, a)| a[0].node == victim_addr)
        .map(|(id, _)| id.clone())
        .collect();
    assert!(!hosted.is_empty(), "the victim hosts some counters");

    // Steady increments through the two nodes that stay, one at a time so that every
    // counter's acknowledgements are in order.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (http, survivors, ids, stop) = (
            http.clone(),
            mgmt[..2].to_vec(),
            ids.clone(),
            std::sync::Arc::clone(&stop),
        );
        tokio::spawn(async move {
            let mut done: Vec<(String, CounterAnswer)> = Vec::new();
            let mut i = 0usize;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let id = &ids[i % ids.len()];
                let result = counter(&http, &survivors[i % 2], id, true).await;
                done.push((id.clone(), result));
                i += 1;
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
            done
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let resp = http
        .put(format!("http://{}/cluster/members/{victim_addr}", mgmt[0]))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("operation=Leave")
        .send()
        .await
        .expect("leave request");
    assert_eq!(resp.status().as_u16(), 200, "leave accepted");
    let mut victim = nodes.remove(2);
    let status = victim.wait_exit(BOUND).await;
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "{}",
        victim.report()
    );
    assert_handed_off_before_exit(&victim);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let done = load.await.expect("load task");
    let failed: Vec<_> = done.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(
        failed.is_empty(),
        "every increment during the leave is acknowledged: {} of {} failed, e.g. {:?}",
        failed.len(),
        done.len(),
        failed.first()
    );
    assert!(done.len() > 100, "steady load: {} increments", done.len());
    for (id, result) in done {
        let (value, node) = result.expect("checked above");
        acks.get_mut(&id)
            .expect("known id")
            .push(Ack { value, node });
    }
    for (id, seq) in &acks {
        for w in seq.windows(2) {
            assert_eq!(
                w[1].value,
                w[0].value + 1,
                "{id}: an increment was lost or applied twice: {seq:?}"
            );
        }
        let last = seq.last().expect("at least one");
        let (value, node) = counter(&http, &mgmt[0], id, false).await.expect("answers");
        assert_ne!(node, victim_addr, "{id} moved off the leaving node");
        assert_eq!(
            value, last.value,
            "{id} ends at its last acknowledged value"
        );
    }
    for id in &hosted {
        let seq = &acks[id];
        assert!(
            seq.iter().any(|a| a.node != victim_addr),
            "{id} was handed off to a survivor: {seq:?}"
        );
    }
}

/// Live counters per node, from each node's own region state.
async fn live_counters(http: &reqwest::Client, mgmt: &[String]) -> Vec<usize> {
    live_counter_ids(http, mgmt)
        .await
        .iter()
        .map(Vec::len)
        .collect()
}

/// `GET /cluster/shards/counter` of the node whose management address is `management`.
async fn counter_shards(http: &reqwest::Client, management: &str) -> Result<Value, String> {
    http.get(format!("http://{management}/cluster/shards/counter"))
        .send()
        .await
        .map_err(|e| format!("{management}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("{management}: {e}"))
}

/// The ids of the live counters of each node, from each node's own region state.
async fn live_counter_ids(http: &reqwest::Client, mgmt: &[String]) -> Vec<Vec<String>> {
    let mut live = Vec::new();
    for m in mgmt {
        let v = counter_shards(http, m).await.expect("shards");
        let ids = v["shards"]
            .as_array()
            .expect("shards")
            .iter()
            .flat_map(|s| s["entityIds"].as_array().cloned().unwrap_or_default())
            .filter_map(|id| id.as_str().map(str::to_string))
            .collect();
        live.push(ids);
    }
    live
}

/// The recommended limit-based strategy, chosen and sized through configuration alone, keeps
/// each node near its active-entity limit while thousands of counters are touched, and every
/// increment is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_entity_limit_from_configuration_bounds_each_node() {
    const LIMIT: usize = 60;
    const SHARDS: usize = 10;
    let http = client();
    let limit = LIMIT.to_string();
    let shards = SHARDS.to_string();
    let mut nodes = counter_cluster_with(
        &http,
        "limit",
        2,
        &[
            ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", &shards),
            (
                "SHARDIK_CLUSTER__SHARDING__PASSIVATION__STRATEGY",
                "default-strategy",
            ),
            (
                "SHARDIK_CLUSTER__SHARDING__PASSIVATION__DEFAULT_STRATEGY__ACTIVE_ENTITY_LIMIT",
                &limit,
            ),
        ],
    )
    .await;
    let mgmt: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let ids = ids(3000);
    // Touch every counter once, alternating the node asked; then read one that was
    // passivated (it recovers its increment from the store).
    let mut most = vec![0; mgmt.len()];
    for (i, id) in ids.iter().enumerate() {
        let (value, _) = counter(&http, &mgmt[i % 2], id, true)
            .await
            .unwrap_or_else(|e| panic!("increment {i} unanswered: {e}\n{}", nodes[0].report()));
        assert_eq!(value, 1, "{id} is touched for the first time");
        if i % 250 == 249 {
            for (m, n) in most.iter_mut().zip(live_counters(&http, &mgmt).await) {
                *m = (*m).max(n);
            }
        }
    }
    let total_live: usize = live_counters(&http, &mgmt).await.iter().sum();
    eprintln!("live counters per node, at most: {most:?}; at the end, in all: {total_live}");
    // The limit is split evenly over each node's active shards (rounded down), and a shard
    // may briefly hold one entity over its share while the one it displaces stops.
    for (node, m) in most.iter().enumerate() {
        assert!(
            *m <= LIMIT + SHARDS,
            "node {node} held {m} live counters, limit {LIMIT}: {most:?}"
        );
        assert!(
            *m >= LIMIT / 2,
            "node {node} used its limit, not far below it: {most:?}"
        );
    }
    assert!(total_live < ids.len() / 10, "most counters were passivated");
    // Which counters a strategy keeps is its business (an admission filter may keep the
    // first ones); take one that is not live now.
    let live: std::collections::BTreeSet<String> = live_counter_ids(&http, &mgmt)
        .await
        .into_iter()
        .flatten()
        .collect();
    let gone = ids
        .iter()
        .find(|id| !live.contains(*id))
        .expect("some counter was passivated");
    let (value, _) = counter(&http, &mgmt[1], gone, false)
        .await
        .expect("a passivated counter answers again");
    assert_eq!(
        value, 1,
        "a passivated counter comes back as a new incarnation that recovers its increment"
    );
    for n in &mut nodes {
        assert!(n.exited().is_none(), "{}", n.report());
    }
}
