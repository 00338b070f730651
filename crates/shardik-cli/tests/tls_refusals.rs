//! Nodes without a valid certificate of the cluster never get in. Against one running
//! three-node TLS cluster, a fourth node is started in turn with no TLS at all (plain TCP
//! dialling TLS seeds), with a certificate from the cluster's own CA that names another
//! cluster, and with an expired certificate from the cluster's CA. Each retries its join; the
//! seeds refuse it at the TLS layer every time and count why
//! (`shardik_transport_refused_total{reason="tls-…"}`), it never appears in any member's
//! `/cluster/members`, and the three stay Up. (A certificate from another CA:
//! `tls_multiprocess.rs`.)

mod support;

use std::time::Instant;

use shardik_runtime::tls::certs::{CertificateAuthority, NodeCertRequest, Validity};
use support::tls_nodes::{
    CLUSTER, Poll, TRUST_DOMAIN, TlsCluster, TlsClusterSpec, TlsFiles, log_lines, until,
};
use support::*;

/// Refusals each seed must count from a stranger before its test ends: it was refused at
/// every attempt of several, not only once.
const REFUSALS: f64 = 6.0;

/// `shardik_transport_refused_total{reason="<reason>"}` on each of `managements`.
async fn refusals(
    http: &reqwest::Client,
    managements: &[String],
    reason: &str,
) -> Result<Vec<f64>, String> {
    let label = format!("reason=\"{reason}\"");
    let mut counts = Vec::new();
    for m in managements {
        counts
            .push(metric_sum_with_label(http, m, "shardik_transport_refused_total", &label).await?);
    }
    Ok(counts)
}

/// Starts `spec` against `cluster` and waits until both seeds have counted [`REFUSALS`] more
/// refusals for `reason`, checking at every poll that every member lists exactly the three,
/// all Up, and never the stranger. Returns the stranger, still running.
async fn refused_and_kept_out(
    http: &reqwest::Client,
    cluster: &mut TlsCluster,
    spec: NodeSpec,
    reason: &str,
) -> Node {
    let managements = cluster.managements();
    let seeds = &managements[..2];
    let mut expected = cluster.addrs();
    expected.sort_unstable();
    let before = refusals(http, seeds, reason)
        .await
        .expect("the seeds' metrics");
    let mut stranger = Node::spawn(spec);
    let stranger_addr = stranger.addr().to_string();
    let started = Instant::now();
    let what = format!("both seeds count {REFUSALS} refusals as {reason}");
    {
        let (managements, expected, before, stranger_addr) =
            (&managements, &expected, &before, &stranger_addr);
        until(&what, cluster, || async move {
            for m in managements {
                let v = members_at(http, m).await?;
                let listed = member_list(&v);
                if listed.iter().any(|(a, _, _)| a == stranger_addr) {
                    return Err(Poll::Fail(format!("{m} lists the stranger: {v}")));
                }
                // The three stay members and Up. (Not "all reachable" at every poll: a loaded
                // machine may delay a heartbeat past the fast settings' pause, which is not
                // what this test is about.)
                let mut up: Vec<&str> = listed
                    .iter()
                    .filter(|(_, _, status)| status == "Up")
                    .map(|(a, _, _)| a.as_str())
                    .collect();
                up.sort_unstable();
                if up.len() != listed.len() || up != *expected {
                    return Err(Poll::Fail(format!("{m}: not the three, all Up: {v}")));
                }
            }
            let now = refusals(http, seeds, reason).await?;
            for ((m, now), before) in seeds.iter().zip(&now).zip(before) {
                if *now < before + REFUSALS {
                    return Err(Poll::Wait(format!(
                        "{m}: {} refusals as {reason} since the stranger started",
                        now - before
                    )));
                }
            }
            Ok(())
        })
        .await;
    }
    assert!(
        stranger.exited().is_none(),
        "the stranger stopped instead of retrying\n{}",
        stranger.report()
    );
    eprintln!(
        "{reason}: refused {REFUSALS} times by each seed in {:?}",
        started.elapsed()
    );
    stranger
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_a_valid_certificate_of_the_cluster_are_refused_and_never_join() {
    let http = client();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cluster ca", Validity::days_from_now(30)).unwrap();
    let spec = TlsClusterSpec {
        prefix: "refusing",
        n: 3,
        ttl: "1m",
        env: &[],
        args: &[],
    };
    let mut cluster = TlsCluster::start(&http, dir.path(), &ca, &spec).await;
    let seeds = cluster.seeds();

    // No TLS at all: its handshake frame is not a TLS record.
    let plain = refused_and_kept_out(
        &http,
        &mut cluster,
        NodeSpec::new("plain", &seeds),
        "tls-not-tls",
    )
    .await;
    // It is told why, rather than retrying its seeds in silence.
    let told = metric_sum_with_label(
        &http,
        &plain.spec.management,
        "shardik_transport_refused_total",
        "reason=\"peer-requires-tls\"",
    )
    .await
    .expect("the plain node's metrics");
    assert!(told >= 1.0, "{told}\n{}", plain.stderr_tail(20));
    assert!(
        !log_lines(&plain, "the peer answered in TLS").is_empty(),
        "the plain node says the seeds require TLS:\n{}",
        plain.stderr_tail(20)
    );
    drop(plain);

    // A certificate from the cluster's CA, for another cluster of the same trust domain.
    let other_cluster = ca
        .issue(&NodeCertRequest::for_node(
            TRUST_DOMAIN,
            "other",
            "127.0.0.1",
            5,
        ))
        .unwrap();
    assert_ne!(CLUSTER, "other");
    let files = TlsFiles::create(dir.path(), "other-cluster", &other_cluster, ca.cert_pem());
    drop(
        refused_and_kept_out(
            &http,
            &mut cluster,
            files.apply(NodeSpec::new("other-cluster", &seeds), "1m"),
            "tls-wrong-cluster",
        )
        .await,
    );

    // A certificate from the cluster's CA, for this cluster, that expired yesterday.
    let expired = ca
        .issue(&NodeCertRequest {
            validity: Validity::expired(),
            ..NodeCertRequest::for_node(TRUST_DOMAIN, CLUSTER, "127.0.0.1", 5)
        })
        .unwrap();
    let files = TlsFiles::create(dir.path(), "expired", &expired, ca.cert_pem());
    drop(
        refused_and_kept_out(
            &http,
            &mut cluster,
            files.apply(NodeSpec::new("expired", &seeds), "1m"),
            "tls-expired",
        )
        .await,
    );
}
