//! Two versions of a command type in one cluster, as during a rolling update: a
//! `shardik node --demo-evolving v1` and a `--demo-evolving v2` process over loopback, whose
//! demo kind's command and reply gained a field with a default in v2 (`src/evolving.rs`,
//! CBOR codec). A command a v1 node encodes is read by the v2 node hosting its entity (the
//! missing field filled), and a v2 command, with the field, is read by the v1 node (which
//! ignores it); the replies cross back the same way.

mod support;

use serde_json::{Value, json};
use support::*;

const SHARDING_FAST: &[(&str, &str)] = &[
    ("SHARDIK_CLUSTER__SHARDING__NUMBER_OF_SHARDS", "50"),
    ("SHARDIK_CLUSTER__SHARDING__RETRY_INTERVAL", "300ms"),
];

/// `POST /demo/evolving/{id}` through the node at `management`.
async fn set(
    http: &reqwest::Client,
    management: &str,
    id: &str,
    body: &Value,
) -> Result<Value, String> {
    let resp = http
        .post(format!("http://{management}/demo/evolving/{id}"))
        .json(body)
        .send()
        .await
        .map_err(|e| format!("{management}: {e}"))?;
    let status = resp.status();
    let v: Value = resp
        .json()
        .await
        .map_err(|e| format!("{management}: {e}"))?;
    if !status.is_success() {
        return Err(format!("{management}: {status}: {v}"));
    }
    Ok(v)
}

/// Sends `body` (its name made unique per id) through `from` to entity after entity until one
/// hosted by a node of `host_version` answers; returns that id and the answer.
async fn first_hosted_by(
    http: &reqwest::Client,
    nodes: &mut [&mut Node],
    from: &str,
    host_version: &str,
    body: Value,
) -> (String, Value) {
    let what = format!("an entity asked through {from} is hosted by the {host_version} node");
    eventually(&what, BOUND, nodes, || {
        let body = body.clone();
        async move {
            let mut seen = Vec::new();
            for i in 0..50 {
                let id = format!("e-{i}");
                let mut body = body.clone();
                body["name"] = json!(format!("name-{id}"));
                let answer = set(http, from, &id, &body).await?;
                if answer["reply"]["version"] == host_version {
                    return Ok((id, answer));
                }
                seen.push(answer["reply"]["version"].clone());
            }
            Err(format!("hosts seen: {seen:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_and_replies_cross_between_v1_and_v2_nodes() {
    let http = client();
    let spec = |name: &str, version: &str, seeds: &[String]| {
        SHARDING_FAST
            .iter()
            .fold(NodeSpec::new(name, seeds), |s, (k, v)| s.env(k, v))
            .arg("--demo-evolving")
            .arg(version)
    };
    let first = spec("evolving-v1", "v1", &[]);
    let seed = vec![first.bind.clone()];
    let first = NodeSpec {
        seeds: seed.clone(),
        ..first
    };
    let mut v1 = Node::spawn(first);
    let mut v2 = Node::spawn(spec("evolving-v2", "v2", &seed));
    let (v1_addr, v2_addr) = (v1.addr().to_string(), v2.addr().to_string());
    let (v1_mgmt, v2_mgmt) = (v1.spec.management.clone(), v2.spec.management.clone());
    let mut nodes = [&mut v1, &mut v2];
    wait_all_up(&http, &mut nodes, &[&v1_addr, &v2_addr]).await;

    // v1 → v2: the v1 node's command has no note; the v2 entity reads it as None, and its
    // reply, which has a note field, reads on the v1 node.
    let (id, answer) =
        first_hosted_by(&http, &mut nodes, &v1_mgmt, "v2", json!({"value": 7})).await;
    let expected = json!({
        "id": id,
        "sender": "v1",
        "reply": {"host": v2_addr, "version": "v2", "name": format!("name-{id}"), "value": 7},
    });
    assert_eq!(answer, expected, "v1's reply type has no note: none shows");

    // v2 → v1: the v2 node's command carries a note, which the v1 entity ignores; its reply,
    // without a note, reads on the v2 node as None.
    let with_note = json!({"value": 9, "note": "from v2"});
    let (id, answer) = first_hosted_by(&http, &mut nodes, &v2_mgmt, "v1", with_note.clone()).await;
    let expected = json!({
        "id": id,
        "sender": "v2",
        "reply": {
            "host": v1_addr, "version": "v1", "name": format!("name-{id}"), "value": 9,
            "note": null,
        },
    });
    assert_eq!(answer, expected);

    // v2 → v2 (control): between nodes that both know the note, it travels.
    let (id, answer) =
        first_hosted_by(&http, &mut nodes, &v1_mgmt, "v2", json!({"value": 1})).await;
    let control = json!({"name": "control", "value": 9, "note": "from v2"});
    let answer_v2 = set(&http, &v2_mgmt, &id, &control).await.unwrap();
    assert_eq!(answer["reply"]["host"], json!(v2_addr));
    assert_eq!(answer_v2["reply"]["note"], json!("from v2"), "{answer_v2}");
    assert_eq!(answer_v2["reply"]["value"], json!(9), "{answer_v2}");
}
