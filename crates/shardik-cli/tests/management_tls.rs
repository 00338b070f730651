//! The management API over HTTPS between real processes: `shardik node` with
//! `management.http.tls.enabled` (the transport's files, made by `shardik certs`), and the
//! `shardik members`/`leave` commands against it. Reads need only the CA; a leave needs a
//! client certificate from the cluster's CA; plain HTTP is told to use https; unusable TLS
//! files stop the node at start.

mod support;

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use support::*;

/// `shardik ARGS…` to completion (bounded): exit code, stdout, stderr. Hermetic: no
/// `SHARDIK_*` variable of the test's environment reaches it.
async fn shardik(args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_shardik"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str()
            && k.starts_with("SHARDIK_")
        {
            cmd.env_remove(k);
        }
    }
    let out = tokio::time::timeout(BOUND, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("shardik {args:?} did not finish within {BOUND:?}"))
        .expect("run shardik");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A node with TLS between nodes and on its management port (the same files, from
/// `shardik certs` in `pki`), writes enabled: on loopback, but with TLS on they need a client
/// certificate.
fn node(pki: &Path, name: &str) -> NodeSpec {
    let file = |f: &str| pki.join(f).display().to_string();
    NodeSpec::new(name, &[])
        .env("SHARDIK_TRANSPORT__TLS__ENABLED", "on")
        .env("SHARDIK_TRANSPORT__TLS__CERT_FILE", &file("127.0.0.1.pem"))
        .env(
            "SHARDIK_TRANSPORT__TLS__KEY_FILE",
            &file("127.0.0.1-key.pem"),
        )
        .env("SHARDIK_TRANSPORT__TLS__CA_CERT_FILE", &file("ca.pem"))
        .env("SHARDIK_MANAGEMENT__HTTP__TLS__ENABLED", "on")
        .env(WRITES_ENABLED.0, WRITES_ENABLED.1)
}

/// `shardik members --json` over HTTPS with the CA only.
async fn members_over_https(management: &str, ca: &str) -> Result<Value, String> {
    let (code, out, err) = shardik(&[
        "members",
        "--json",
        "--management",
        management,
        "--management-ca",
        ca,
    ])
    .await;
    if code != Some(0) {
        return Err(format!("shardik members exited with {code:?}: {err}"));
    }
    serde_json::from_str(&out).map_err(|e| format!("not JSON ({e}): {out}"))
}

/// Runs `shardik certs` for cluster `shardik` into `parent/pki`: a CA, a certificate for the
/// nodes at 127.0.0.1 and one named `extra`; returns the directory.
async fn certs(parent: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let pki = parent.join("pki");
    let pki_arg = pki.display().to_string();
    let (code, _, err) = shardik(&[
        "certs",
        "--dir",
        &pki_arg,
        "--cluster-name",
        "shardik",
        "127.0.0.1",
        extra,
    ])
    .await;
    assert_eq!(code, Some(0), "shardik certs: {err}");
    pki
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_with_the_ca_and_changes_membership_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = certs(dir.path(), "operator").await;
    let file = |f: &str| pki.join(f).display().to_string();
    let ca = file("ca.pem");

    let first = node(&pki, "mtls0");
    let seeds = vec![first.bind.clone()];
    let mut nodes: Vec<Node> = [first, node(&pki, "mtls1")]
        .into_iter()
        .map(|mut spec| {
            spec.seeds = seeds.clone();
            Node::spawn(spec)
        })
        .collect();
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let management = nodes[0].spec.management.clone();

    // Reads need only the CA (as a probe without a certificate).
    {
        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
        let (management, ca, addrs) = (&management, &ca, &addrs);
        eventually(
            "shardik members over HTTPS lists both nodes Up",
            BOUND,
            &mut refs,
            || async move {
                let v = members_over_https(management, ca).await?;
                let want: Vec<&str> = addrs.iter().map(String::as_str).collect();
                exactly_up(&v, &want)
            },
        )
        .await;
    }
    let (code, table, err) = shardik(&[
        "members",
        "--management",
        &management,
        "--management-ca",
        &ca,
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert!(table.starts_with("NODE"), "{table}");
    assert!(table.contains(&addrs[1]), "{table}");

    // Plain HTTP to the HTTPS port is told what to do.
    let (code, _, err) = shardik(&["members", "--management", &management]).await;
    assert_eq!(code, Some(2));
    assert!(err.contains("400") && err.contains("https://"), "{err}");

    // A leave without a client certificate is refused, and changes nothing.
    let (code, _, err) = shardik(&[
        "leave",
        &addrs[1],
        "--management",
        &management,
        "--management-ca",
        &ca,
    ])
    .await;
    assert_eq!(code, Some(2));
    assert!(
        err.contains("403") && err.contains("client certificate"),
        "{err}"
    );

    // With the operator's certificate from the cluster's CA, it is done.
    let (code, out, err) = shardik(&[
        "leave",
        &addrs[1],
        "--management",
        &management,
        "--management-ca",
        &ca,
        "--management-cert",
        &file("operator.pem"),
        "--management-key",
        &file("operator-key.pem"),
    ])
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), format!("Leaving {}", addrs[1]));
    let exit = nodes[1].wait_exit(BOUND).await;
    assert!(
        exit.is_some_and(|s| s.success()),
        "the node that was asked to leave exits 0 after leaving: {exit:?}\n{}",
        nodes[1].report()
    );
    {
        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
        let (management, ca, addrs) = (&management, &ca, &addrs);
        eventually(
            "the remaining node lists itself alone",
            BOUND,
            &mut refs,
            || async move {
                let v = members_over_https(management, ca).await?;
                exactly_up(&v, &[addrs[0].as_str()])
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_management_tls_files_cannot_be_used_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let pki = certs(dir.path(), "other").await;
    let missing = dir.path().join("no-such-cert.pem").display().to_string();
    let other_key = pki.join("other-key.pem").display().to_string();
    for (key, value, expected) in [
        (
            "SHARDIK_MANAGEMENT__HTTP__TLS__CERT_FILE",
            missing.as_str(),
            vec!["management.http.tls.cert-file", missing.as_str()],
        ),
        (
            "SHARDIK_MANAGEMENT__HTTP__TLS__KEY_FILE",
            other_key.as_str(),
            vec!["management.http.tls.key-file", "does not belong"],
        ),
    ] {
        let mut n = Node::spawn(node(&pki, "badmtls").env(key, value));
        let exit = n.wait_exit(BOUND).await;
        assert_eq!(
            exit.and_then(|s| s.code()),
            Some(2),
            "{key}: the node should stop at start\n{}",
            n.report()
        );
        let log = n.stderr();
        for text in &expected {
            assert!(log.contains(text), "{key}: `{text}` not in:\n{log}");
        }
    }
}
