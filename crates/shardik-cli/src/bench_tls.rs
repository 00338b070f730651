//! The TLS side of `shardik bench sharding remote`: which transports a run measures, the
//! certificates its nodes use for mutual TLS, and the count of TLS sessions that shows a run
//! really went over TLS.
//!
//! Every node of a benchmark binds 127.0.0.1, so one node certificate (IP SAN 127.0.0.1, the
//! cluster's URI SAN) issued by a throwaway CA serves them all: the benchmark writes it to a
//! temporary directory and hands the directory to its peer process (`--tls-dir`), which loads
//! the same files. The files are those `shardik certs` writes, so a node loads them through
//! the same `transport.tls.*` settings and [`shardik_runtime::tls::TlsContext`] as
//! `shardik node` does.

use std::path::{Path, PathBuf};

use anyhow::Context;
use shardik_runtime::config::Settings;
use shardik_runtime::metrics::{self as m, Metrics};
use shardik_runtime::tls::certs::{CertificateAuthority, NodeCertRequest, Validity};

/// The host every benchmark node binds, and so the one its certificate names.
const HOST: &str = "127.0.0.1";
/// The trust domain of the benchmark's certificates (the default of `transport.tls`).
const TRUST_DOMAIN: &str = "shardik";

/// How the nodes of a run talk to each other.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Plain TCP (the default of `shardik node`).
    Plain,
    /// Mutual TLS 1.3 (rustls, ring).
    Tls,
}

impl Transport {
    /// The name in `--transport`, the JSON and the text lines.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::Plain => "plain",
            Transport::Tls => "tls",
        }
    }
}

/// What `--transport` asks for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TransportChoice {
    /// Plain TCP only.
    Plain,
    /// Mutual TLS only.
    Tls,
    /// Plain TCP, then mutual TLS, in the same run, and their ratios.
    Both,
}

impl TransportChoice {
    /// The transports to measure, in order.
    pub(crate) fn transports(self) -> &'static [Transport] {
        match self {
            TransportChoice::Plain => &[Transport::Plain],
            TransportChoice::Tls => &[Transport::Tls],
            TransportChoice::Both => &[Transport::Plain, Transport::Tls],
        }
    }
}

/// A directory of certificate files for benchmark nodes: `ca.pem` and, for [`HOST`],
/// `127.0.0.1.pem` and `127.0.0.1-key.pem`.
pub(crate) struct BenchCerts {
    dir: PathBuf,
    /// Removes the directory when the certificates were made here (not when a peer was
    /// handed its parent's directory).
    _made: Option<tempfile::TempDir>,
}

impl BenchCerts {
    /// A new CA and a node certificate for cluster `cluster`, in a new temporary directory.
    pub(crate) fn generate(cluster: &str) -> anyhow::Result<BenchCerts> {
        let made = tempfile::Builder::new()
            .prefix("shardik-bench-tls")
            .tempdir()
            .context("cannot create a directory for the benchmark's certificates")?;
        let ca =
            CertificateAuthority::generate("shardik benchmark CA", Validity::days_from_now(1))?;
        let node = ca.issue(&NodeCertRequest::for_node(TRUST_DOMAIN, cluster, HOST, 1))?;
        let certs = BenchCerts {
            dir: made.path().to_owned(),
            _made: None,
        };
        for (path, pem) in [
            (certs.ca_file(), ca.cert_pem()),
            (certs.cert_file(), node.cert_pem.as_str()),
            (certs.key_file(), node.key_pem.as_str()),
        ] {
            std::fs::write(&path, pem)
                .with_context(|| format!("cannot write `{}`", path.display()))?;
        }
        Ok(BenchCerts {
            _made: Some(made),
            ..certs
        })
    }

    /// The certificates another process made in `dir` (a peer's `--tls-dir`).
    pub(crate) fn in_dir(dir: &Path) -> BenchCerts {
        BenchCerts {
            dir: dir.to_owned(),
            _made: None,
        }
    }

    /// The directory, for a peer's `--tls-dir`.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn cert_file(&self) -> PathBuf {
        self.dir.join(format!("{HOST}.pem"))
    }

    fn key_file(&self) -> PathBuf {
        self.dir.join(format!("{HOST}-key.pem"))
    }

    /// Turns mutual TLS on in `settings` with these files (as the `transport.tls.*` keys
    /// would).
    pub(crate) fn apply(&self, settings: &mut Settings) {
        let tls = &mut settings.transport.tls;
        tls.enabled = true;
        tls.require_mutual_authentication = true;
        tls.trust_domain = TRUST_DOMAIN.to_string();
        tls.cert_file = self.cert_file().display().to_string();
        tls.key_file = self.key_file().display().to_string();
        tls.ca_cert_file = self.ca_file().display().to_string();
    }
}

/// TLS sessions this process's transport established so far
/// (`shardik_transport_tls_handshakes_total`), by direction.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub(crate) struct TlsSessions {
    pub(crate) inbound: f64,
    pub(crate) outbound: f64,
}

impl TlsSessions {
    /// The counts now, from this process's metrics recorder (zero before any node started).
    pub(crate) fn now() -> TlsSessions {
        let Ok(handle) = Metrics::install() else {
            return TlsSessions::default();
        };
        let text = handle.render();
        TlsSessions {
            inbound: sample(&text, "inbound"),
            outbound: sample(&text, "outbound"),
        }
    }

    /// The sessions established since `before`.
    pub(crate) fn since(self, before: TlsSessions) -> TlsSessions {
        TlsSessions {
            inbound: self.inbound - before.inbound,
            outbound: self.outbound - before.outbound,
        }
    }
}

/// The value of the TLS session counter for `direction` in a Prometheus text rendering.
fn sample(text: &str, direction: &str) -> f64 {
    let prefix = format!(
        "{}{{direction=\"{direction}\"}} ",
        m::TRANSPORT_TLS_HANDSHAKES_TOTAL
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_measures_plain_first_then_tls() {
        assert_eq!(
            TransportChoice::Both.transports(),
            &[Transport::Plain, Transport::Tls]
        );
        assert_eq!(TransportChoice::Tls.transports(), &[Transport::Tls]);
    }

    #[test]
    fn session_counts_are_read_by_direction() {
        let text = "# TYPE shardik_transport_tls_handshakes_total counter\n\
                    shardik_transport_tls_handshakes_total{direction=\"inbound\"} 3\n\
                    shardik_transport_tls_handshakes_total{direction=\"outbound\"} 5\n";
        assert_eq!(sample(text, "inbound"), 3.0);
        assert_eq!(sample(text, "outbound"), 5.0);
        assert_eq!(sample("", "outbound"), 0.0);
    }

    /// The files load as a node's TLS configuration would load them.
    #[test]
    fn the_certificates_make_a_tls_context_for_the_cluster() {
        let certs = BenchCerts::generate("bench-cluster").unwrap();
        let mut settings = Settings::load(None).unwrap();
        settings.cluster.name = "bench-cluster".to_string();
        certs.apply(&mut settings);
        let ctx = shardik_runtime::tls::TlsContext::from_settings(&settings)
            .unwrap()
            .expect("TLS is on");
        assert_eq!(ctx.cluster_uri(), "spiffe://shardik/cluster/bench-cluster");
        assert!(ctx.requires_client_certificate());
        let dir = certs.dir().to_owned();
        drop(certs);
        assert!(!dir.exists(), "the temporary directory is removed");
    }
}
