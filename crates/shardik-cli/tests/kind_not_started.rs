//! A member that never starts an entity kind does not hold that kind back: three real
//! `shardik node` processes, of which the third runs without `--demo-counters` (so it never
//! initialises the `counter` kind). When the coordinator moves to a node that must hear from
//! every member before it allocates (the oldest node leaves), the third node says it has not
//! started the kind, and the other two keep serving increments of new counters, every one
//! answered. No peer names the third node in a warning, since it answered (the warning for a
//! member that stays silent is tested in the runtime's `unheard_regions` test).

mod support;

use serde_json::Value;
use support::counters::SHARDING_FAST;
use support::*;

/// `POST /demo/counter/{id}/increment` through the node at `management`: the value on 200.
async fn increment(http: &reqwest::Client, management: &str, id: &str) -> Result<u64, String> {
    let resp = http
        .post(format!("http://{management}/demo/counter/{id}/increment"))
        .send()
        .await
        .map_err(|e| format!("{management}: {e}"))?;
    let status = resp.status().as_u16();
    let body: Value = resp
        .json()
        .await
        .map_err(|e| format!("{management}: {e}"))?;
    if status != 200 {
        return Err(format!("{management} {id}: {status} {body}"));
    }
    body["value"]
        .as_u64()
        .ok_or_else(|| format!("no value in {body}"))
}

/// Increments `ids` once each through `management`: every ask must be answered 200 with the
/// next value. A counter's first increment may wait for its shard's allocation, which is what
/// the test is about; the ask's own timeout (5 s) bounds that wait.
async fn increment_all(
    http: &reqwest::Client,
    management: &str,
    ids: &[String],
    expected: u64,
    nodes: &mut [&mut Node],
) {
    for id in ids {
        match increment(http, management, id).await {
            Ok(v) => assert_eq!(v, expected, "{id} through {management}"),
            Err(e) => panic!("an ask was not answered: {e}\n{}", reports(nodes)),
        }
    }
}

fn spec(name: &str, seeds: &[String], counters: Option<&str>) -> NodeSpec {
    let mut s = SHARDING_FAST
        .iter()
        .fold(NodeSpec::new(name, seeds), |s, (k, v)| s.env(k, v))
        // Fast, so that a wait that should not happen would be named within the test.
        .env(
            "SHARDIK_CLUSTER__SHARDING__UNHEARD_REGION_WARNING_AFTER",
            "1s",
        );
    if let Some(store) = counters {
        s = s.arg("--demo-counters").arg("--store").arg(store);
    }
    s
}

/// Lines of `log` (JSON, one event a line) at `level` whose text mentions `needle`.
fn lines_with(log: &str, level: &str, needle: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(&format!("\"level\":\"{level}\"")) && l.contains(needle))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_kind_does_not_hold_its_allocation_back() {
    let http = client();
    let store = fresh_sqlite_store("kns");
    // Started one after another, so that ages are known: a (oldest, the first coordinator),
    // b (the next), c (no counters).
    let mut first = spec("kns-a", &[], Some(store.url()));
    first.seeds = vec![first.bind.clone()];
    let mut a = Node::spawn(first);
    let seeds = vec![a.addr().to_string()];
    wait_all_up(&http, &mut [&mut a], &[&seeds[0]]).await;
    let mut b = Node::spawn(spec("kns-b", &seeds, Some(store.url())));
    let (aa, ba) = (a.addr().to_string(), b.addr().to_string());
    wait_all_up(&http, &mut [&mut a, &mut b], &[&aa, &ba]).await;
    let mut c = Node::spawn(spec("kns-c", &seeds, None));
    let ca = c.addr().to_string();
    wait_all_up(&http, &mut [&mut a, &mut b, &mut c], &[&aa, &ba, &ca]).await;

    let (am, bm) = (a.spec.management.clone(), b.spec.management.clone());
    let first: Vec<String> = (0..10).map(|i| format!("first-{i}")).collect();
    increment_all(&http, &am, &first, 1, &mut [&mut a, &mut b, &mut c]).await;
    increment_all(&http, &bm, &first, 2, &mut [&mut a, &mut b, &mut c]).await;

    // The oldest leaves: b starts a new coordinator, which must hear from b and c before it
    // allocates any shard it does not know of yet.
    a.signal("TERM");
    let exit = a.wait_exit(BOUND).await;
    assert!(
        exit.is_some_and(|s| s.success()),
        "a did not leave: {exit:?}\n{}",
        a.report()
    );
    wait_all_up(&http, &mut [&mut b, &mut c], &[&ba, &ca]).await;
    let b_log_path = b.log_path();
    eventually("b runs the coordinator", BOUND, &mut [&mut b], || {
        let log = std::fs::read_to_string(&b_log_path).unwrap_or_default();
        async move {
            if lines_with(&log, "INFO", "this node now runs the coordinator").is_empty() {
                Err("not yet".to_string())
            } else {
                Ok(())
            }
        }
    })
    .await;
    // Counters never used before: each needs a new shard allocated by b's coordinator.
    let fresh: Vec<String> = (0..20).map(|i| format!("fresh-{i}")).collect();
    increment_all(&http, &bm, &fresh, 1, &mut [&mut b, &mut c]).await;
    // The old ones moved to b with a's hand-off and kept their values.
    increment_all(&http, &bm, &first, 3, &mut [&mut b, &mut c]).await;

    // c's demo routes say why they do not serve counters.
    let resp = http
        .post(c.url("/demo/counter/fresh-0/increment"))
        .send()
        .await
        .expect("c answers");
    assert_eq!(resp.status().as_u16(), 404);
    let body: Value = resp.json().await.expect("json");
    let text = body["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("never initialised on this node") && text.contains("--demo-counters"),
        "{body}"
    );

    let (b_log, c_log) = (b.stderr(), c.stderr());
    let heard = lines_with(&b_log, "INFO", &format!("member {ca} has not started"));
    assert!(
        !heard.is_empty(),
        "b's coordinator counted c as not running the kind\n{}",
        b.report()
    );
    assert!(
        !lines_with(&c_log, "INFO", "which this node never started: told it so").is_empty(),
        "c told the coordinator\n{}",
        c.report()
    );
    for (name, log) in [("a", a.stderr()), ("b", b_log)] {
        let warned = lines_with(&log, "WARN", "allocates no new shard");
        assert!(
            warned.is_empty(),
            "{name} warned about a member that answered: {warned:?}"
        );
    }
}
