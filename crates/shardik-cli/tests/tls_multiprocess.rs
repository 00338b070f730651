//! Mutual TLS between real `shardik node` processes: three nodes with certificates from one
//! CA form a cluster; a fourth whose certificate is from another CA never becomes a member,
//! and the seeds count its refused handshakes.

mod support;

use std::time::{Duration, Instant};

use shardik_runtime::tls::certs::{CertificateAuthority, Validity};
use support::tls_nodes::tls_node;
use support::*;

/// The sum of `shardik_transport_refused_total` over its `tls-*` reasons on the node whose
/// management address is `management`.
async fn tls_refusals(http: &reqwest::Client, management: &str) -> Result<f64, String> {
    metric_sum_with_label(
        http,
        management,
        "shardik_transport_refused_total",
        "reason=\"tls-",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_of_one_ca_form_a_cluster_and_a_node_of_another_ca_never_joins() {
    let http = client();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cluster ca", Validity::days_from_now(30)).unwrap();
    let other = CertificateAuthority::generate("other ca", Validity::days_from_now(30)).unwrap();

    let specs: Vec<NodeSpec> = (0..3)
        .map(|i| tls_node(dir.path(), &format!("tls{i}"), &[], &ca, ca.cert_pem()))
        .collect();
    let seeds: Vec<String> = specs.iter().take(2).map(|s| s.bind.clone()).collect();
    let mut nodes: Vec<Node> = specs
        .into_iter()
        .map(|mut s| {
            s.seeds = seeds.clone();
            Node::spawn(s)
        })
        .collect();
    let expected: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    {
        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
        wait_all_up(&http, &mut refs, &expected).await;
    }

    // A stranger whose certificate is from another CA (it trusts ours, which is public).
    let managements: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let mut before = Vec::new();
    for m in &managements {
        before.push(tls_refusals(&http, m).await.expect("metrics"));
    }
    let stranger = Node::spawn(tls_node(
        dir.path(),
        "stranger",
        &seeds,
        &other,
        ca.cert_pem(),
    ));
    let stranger_addr = stranger.addr().to_string();

    // The seeds refuse its handshakes (counted)...
    {
        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
        let (http, managements, before) = (&http, &managements, &before);
        eventually(
            "both seeds count refused TLS handshakes",
            BOUND,
            &mut refs,
            || async move {
                for (m, before) in managements.iter().zip(before).take(2) {
                    let now = tls_refusals(http, m).await?;
                    if now <= *before {
                        return Err(format!("{m}: {now} TLS refusals, as before"));
                    }
                }
                Ok(())
            },
        )
        .await;
    }
    // ...and for some seconds after (it keeps retrying its join), it never appears as a
    // member anywhere, while the three stay Up.
    let watch_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < watch_until {
        for n in &nodes {
            let v = members(&http, n).await.expect("members");
            assert!(
                !member_list(&v).iter().any(|(a, _, _)| *a == stranger_addr),
                "{} lists the stranger: {v}",
                n.spec.name
            );
            exactly_up(&v, &expected).unwrap_or_else(|e| panic!("{}: {e}", n.spec.name));
        }
        tokio::time::sleep(POLL).await;
    }
    drop(stranger);
}
