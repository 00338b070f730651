//! Multi-process tests: real `shardik node` processes talking TCP on localhost, observed
//! through the management HTTP API and their logs.
//!
//! Every timer is shortened through `SHARDIK_*` environment variables (see
//! `support::FAST`), every wait is bounded and polls, and every child process is killed when
//! its guard drops, so a failing test leaves nothing behind and shows the nodes' last log
//! lines.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn addrs(nodes: &[Node]) -> Vec<String> {
    nodes.iter().map(|n| n.addr().to_string()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_a_cluster() {
    let http = client();
    let mut nodes = start_cluster(&http, "form", 3, &[]).await;
    let expected = addrs(&nodes);

    // Every node sees the same three incarnations, all Up, and names itself.
    let mut views = Vec::new();
    for n in &nodes {
        let v = members(&http, n).await.expect("members");
        assert_eq!(v["selfNode"], n.addr(), "{v}");
        let mut list = member_list(&v);
        list.sort();
        views.push(list);
    }
    assert!(
        views.windows(2).all(|w| w[0] == w[1]),
        "nodes disagree on the members' uids: {views:?}"
    );
    for (addr, uid, status) in &views[0] {
        assert!(expected.contains(addr), "{addr} unexpected");
        assert_eq!(status, "Up");
        assert!(uid.parse::<u64>().is_ok(), "uid {uid} is not a decimal u64");
    }

    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let mgmt = managements(&refs);
    eventually(
        "/ready and /alive answer 200 on every node",
        BOUND,
        &mut refs,
        || all_answer_200(&http, &mgmt, &["/ready", "/alive"]),
    )
    .await;
    for n in &mut nodes {
        assert_eq!(n.exited(), None, "{}", n.report());
    }
}

/// `runtime.worker-threads` sizes a node's runtime and `/metrics` shows the count; left at
/// its default (0), a node starts one worker per core.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_threads_setting_sizes_the_runtime_and_metrics_show_it() {
    let http = client();
    let specs = vec![
        NodeSpec::new("workers-3", &[]).env("SHARDIK_RUNTIME__WORKER_THREADS", "3"),
        NodeSpec::new("workers-auto", &[]),
    ];
    let mut nodes = start_cluster_of(&http, specs).await;
    let metric = "shardik_runtime_worker_threads";
    let three = metric_at(&http, &nodes[0].spec.management, metric).await;
    assert_eq!(three, Ok(3.0), "{}", nodes[0].report());
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    let auto = metric_at(&http, &nodes[1].spec.management, metric).await;
    assert_eq!(auto, Ok(cores), "{}", nodes[1].report());
    for n in &mut nodes {
        assert_eq!(n.exited(), None, "{}", n.report());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_leads_to_removal_everywhere() {
    let http = client();
    let mut nodes = start_cluster(&http, "crash", 3, &[]).await;
    // Kill the leader: the survivors must also agree on a new one.
    let leader = members(&http, &nodes[0]).await.expect("members")["leader"]
        .as_str()
        .expect("a leader")
        .to_string();
    let victim_idx = nodes
        .iter()
        .position(|n| n.addr() == leader)
        .expect("the leader is one of the nodes");
    let mut victim = nodes.remove(victim_idx);
    victim.kill9();
    let survivors = addrs(&nodes);
    let seen_unreachable = AtomicBool::new(false);

    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let mgmt = managements(&refs);
    let what = format!("the survivors {survivors:?} list only themselves, all Up");
    eventually(&what, BOUND, &mut refs, || {
        let (http, mgmt, survivors, seen, victim) =
            (&http, &mgmt, &survivors, &seen_unreachable, victim.addr());
        async move {
            for m in mgmt {
                let v = members_at(http, m).await?;
                if unreachable_list(&v).iter().any(|u| u == victim) {
                    seen.store(true, Ordering::Relaxed);
                }
                exactly_up(&v, &strs(survivors)).map_err(|e| format!("{m}: {e}"))?;
            }
            Ok(())
        }
    })
    .await;
    let new_leader = wait_all_up(&http, &mut refs, &strs(&survivors)).await;
    assert_ne!(new_leader, leader, "the dead leader is still the leader");

    let logs: Vec<String> = nodes.iter().map(Node::stderr).collect();
    let victim_addr = victim.addr();
    let logged_unreachable = logs
        .iter()
        .any(|l| l.contains(&format!("member {victim_addr} is unreachable")));
    assert!(
        seen_unreachable.load(Ordering::Relaxed) || logged_unreachable,
        "{victim_addr} was never reported unreachable\n{}",
        reports(&mut nodes.iter_mut().collect::<Vec<_>>())
    );
    // Downed by the split-brain resolver, then removed: every survivor logs the removal.
    for (n, l) in nodes.iter().zip(&logs) {
        assert!(
            l.contains(&format!("member {victim_addr} is Removed (was Down)")),
            "{} did not log the removal of {victim_addr}:\n{}",
            n.spec.name,
            n.stderr_tail(40)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_leaves_gracefully_and_exits_zero() {
    let http = client();
    let mut nodes = start_cluster(&http, "leave", 3, &[]).await;
    // Node 2 is not a seed.
    let mut leaver = nodes.pop().expect("three nodes");
    let addr = leaver.addr().to_string();
    leaver.signal("TERM");
    let status = leaver.wait_exit(BOUND).await;
    assert!(
        status.is_some(),
        "no exit within {BOUND:?} after SIGTERM\n{}",
        leaver.report()
    );
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "exit status after SIGTERM\n{}",
        leaver.report()
    );
    let log = leaver.stderr();
    for needle in [
        format!("member {addr} is Leaving"),
        format!("member {addr} is Exiting"),
        "node stopped".to_string(),
    ] {
        assert!(
            log.contains(&needle),
            "the leaver's log lacks `{needle}`\n{}",
            leaver.report()
        );
    }

    let survivors = addrs(&nodes);
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let leader = wait_all_up(&http, &mut refs, &strs(&survivors)).await;
    for n in &nodes {
        let l = n.stderr();
        assert!(
            !l.contains(&format!("member {addr} is Down")),
            "{} downed the leaver instead of letting it leave:\n{}",
            n.spec.name,
            n.stderr_tail(40)
        );
        if n.addr() == leader {
            assert!(
                l.contains(&format!("member {addr} is Removed (was Exiting)")),
                "the leader {} did not log the removal of the exiting {addr}:\n{}",
                n.spec.name,
                n.stderr_tail(40)
            );
        }
    }
}

/// A second SIGTERM while the node is leaving makes `run_until_signal` return at once: the
/// process exits with 130 without waiting for the leave, which cannot end here (the only
/// other member is frozen, so the leave never converges).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_while_leaving_exits_at_once_with_130() {
    let http = client();
    let mut nodes = start_cluster(&http, "twice", 2, &[]).await;
    let mut leaver = nodes.pop().expect("two nodes");
    nodes[0].signal("STOP");
    leaver.signal("TERM");
    // Two signals in a row may reach the process as one: send the second only once the
    // first was taken.
    let deadline = Instant::now() + BOUND;
    while !leaver.stderr().contains("signal received: leaving") {
        assert!(
            Instant::now() < deadline,
            "the leaver did not take the first SIGTERM\n{}",
            leaver.report()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    leaver.signal("TERM");
    let status = leaver.wait_exit(Duration::from_secs(5)).await;
    nodes[0].signal("CONT");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(130),
        "exit after the second SIGTERM\n{}",
        leaver.report()
    );
    let log = leaver.stderr();
    let exiting = format!("member {} is Exiting", leaver.addr());
    assert!(
        log.contains("second signal") && !log.contains(&exiting),
        "{}",
        leaver.report()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_node_on_same_port_rejoins_with_new_uid() {
    let http = client();
    let mut nodes = start_cluster(&http, "restart", 3, &[]).await;
    let expected = addrs(&nodes);
    let mut old = nodes.pop().expect("three nodes");
    let addr = old.addr().to_string();
    let old_uid = member_list(&members(&http, &nodes[0]).await.expect("members"))
        .into_iter()
        .find(|(a, _, _)| *a == addr)
        .map(|(_, uid, _)| uid)
        .expect("the node to restart is a member");
    old.kill9();
    // At once, before the cluster even notices: same address, same management port.
    let mut spec = old.spec.clone();
    spec.name = format!("{}-again", spec.name);
    drop(old);
    nodes.push(Node::spawn(spec));

    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let mgmt = managements(&refs);
    let what = format!("all list {addr} Up with a uid other than {old_uid}");
    let new_uid = eventually(&what, BOUND, &mut refs, || {
        let (http, mgmt, expected, addr, old_uid) = (&http, &mgmt, &expected, &addr, &old_uid);
        async move {
            let mut uid: Option<String> = None;
            for m in mgmt {
                let v = members_at(http, m).await?;
                exactly_up(&v, &strs(expected)).map_err(|e| format!("{m}: {e}"))?;
                let list = member_list(&v);
                if list.iter().any(|(_, u, _)| u == old_uid) {
                    return Err(format!("{m} still lists the old uid: {v}"));
                }
                let u = list
                    .into_iter()
                    .find(|(a, _, _)| a == addr)
                    .map(|(_, u, _)| u)
                    .expect("checked by exactly_up");
                match &uid {
                    None => uid = Some(u),
                    Some(prev) if *prev == u => {}
                    Some(prev) => return Err(format!("uids of {addr} differ: {prev} vs {u}")),
                }
            }
            Ok(uid.expect("three views"))
        }
    })
    .await;
    assert_ne!(new_uid, old_uid);
    wait_all_up(&http, &mut refs, &strs(&expected)).await;
}

/// Sends `bytes` on a fresh connection, closes our side, and waits (bounded) for the node
/// to close its side. The node must neither hang on nor crash from the input.
async fn send_and_expect_close(addr: &str, bytes: &[u8]) -> Result<(), String> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    // The node may close while we still write (it refuses early): that is fine.
    let _ = s.write_all(bytes).await;
    let _ = s.shutdown().await;
    let mut buf = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    closed.map_err(|_| format!("{addr} kept the connection open"))
}

/// Deterministic pseudo-random bytes (xorshift).
fn garbage(len: usize, mut x: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_oversized_frames_do_not_hurt_a_node() {
    let http = client();
    let mut nodes = start_cluster(&http, "garbage", 3, &[]).await;
    let expected = addrs(&nodes);
    let target = nodes[0].addr().to_string();

    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push(("random garbage", garbage(4096, 0x9e37_79b9_7f4a_7c15)));
    let mut huge = vec![0xFF, 0xFF, 0xFF, 0xFF, 1];
    huge.extend(garbage(64, 7));
    cases.push(("length 0xFFFFFFFF", huge));
    let mut just_over = (256 * 1024 + 1u32).to_be_bytes().to_vec();
    just_over.extend(garbage(1024, 11));
    cases.push(("length just over maximum-frame-size", just_over));
    cases.push(("unknown kind 99", vec![0, 0, 0, 5, 99, 1, 2, 3, 4]));
    let mut handshake_garbage = vec![0, 0, 0, 33, 1];
    handshake_garbage.extend(garbage(32, 13));
    cases.push(("handshake kind with garbage payload", handshake_garbage));
    cases.push(("zero length", vec![0, 0, 0, 0]));
    let mut truncated = vec![0, 0, 0, 100, 1];
    truncated.extend([0u8; 10]);
    cases.push(("truncated frame", truncated));
    let n_cases = cases.len();

    for (what, bytes) in &cases {
        if let Err(e) = send_and_expect_close(&target, bytes).await {
            panic!("{what}: {e}\n{}", nodes[0].report());
        }
    }
    // Many at once, too.
    let mut flood = Vec::new();
    for i in 0..20u64 {
        let target = target.clone();
        flood.push(tokio::spawn(async move {
            send_and_expect_close(&target, &garbage(2048, i + 1)).await
        }));
    }
    for f in flood {
        if let Err(e) = f.await.expect("task") {
            panic!("flood: {e}\n{}", nodes[0].report());
        }
    }

    assert_eq!(nodes[0].exited(), None, "{}", nodes[0].report());
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let mgmt = managements(&refs);
    eventually(
        "/alive and /ready answer 200 everywhere",
        BOUND,
        &mut refs,
        || all_answer_200(&http, &mgmt, &["/alive", "/ready"]),
    )
    .await;
    wait_all_up(&http, &mut refs, &strs(&expected)).await;
    let metrics_url = refs[0].url("/metrics");
    let refused = eventually(
        "shardik_transport_refused_total counts every refused connection",
        BOUND,
        &mut refs,
        || {
            let (http, url) = (&http, &metrics_url);
            async move {
                let text = http
                    .get(url)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?
                    .text()
                    .await
                    .map_err(|e| e.to_string())?;
                let n = metric_sum(&text, "shardik_transport_refused_total");
                if n >= (n_cases + 20) as f64 {
                    Ok(n)
                } else {
                    Err(format!("refused total {n}:\n{text}"))
                }
            }
        },
    )
    .await;
    assert!(refused > 0.0);
    for n in &mut nodes {
        assert_eq!(n.exited(), None, "{}", n.report());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_of_another_cluster_is_refused() {
    let http = client();
    let mut nodes = start_cluster(&http, "home", 3, &[]).await;
    let expected = addrs(&nodes);
    let seeds: Vec<String> = expected.iter().take(2).cloned().collect();
    let mut stranger =
        Node::spawn(NodeSpec::new("stranger", &seeds).env("SHARDIK_CLUSTER__NAME", "other"));
    let stranger_addr = stranger.addr().to_string();

    // The refusal is logged, by the cluster's nodes (handshake) or by the stranger.
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    refs.push(&mut stranger);
    let logs: Vec<std::path::PathBuf> = refs.iter().map(|n| n.log_path()).collect();
    eventually(
        "some node logs `cluster name differs`",
        BOUND,
        &mut refs,
        || {
            let found = logs.iter().any(|p| {
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .contains("cluster name differs")
            });
            async move {
                if found {
                    Ok(())
                } else {
                    Err("not logged yet".to_string())
                }
            }
        },
    )
    .await;

    // For a few seconds of gossip after that, the stranger never shows up as a member
    // anywhere, and it never becomes ready.
    let mgmt = managements(&refs[..3]);
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        for m in &mgmt {
            let v = members_at(&http, m).await.expect("members");
            assert!(
                !member_list(&v).iter().any(|(a, _, _)| *a == stranger_addr),
                "{m} lists the stranger {stranger_addr}: {v}\n{}",
                reports(&mut refs)
            );
        }
        if let Ok(s) = status_of(&http, &*refs[3], "/ready").await {
            assert_ne!(s, 200, "the stranger is ready\n{}", reports(&mut refs));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    wait_all_up(&http, &mut refs, &strs(&expected)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_down_route_removes_a_crashed_node() {
    let http = client();
    // The split-brain resolver would wait a minute: only the operator's Down can be faster.
    let stable_after = Duration::from_secs(60);
    let mut nodes = start_cluster(
        &http,
        "down",
        3,
        &[
            ("SHARDIK_CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "60s"),
            // Downing goes through the management API.
            WRITES_ENABLED,
        ],
    )
    .await;
    let mut victim = nodes.pop().expect("three nodes");
    let victim_addr = victim.addr().to_string();
    victim.kill9();
    let killed_at = Instant::now();
    let survivors = addrs(&nodes);

    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    let mgmt = managements(&refs);
    eventually(
        &format!("{victim_addr} is unreachable"),
        BOUND,
        &mut refs,
        || {
            let (http, m, victim) = (&http, &mgmt[0], &victim_addr);
            async move {
                let v = members_at(http, m).await?;
                if unreachable_list(&v).contains(victim) {
                    Ok(())
                } else {
                    Err(format!("not unreachable yet: {v}"))
                }
            }
        },
    )
    .await;

    let resp = http
        .put(refs[0].url(&format!("/cluster/members/{victim_addr}")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("operation=Down")
        .send()
        .await
        .expect("PUT /cluster/members/{address}");
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    assert_eq!(status, 200, "PUT Down answered {status}: {body}");
    assert!(body.contains("Downing"), "{body}");

    wait_all_up(&http, &mut refs, &strs(&survivors)).await;
    assert!(
        killed_at.elapsed() < stable_after,
        "removal took {:?}, not faster than stable-after",
        killed_at.elapsed()
    );
    for n in &nodes {
        assert!(
            n.stderr()
                .contains(&format!("member {victim_addr} is Removed (was Down)")),
            "{} did not log the removal:\n{}",
            n.spec.name,
            n.stderr_tail(40)
        );
    }
    // An unknown member is a 404, an unknown operation a 400.
    let resp = http
        .put(nodes[0].url(&format!("/cluster/members/{victim_addr}")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("operation=Down")
        .send()
        .await
        .expect("PUT");
    assert_eq!(resp.status().as_u16(), 404);
    let resp = http
        .put(nodes[0].url(&format!("/cluster/members/{}", nodes[1].addr())))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("operation=Explode")
        .send()
        .await
        .expect("PUT");
    assert_eq!(resp.status().as_u16(), 400);
}
