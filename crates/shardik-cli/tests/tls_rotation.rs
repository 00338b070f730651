//! Certificate rotation on a running TLS cluster of real `shardik node` processes, their files
//! replaced as the kubelet replaces a Secret volume (a new directory swapped in with one
//! rename), with `transport.tls.ssl-context-cache-ttl` = 1 s.
//!
//! - Under steady increments of durable counters, every node gets a new certificate from the
//!   same CA: our own TLS client sees each node present its new certificate to new
//!   connections, and once the connections between nodes are replaced (the user lanes close
//!   when idle and reopen on demand), every node's log shows each peer's new certificate on
//!   the connections it accepts. No acknowledged increment is lost.
//! - One node then gets a certificate from a CA the others do not trust: its next connections
//!   are refused both ways and counted; new files from the right CA heal it without a
//!   restart, and still no acknowledged increment is lost.
//! - A node whose files become unusable (garbage, deleted, a key of another certificate)
//!   keeps presenting its old certificate, counts each change once in
//!   `shardik_tls_reload_failures_total` and says why in its log; new connections, from our
//!   client and from a node that joins meanwhile, still succeed.

mod support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use shardik_runtime::tls::certs::{CertificateAuthority, IssuedCert, Validity};
use support::counters::{Ledger, SHARDING_FAST, SteadyLoad, burst};
use support::tls_nodes::{
    CA, CERT, KEY, Poll, TlsCluster, TlsClusterSpec, TlsFiles, log_lines, log_lines_in,
    member_cert, until,
};
use support::tls_probe::{CertificateProbe, der, serial_hex};
use support::*;

/// Counters driven.
const COUNTERS: usize = 30;

/// `transport.tls.ssl-context-cache-ttl` of every node.
const TTL: &str = "1s";

/// Node settings: sharding timers for a test, and user lanes that close after 1 s without
/// traffic (and reopen on demand), so that pausing the increments replaces the connections
/// that carry them (`frame-read-timeout` may not exceed `idle-timeout`).
fn node_env() -> Vec<(&'static str, &'static str)> {
    let mut env = SHARDING_FAST.to_vec();
    env.extend([
        ("SHARDIK_TRANSPORT__IDLE_TIMEOUT", "1s"),
        ("SHARDIK_TRANSPORT__FRAME_READ_TIMEOUT", "1s"),
        // Which certificate each accepted connection presented is a DEBUG line: routine at
        // INFO, but what this test reads.
        (
            "SHARDIK_LOGGING__LEVEL",
            "info,shardik_runtime::transport::inbound=debug",
        ),
    ]);
    env
}

/// Waits until `node` presents the certificate `expected` (PEM) to a new connection; every
/// probe is a new connection, which makes the node look at its files once the TTL has passed.
async fn until_presented(
    cluster: &mut TlsCluster,
    probe: &CertificateProbe,
    node: usize,
    expected: &IssuedCert,
) {
    let addr = cluster.nodes[node].addr().to_string();
    let want = der(&expected.cert_pem);
    let what = format!(
        "{addr} presents the certificate with serial {}",
        serial_hex(&expected.cert_pem)
    );
    until(&what, cluster, || {
        let (addr, want) = (&addr, &want);
        async move {
            let got = probe.presented(addr).await?;
            if got == *want {
                Ok(())
            } else {
                Err(Poll::Wait("another certificate".to_string()))
            }
        }
    })
    .await
}

/// Waits until no user lane is open between the nodes: each node serves only the control
/// connection of each of the others (`shardik_transport_connections` counts the inbound
/// connections a node serves).
async fn until_user_lanes_closed(http: &reqwest::Client, cluster: &mut TlsCluster) {
    let managements = cluster.managements();
    let control_only = (managements.len() - 1) as f64;
    until("only control connections remain", cluster, || {
        let managements = &managements;
        async move {
            for m in managements {
                let open = metric_at(http, m, "shardik_transport_connections").await?;
                if open != control_only {
                    return Err(Poll::Wait(format!("{m} serves {open} connections")));
                }
            }
            Ok(())
        }
    })
    .await
}

/// How many `accepted connection` lines the node log `log` has for connections from `from`
/// (a cluster address) whose client certificate had the serial `serial`.
fn accepted_with_serial(log: &Path, from: &str, serial: &str) -> usize {
    let prefix = format!("{from}#");
    log_lines_in(log, "accepted connection")
        .iter()
        .filter(|l| {
            let f = &l["fields"];
            f["from"].as_str().is_some_and(|a| a.starts_with(&prefix))
                && f["serial"].as_str() == Some(serial)
        })
        .count()
}

const REFUSED: &str = "shardik_transport_refused_total";
const TLS_FAILURES: &str = "shardik_transport_tls_failures_total";
const RELOADS: &str = "shardik_tls_reloads_total";
const RELOAD_FAILURES: &str = "shardik_tls_reload_failures_total";

/// The counts that show a node with an untrusted certificate refused: on each other node,
/// its inbound connections refused as `tls-unknown-ca` and the connections to it that failed
/// for the same reason; on the node itself, its outbound connections that failed.
#[derive(Debug, PartialEq)]
struct Refusals {
    refused_inbound: Vec<f64>,
    failed_outbound: Vec<f64>,
    own_failed_outbound: f64,
}

impl Refusals {
    async fn read(
        http: &reqwest::Client,
        others: &[String],
        untrusted: &str,
    ) -> Result<Refusals, String> {
        let mut refused_inbound = Vec::new();
        let mut failed_outbound = Vec::new();
        for m in others {
            refused_inbound
                .push(metric_sum_with_label(http, m, REFUSED, "reason=\"tls-unknown-ca\"").await?);
            failed_outbound.push(
                metric_sum_with_label(
                    http,
                    m,
                    TLS_FAILURES,
                    "direction=\"outbound\",reason=\"tls-unknown-ca\"",
                )
                .await?,
            );
        }
        let own_failed_outbound =
            metric_sum_with_label(http, untrusted, TLS_FAILURES, "direction=\"outbound\"").await?;
        Ok(Refusals {
            refused_inbound,
            failed_outbound,
            own_failed_outbound,
        })
    }

    /// What has not grown since `before`, if anything.
    fn not_grown_since(&self, before: &Refusals, others: &[String]) -> Option<String> {
        for (i, m) in others.iter().enumerate() {
            if self.refused_inbound[i] <= before.refused_inbound[i] {
                return Some(format!("{m} refused no connection as tls-unknown-ca yet"));
            }
            if self.failed_outbound[i] <= before.failed_outbound[i] {
                return Some(format!("{m} had no connection to the node fail yet"));
            }
        }
        if self.own_failed_outbound <= before.own_failed_outbound {
            return Some("no outbound connection of the node failed yet".to_string());
        }
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_loses_nothing_and_an_untrusted_certificate_is_refused() {
    let http = client();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cluster ca", Validity::days_from_now(30)).unwrap();
    // In the test's directory, removed with it (after the nodes, which are dropped first).
    let store = format!("sqlite:{}", dir.path().join("counters.db").display());
    let env = node_env();
    let spec = TlsClusterSpec {
        prefix: "rot",
        n: 3,
        ttl: TTL,
        env: &env,
        args: &["--demo-counters", "--store", &store],
    };
    let started = Instant::now();
    let mut cluster = TlsCluster::start(&http, dir.path(), &ca, &spec).await;
    let managements = cluster.managements();
    let addrs = cluster.addrs();
    let logs: Vec<PathBuf> = cluster.nodes.iter().map(Node::log_path).collect();
    let probe = CertificateProbe::new(&member_cert(&ca));
    for i in 0..3 {
        let first = cluster.certs[i].clone();
        until_presented(&mut cluster, &probe, i, &first).await;
    }

    let ledger = Ledger::new(COUNTERS);
    let mut load = SteadyLoad::start(&http, &managements, &ledger);
    until("every counter has answered twice", &mut cluster, || async {
        let low = ledger.acked().into_iter().min().unwrap_or(0);
        if low >= 2 {
            Ok(())
        } else {
            Err(Poll::Wait(format!("a counter has {low} answers")))
        }
    })
    .await;
    let formed = started.elapsed();

    // 1. Every node's files are replaced while the increments go on; each node presents its
    // new certificate to the next new connection (at most one TTL later).
    let acked_before: u64 = ledger.acked().iter().sum();
    let renewed: Vec<IssuedCert> = (0..3).map(|_| member_cert(&ca)).collect();
    for (files, cert) in cluster.files.iter().zip(&renewed) {
        files.install(cert, ca.cert_pem());
    }
    let rotation = Instant::now();
    for (i, cert) in renewed.iter().enumerate() {
        until_presented(&mut cluster, &probe, i, cert).await;
    }
    let rotated_in = rotation.elapsed();
    let new_serials: Vec<String> = renewed.iter().map(|c| serial_hex(&c.cert_pem)).collect();
    for (i, m) in managements.iter().enumerate() {
        let node = &cluster.nodes[i];
        let reloads = metric_at(&http, m, RELOADS).await.unwrap();
        let failures = metric_at(&http, m, RELOAD_FAILURES).await.unwrap();
        assert_eq!(
            (reloads, failures),
            (1.0, 0.0),
            "{}: one reload and no failure (the three files changed together)",
            node.spec.name
        );
        assert!(
            log_lines(
                node,
                "TLS between nodes: files changed; new connections use the new certificate"
            )
            .iter()
            .any(|l| l["fields"]["serial"].as_str() == Some(&new_serials[i])),
            "{} logs its new certificate's serial {}:\n{}",
            node.spec.name,
            new_serials[i],
            node.stderr_tail(20)
        );
    }
    let acked_during: u64 = ledger.acked().iter().sum::<u64>() - acked_before;
    assert!(acked_during > 0, "increments went on during the rotation");

    // 2. The connections between the nodes are replaced: paused, the increments' lanes close;
    // resumed, they reopen, and each node accepts each other's with its new certificate.
    load.pause().await;
    until_user_lanes_closed(&http, &mut cluster).await;
    let acked_at_resume = ledger.acked();
    load.resume();
    until(
        "every node accepted connections from each other with its new certificate, and every \
         counter answered twice more",
        &mut cluster,
        || {
            let (logs, addrs, new_serials, ledger, acked_at_resume) =
                (&logs, &addrs, &new_serials, &ledger, &acked_at_resume);
            async move {
                for (to, log) in logs.iter().enumerate() {
                    for (from, addr) in addrs.iter().enumerate() {
                        if to != from && accepted_with_serial(log, addr, &new_serials[from]) == 0 {
                            return Err(Poll::Wait(format!(
                                "{} accepted no connection from {addr} with its new certificate",
                                addrs[to]
                            )));
                        }
                    }
                }
                let acked = ledger.acked();
                match (0..acked.len()).find(|&i| acked[i] < acked_at_resume[i] + 2) {
                    Some(i) => Err(Poll::Wait(format!(
                        "c{i} answered {} times since the resume",
                        acked[i] - acked_at_resume[i]
                    ))),
                    None => Ok(()),
                }
            }
        },
    )
    .await;

    // 3. Nothing acknowledged was lost.
    load.pause().await;
    let values = ledger
        .check_all(&http, &managements)
        .await
        .unwrap_or_else(|e| panic!("after the rotation: {e}\n{}", cluster.reports()));
    let (acked_total, failures) = {
        let st = ledger.lock();
        assert!(st.violations.is_empty(), "{:?}", st.violations);
        (st.books.acked.iter().sum::<u64>(), st.books.failures)
    };
    eprintln!(
        "rotation: cluster formed and loaded in {formed:?}; every node presented its new \
         certificate {rotated_in:?} after the files were swapped; {acked_during} increments \
         acknowledged meanwhile; {acked_total} acknowledged in all, {failures} unanswered, \
         counters sum to {}",
        values.iter().sum::<u64>()
    );

    // 4. Node 2 gets a certificate from a CA nobody else trusts (it still trusts ours).
    let rogue_ca =
        CertificateAuthority::generate("untrusted ca", Validity::days_from_now(30)).unwrap();
    let rogue = member_cert(&rogue_ca);
    cluster.files[2].install(&rogue, ca.cert_pem());
    until_presented(&mut cluster, &probe, 2, &rogue).await;
    until_user_lanes_closed(&http, &mut cluster).await;
    let others = &managements[..2];
    let before = Refusals::read(&http, others, &managements[2])
        .await
        .unwrap();
    // Every counter through every node at once: the increments that need a new connection
    // to or from node 2 (its counters through the others, the others' through it) open one.
    let answered = burst(&http, &managements, &ledger).await;
    until(
        "the other nodes refuse node 2's certificate both ways, and its connections fail",
        &mut cluster,
        || {
            let (http, before) = (&http, &before);
            let untrusted = &managements[2];
            async move {
                let now = Refusals::read(http, others, untrusted).await?;
                match now.not_grown_since(before, others) {
                    Some(e) => Err(Poll::Wait(e)),
                    None => Ok(()),
                }
            }
        },
    )
    .await;
    assert!(
        answered < COUNTERS * 3,
        "increments that need a connection with node 2 are not answered ({answered} were)"
    );

    // 5. New files from the right CA heal it, without a restart.
    let healed = member_cert(&ca);
    cluster.files[2].install(&healed, ca.cert_pem());
    until_presented(&mut cluster, &probe, 2, &healed).await;
    until(
        "a whole burst of increments is answered",
        &mut cluster,
        || {
            let (http, managements, ledger) = (&http, &managements, &ledger);
            async move {
                let answered = burst(http, managements, ledger).await;
                if answered == COUNTERS * managements.len() {
                    Ok(())
                } else {
                    Err(Poll::Wait(format!("{answered} answered")))
                }
            }
        },
    )
    .await;
    let values = ledger
        .check_all(&http, &managements)
        .await
        .unwrap_or_else(|e| panic!("after healing: {e}\n{}", cluster.reports()));
    {
        let st = ledger.lock();
        assert!(st.violations.is_empty(), "{:?}", st.violations);
        eprintln!(
            "untrusted CA: {answered} of {} increments answered while node 2 was refused; \
             after healing {} acknowledged in all, {} unanswered, counters sum to {}; \
             whole test {:?}",
            COUNTERS * 3,
            st.books.acked.iter().sum::<u64>(),
            st.books.failures,
            values.iter().sum::<u64>(),
            started.elapsed()
        );
    }
    load.stop().await;
    let expected: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let mut refs: Vec<&mut Node> = cluster.nodes.iter_mut().collect();
    wait_all_up(&http, &mut refs, &expected).await;
}

/// Files that cannot be used: what they are, the files (name, contents) installed, the file
/// the node's warning must name, and the cause it must give.
struct Breakage<'a> {
    what: &'a str,
    files: Vec<(&'a str, &'a [u8])>,
    named: &'a str,
    cause: &'a str,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_files_keep_the_old_certificate_in_use_are_counted_once_and_say_why() {
    let http = client();
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("cluster ca", Validity::days_from_now(30)).unwrap();
    let spec = TlsClusterSpec {
        prefix: "unusable",
        n: 3,
        ttl: TTL,
        env: &[],
        args: &[],
    };
    let started = Instant::now();
    let mut cluster = TlsCluster::start(&http, dir.path(), &ca, &spec).await;
    let probe = CertificateProbe::new(&member_cert(&ca));
    const NODE: usize = 1;
    let addr = cluster.nodes[NODE].addr().to_string();
    let management = cluster.nodes[NODE].spec.management.clone();
    let old = cluster.certs[NODE].clone();
    let old_der = der(&old.cert_pem);
    until_presented(&mut cluster, &probe, NODE, &old).await;

    let other_key = member_cert(&ca).key_pem;
    let trust = ca.cert_pem().as_bytes();
    let cases = [
        Breakage {
            what: "garbage in the certificate file",
            files: vec![
                (CERT, b"this is not a certificate\n"),
                (KEY, old.key_pem.as_bytes()),
                (CA, trust),
            ],
            named: CERT,
            cause: "holds no certificate",
        },
        Breakage {
            what: "the certificate file deleted",
            files: vec![(KEY, old.key_pem.as_bytes()), (CA, trust)],
            named: CERT,
            cause: "No such file",
        },
        Breakage {
            what: "the key of another certificate",
            files: vec![
                (CERT, old.cert_pem.as_bytes()),
                (KEY, other_key.as_bytes()),
                (CA, trust),
            ],
            named: KEY,
            cause: "does not belong to the certificate",
        },
    ];
    for (k, case) in cases.iter().enumerate() {
        let Breakage {
            what,
            files,
            named,
            cause,
        } = case;
        let expected_failures = (k + 1) as f64;
        cluster.files[NODE].install_files(files);
        until(
            &format!("{what}: one more failed reload counted"),
            &mut cluster,
            || {
                let (http, addr, management, probe, old_der) =
                    (&http, &addr, &management, &probe, &old_der);
                async move {
                    // Every probe is a new connection: it must succeed, with the old certificate.
                    if probe.presented(addr).await? != *old_der {
                        return Err(Poll::Fail(format!(
                            "{what}: the node presents another certificate"
                        )));
                    }
                    let failures = metric_at(http, management, RELOAD_FAILURES).await?;
                    if failures > expected_failures {
                        return Err(Poll::Fail(format!(
                            "{what}: {failures} failed reloads counted, not one per change"
                        )));
                    }
                    if failures < expected_failures {
                        return Err(Poll::Wait(format!("{failures} failed reloads")));
                    }
                    Ok(())
                }
            },
        )
        .await;
        let node = &cluster.nodes[NODE];
        let warned = log_lines(node, "TLS between nodes: files changed but cannot be used");
        let path = cluster.files[NODE].path(named).display().to_string();
        let error = warned
            .get(k)
            .and_then(|l| l["fields"]["error"].as_str())
            .unwrap_or_else(|| panic!("{what}: no warning {k}:\n{}", node.stderr_tail(20)));
        assert!(
            warned.len() == k + 1 && error.contains(cause) && error.contains(&path),
            "{what}: warned once, naming {path} and why ({cause}): {error}"
        );
        assert_eq!(metric_at(&http, &management, RELOADS).await.unwrap(), 0.0);
    }

    // New connections between nodes still work with the old certificate: a fourth node joins,
    // which takes connections to and from every member.
    let seeds = cluster.seeds();
    let fourth_cert = member_cert(&ca);
    let fourth_files = TlsFiles::create(dir.path(), "unusable3", &fourth_cert, ca.cert_pem());
    let fourth = Node::spawn(fourth_files.apply(NodeSpec::new("unusable3", &seeds), TTL));
    cluster.nodes.push(fourth);
    let expected = cluster.addrs();
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    {
        let mut refs: Vec<&mut Node> = cluster.nodes.iter_mut().collect();
        wait_all_up(&http, &mut refs, &expected).await;
    }
    // Every member lists the newcomer Up and reachable: heartbeats flow both ways between it
    // and the node with broken files, over connections each opened after the breakage. Those
    // of the broken node present its old certificate, as new connections still do:
    assert_eq!(
        probe.presented(&addr).await.expect("a new connection"),
        old_der
    );
    assert_eq!(
        metric_at(&http, &management, RELOAD_FAILURES)
            .await
            .unwrap(),
        3.0,
        "new connections with broken files count no further failures"
    );
    eprintln!("unusable files: whole test {:?}", started.elapsed());
}
