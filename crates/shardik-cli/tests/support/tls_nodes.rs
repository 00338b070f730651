//! Nodes with mutual TLS on their cluster port, their certificate files laid out and replaced
//! as the kubelet does for a Secret volume, so that a test rotates them the way a node in
//! Kubernetes sees it.
//!
//! A node's directory holds `tls.crt`, `tls.key` and `ca.crt` as symbolic links into `..data`,
//! itself a link to a directory that holds one version of the three files. A new version is
//! written to a new directory, and `..data` is swapped to it with one `rename`: the three files
//! change together, and a reader never sees half a file.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use shardik_runtime::tls::certs::{CertificateAuthority, IssuedCert, NodeCertRequest};

use super::{BOUND, Node, NodeSpec, POLL, reports, wait_all_up};

/// The cluster name of the nodes (`cluster.name`'s default), which their certificates name.
pub const CLUSTER: &str = "shardik";

/// The trust domain of the certificates (`transport.tls.trust-domain`'s default).
pub const TRUST_DOMAIN: &str = "shardik";

/// The names of the three files, as a `kubernetes.io/tls` Secret (with cert-manager's
/// `ca.crt`) names them.
pub const CERT: &str = "tls.crt";
/// See [`CERT`].
pub const KEY: &str = "tls.key";
/// See [`CERT`].
pub const CA: &str = "ca.crt";

/// A certificate for a member of [`CLUSTER`] at 127.0.0.1, valid five days.
pub fn member_cert(ca: &CertificateAuthority) -> IssuedCert {
    ca.issue(&NodeCertRequest::for_node(
        TRUST_DOMAIN,
        CLUSTER,
        "127.0.0.1",
        5,
    ))
    .expect("a node certificate")
}

/// A node spec with TLS on, a certificate for 127.0.0.1 issued by `ca`, trusting the CA
/// certificates `trust` (PEM); its files live in `dir/name/` and keep the default
/// `ssl-context-cache-ttl` (tests that rotate use [`TlsFiles`] directly).
pub fn tls_node(
    dir: &Path,
    name: &str,
    seeds: &[String],
    ca: &CertificateAuthority,
    trust: &str,
) -> NodeSpec {
    TlsFiles::create(dir, name, &member_cert(ca), trust).apply(NodeSpec::new(name, seeds), "1m")
}

/// One node's certificate, key and trusted CAs, as a Secret volume.
pub struct TlsFiles {
    dir: PathBuf,
    versions: AtomicU32,
}

impl TlsFiles {
    /// Makes `parent/name/` with `cert` (and its key), trusting the CA certificates `trust`
    /// (PEM).
    pub fn create(parent: &Path, name: &str, cert: &IssuedCert, trust: &str) -> TlsFiles {
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).expect("create the node's TLS directory");
        let files = TlsFiles {
            dir,
            versions: AtomicU32::new(0),
        };
        files.install(cert, trust);
        for file in [CERT, KEY, CA] {
            symlink(Path::new("..data").join(file), files.dir.join(file))
                .expect("link a TLS file into ..data");
        }
        files
    }

    /// Replaces the certificate, key and trusted CAs at once.
    pub fn install(&self, cert: &IssuedCert, trust: &str) {
        self.install_files(&[
            (CERT, cert.cert_pem.as_bytes()),
            (KEY, cert.key_pem.as_bytes()),
            (CA, trust.as_bytes()),
        ]);
    }

    /// Replaces the files at once with exactly `files` (name, contents): a file left out is
    /// gone (its link dangles), as if deleted.
    pub fn install_files(&self, files: &[(&str, &[u8])]) {
        let version = format!("..v{}", self.versions.fetch_add(1, Ordering::Relaxed));
        let version_dir = self.dir.join(&version);
        std::fs::create_dir(&version_dir).expect("create a version directory");
        for (name, contents) in files {
            std::fs::write(version_dir.join(name), contents).expect("write a TLS file");
        }
        let staged = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&staged);
        symlink(&version, &staged).expect("link the new version");
        std::fs::rename(&staged, self.dir.join("..data")).expect("swap ..data");
    }

    /// The path a node reads its certificate from.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// `spec` with TLS on and these files, and `transport.tls.ssl-context-cache-ttl` = `ttl`.
    pub fn apply(&self, spec: NodeSpec, ttl: &str) -> NodeSpec {
        let path = |file: &str| self.path(file).display().to_string();
        spec.env("SHARDIK_TRANSPORT__TLS__ENABLED", "on")
            .env("SHARDIK_TRANSPORT__TLS__CERT_FILE", &path(CERT))
            .env("SHARDIK_TRANSPORT__TLS__KEY_FILE", &path(KEY))
            .env("SHARDIK_TRANSPORT__TLS__CA_CERT_FILE", &path(CA))
            .env("SHARDIK_TRANSPORT__TLS__SSL_CONTEXT_CACHE_TTL", ttl)
    }
}

/// What [`TlsCluster::start`] starts.
#[derive(Copy, Clone, Debug)]
pub struct TlsClusterSpec<'a> {
    /// Node names are this and their index.
    pub prefix: &'a str,
    /// How many nodes (the first two are the seeds).
    pub n: usize,
    /// `transport.tls.ssl-context-cache-ttl`.
    pub ttl: &'a str,
    /// Environment on top of the fast settings and TLS.
    pub env: &'a [(&'a str, &'a str)],
    /// Further command-line arguments.
    pub args: &'a [&'a str],
}

/// A cluster of TLS nodes: the processes, their files, and the certificates they started with.
pub struct TlsCluster {
    /// The nodes; the first two are the seeds.
    pub nodes: Vec<Node>,
    /// Each node's files.
    pub files: Vec<TlsFiles>,
    /// Each node's first certificate.
    pub certs: Vec<IssuedCert>,
}

impl TlsCluster {
    /// Starts the nodes `spec` describes, with certificates from `ca` (files under `dir`),
    /// and waits until every one lists all of them as Up.
    pub async fn start(
        http: &reqwest::Client,
        dir: &Path,
        ca: &CertificateAuthority,
        spec: &TlsClusterSpec<'_>,
    ) -> TlsCluster {
        let TlsClusterSpec {
            prefix,
            n,
            ttl,
            env,
            args,
        } = *spec;
        let certs: Vec<IssuedCert> = (0..n).map(|_| member_cert(ca)).collect();
        let files: Vec<TlsFiles> = certs
            .iter()
            .enumerate()
            .map(|(i, c)| TlsFiles::create(dir, &format!("{prefix}{i}"), c, ca.cert_pem()))
            .collect();
        let specs: Vec<NodeSpec> = files
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let spec = f.apply(NodeSpec::new(&format!("{prefix}{i}"), &[]), ttl);
                let spec = env.iter().fold(spec, |s, (k, v)| s.env(k, v));
                args.iter().fold(spec, |s, a| s.arg(a))
            })
            .collect();
        let seeds: Vec<String> = specs.iter().take(2).map(|s| s.bind.clone()).collect();
        let mut nodes: Vec<Node> = specs
            .into_iter()
            .map(|mut s| {
                s.seeds = seeds.clone();
                Node::spawn(s)
            })
            .collect();
        let expected = addrs(&nodes);
        let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
        let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
        wait_all_up(http, &mut refs, &expected).await;
        TlsCluster {
            nodes,
            files,
            certs,
        }
    }

    /// The cluster addresses of the nodes.
    pub fn addrs(&self) -> Vec<String> {
        addrs(&self.nodes)
    }

    /// The seeds' cluster addresses.
    pub fn seeds(&self) -> Vec<String> {
        self.addrs().into_iter().take(2).collect()
    }

    /// The management addresses of the nodes.
    pub fn managements(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| n.spec.management.clone())
            .collect()
    }

    /// The reports of every node, for a failure message.
    pub fn reports(&mut self) -> String {
        reports(&mut self.nodes.iter_mut().collect::<Vec<_>>())
    }
}

fn addrs(nodes: &[Node]) -> Vec<String> {
    nodes.iter().map(|n| n.addr().to_string()).collect()
}

/// The JSON log lines of `node` whose message starts with `message`.
pub fn log_lines(node: &Node, message: &str) -> Vec<serde_json::Value> {
    log_lines_in(&node.log_path(), message)
}

/// The JSON log lines in the node log file `log` whose message starts with `message` (for
/// checks that cannot borrow the node).
pub fn log_lines_in(log: &Path, message: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(message))
        })
        .collect()
}

/// Polls `check` until it returns `Ok`, failing with the cluster's reports after [`BOUND`];
/// an `Err` of [`Poll::Fail`] fails at once.
pub async fn until<T, F, Fut>(what: &str, cluster: &mut TlsCluster, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Poll>>,
{
    let start = std::time::Instant::now();
    loop {
        let last = match check().await {
            Ok(t) => return t,
            Err(Poll::Fail(e)) => panic!("while waiting until {what}: {e}\n{}", cluster.reports()),
            Err(Poll::Wait(e)) => e,
        };
        if start.elapsed() >= BOUND {
            panic!(
                "timed out after {BOUND:?} waiting until {what}; last: {last}\n{}",
                cluster.reports()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Why a poll of [`until`] did not succeed.
#[derive(Debug)]
pub enum Poll {
    /// Not yet: poll again.
    Wait(String),
    /// Something that must never happen did: fail now.
    Fail(String),
}

impl From<String> for Poll {
    fn from(e: String) -> Poll {
        Poll::Wait(e)
    }
}
