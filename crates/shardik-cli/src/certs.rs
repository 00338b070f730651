//! `shardik certs`: a cluster CA and node certificates that follow the TLS identity rule
//! (see `shardik_runtime::tls`), written as PEM files ready for `transport.tls.*`.
//!
//! With `DIR/ca.pem` and `DIR/ca-key.pem` already there, the command issues new node
//! certificates from that CA (renewal, new nodes) instead of making a new one. Files are
//! written to a temporary name and renamed into place, so a running node that re-reads them
//! (rotation) never sees half a file; private keys are created readable by the owner only.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use shardik_runtime::tls::certs::{CertificateAuthority, NodeCertRequest, Validity};
use shardik_runtime::tls::{cluster_uri, is_trust_domain, is_uri_cluster_name, server_name};

/// Arguments of `shardik certs`.
#[derive(Args, Debug)]
pub struct CertsArgs {
    /// Directory for the files (created if missing). Holds `ca.pem`, `ca-key.pem` and, for
    /// each node, `NODE.pem` and `NODE-key.pem`.
    #[arg(long)]
    dir: PathBuf,
    /// The cluster's name (`cluster.name`): node certificates carry the URI SAN
    /// spiffe://TRUST-DOMAIN/cluster/NAME.
    #[arg(long)]
    cluster_name: String,
    /// The SPIFFE trust domain (`transport.tls.trust-domain`).
    #[arg(long, default_value = "shardik")]
    trust_domain: String,
    /// How many days the node certificates are valid. A new CA is valid for ten years, or
    /// this long if that is longer.
    #[arg(long, default_value_t = 365)]
    days: u32,
    /// Host names or IP addresses the nodes are dialled at (as in their advertised address),
    /// one certificate each; `*.DOMAIN` makes one certificate for every host one label below
    /// DOMAIN (written as `wildcard.DOMAIN.pem`), which all pods of a Deployment can share.
    #[arg(required = true, value_name = "NODE")]
    nodes: Vec<String>,
}

/// A new CA's lifetime unless `--days` asks for longer.
const CA_DAYS: u32 = 3650;

/// Runs the command.
pub fn run(args: CertsArgs) -> anyhow::Result<ExitCode> {
    if !is_uri_cluster_name(&args.cluster_name) {
        bail!(
            "--cluster-name `{}`: expected the cluster's name, ASCII letters, digits, `.`, `-` \
             and `_`",
            args.cluster_name
        );
    }
    if !is_trust_domain(&args.trust_domain) {
        bail!(
            "--trust-domain `{}`: expected lower-case ASCII letters, digits, `.`, `-` and `_`",
            args.trust_domain
        );
    }
    if args.days == 0 {
        bail!("--days must be at least 1");
    }
    for node in &args.nodes {
        let file = file_stem(node);
        let named = match node.strip_prefix("*.") {
            // A wildcard covers names, never addresses.
            Some(domain) => {
                domain.parse::<std::net::IpAddr>().is_err() && server_name(domain).is_some()
            }
            None => server_name(node).is_some(),
        };
        if !named || file.contains('/') || file.starts_with('.') {
            bail!(
                "NODE `{node}`: expected a host name, an IP address, or `*.` and a domain \
                 (one certificate for every host one label below it)"
            );
        }
    }
    fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create directory `{}`", args.dir.display()))?;

    let ca_cert_path = args.dir.join("ca.pem");
    let ca_key_path = args.dir.join("ca-key.pem");
    let (ca, reused) = match (ca_cert_path.exists(), ca_key_path.exists()) {
        (true, true) => {
            let cert = read(&ca_cert_path)?;
            let key = read(&ca_key_path)?;
            let ca = CertificateAuthority::from_pem(&cert, &key).with_context(|| {
                format!(
                    "cannot issue from the CA in `{}` and `{}`",
                    ca_cert_path.display(),
                    ca_key_path.display()
                )
            })?;
            (ca, true)
        }
        (false, false) => {
            let ca = CertificateAuthority::generate(
                &format!("shardik CA for cluster {}", args.cluster_name),
                Validity::days_from_now(CA_DAYS.max(args.days)),
            )?;
            write_file(&ca_key_path, ca.key_pem(), true)?;
            write_file(&ca_cert_path, ca.cert_pem(), false)?;
            (ca, false)
        }
        (cert, _) => bail!(
            "`{}` exists but `{}` does not: both or neither must be there (remove the other \
             to make a new CA)",
            if cert { &ca_cert_path } else { &ca_key_path }.display(),
            if cert { &ca_key_path } else { &ca_cert_path }.display(),
        ),
    };
    println!(
        "{} CA: {}",
        if reused { "using the" } else { "made a new" },
        ca_cert_path.display()
    );

    let identity = cluster_uri(&args.trust_domain, &args.cluster_name);
    for node in &args.nodes {
        let request =
            NodeCertRequest::for_node(&args.trust_domain, &args.cluster_name, node, args.days);
        let issued = ca
            .issue(&request)
            .with_context(|| format!("NODE `{node}`"))?;
        let stem = file_stem(node);
        let cert_path = args.dir.join(format!("{stem}.pem"));
        let key_path = args.dir.join(format!("{stem}-key.pem"));
        // The key first: a node that re-reads its files between the two renames sees a new
        // key with the old certificate, refuses that pair and keeps its current one.
        write_file(&key_path, &issued.key_pem, true)?;
        write_file(&cert_path, &issued.cert_pem, false)?;
        println!(
            "{node}: {} (key {}), identity {identity}, valid {} days",
            cert_path.display(),
            key_path.display(),
            args.days
        );
    }
    println!(
        "\nFor each node, set:\n[transport.tls]\nenabled = \"on\"\ncert-file = \"{dir}/NODE.pem\"\n\
         key-file = \"{dir}/NODE-key.pem\"\nca-cert-file = \"{ca}\"\ntrust-domain = \"{td}\"\n\
         (and cluster.name = \"{name}\")",
        dir = args.dir.display(),
        ca = ca_cert_path.display(),
        td = args.trust_domain,
        name = args.cluster_name
    );
    Ok(ExitCode::SUCCESS)
}

/// The file name part for a node: its host without IPv6 brackets, and `wildcard.DOMAIN` for
/// `*.DOMAIN` (a `*` in a file name is a trap in every shell).
fn file_stem(node: &str) -> String {
    if let Some(domain) = node.strip_prefix("*.") {
        return format!("wildcard.{domain}");
    }
    node.strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(node)
        .to_string()
}

fn read(path: &Path) -> anyhow::Result<String> {
    fs::read_to_string(path).with_context(|| format!("cannot read `{}`", path.display()))
}

/// Writes `contents` to a temporary file beside `path` and renames it over `path`. A private
/// file is created with mode 0600 before anything is written to it.
fn write_file(path: &Path, contents: &str, private: bool) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = fs::remove_file(&tmp);
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options
        .open(&tmp)
        .with_context(|| format!("cannot create `{}`", tmp.display()))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write `{}`", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot write `{}`", path.display()))?;
    Ok(())
}
