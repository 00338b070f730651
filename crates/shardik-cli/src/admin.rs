//! `shardik admin`: operations on a cluster's store while its nodes are stopped.
//!
//! `remove-internal-data` (Akka's `RemoveInternalClusterShardingData`) removes what sharding
//! keeps in the store for one entity kind outside its entities' own data: the remembered
//! entities, the kind's leases and their fences, and the commands reliable producers hold for
//! the kind in their durable queues. Journals, snapshots, durable state and the entities'
//! delivery marks stay. It is for a cluster that is stopped (after two clusters ran on one
//! store by mistake, say), so it refuses while any node holds one of the kind's leases.

use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use shardik_runtime::config::Settings;

/// `shardik admin ...`.
#[derive(Args, Debug)]
pub struct AdminArgs {
    #[command(subcommand)]
    command: AdminCmd,
}

#[derive(Subcommand, Debug)]
enum AdminCmd {
    /// Remove an entity kind's remembered entities, leases, fences and reliable producers'
    /// queued commands from the store. Run it only while no node runs the kind: it refuses
    /// while one of the kind's leases is held.
    #[command(name = "remove-internal-data")]
    RemoveInternalData(RemoveArgs),
}

/// What `remove-internal-data` takes.
#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The entity kind (its name as given to `EntityKind`).
    #[arg(long)]
    kind: String,
    /// The store: `sqlite:PATH` (the file must exist) or `postgres://user@host:port/db`.
    #[arg(long)]
    store: String,
    /// The cluster's name, which the kind's lease names start with (default: the configured
    /// `cluster.name`).
    #[arg(long)]
    cluster: Option<String>,
    /// A configuration file layered over the defaults, for `cluster.name`.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
}

/// Runs `shardik admin ...`.
pub fn run(args: AdminArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AdminCmd::RemoveInternalData(args) => remove_internal_data(args),
    }
}

/// The kind's lease names among `names` (all starting with `{cluster}-`): its coordinator's,
/// and its shards' (`{cluster}-shard-{kind}-{shard}`). A shard id with a `-` is left out: the
/// name could as well be a shard of a kind whose name continues `{kind}-...`.
fn kind_leases(cluster: &str, kind: &str, names: Vec<String>) -> (Vec<String>, Vec<String>) {
    let coordinator = format!("{cluster}-coordinator-{kind}");
    let shard_prefix = format!("{cluster}-shard-{kind}-");
    let (mut ours, mut unsure) = (Vec::new(), Vec::new());
    for name in names {
        if name == coordinator {
            ours.push(name);
        } else if let Some(shard) = name.strip_prefix(&shard_prefix) {
            if shard.contains('-') {
                unsure.push(name);
            } else {
                ours.push(name);
            }
        }
    }
    (ours, unsure)
}

fn remove_internal_data(args: RemoveArgs) -> anyhow::Result<ExitCode> {
    let cluster = match args.cluster {
        Some(c) => c,
        None => {
            Settings::load(args.config.as_deref())
                .context("invalid configuration")?
                .cluster
                .name
        }
    };
    if args.kind.is_empty() {
        bail!("--kind names no kind");
    }
    let shown = shardik_persistence::redact_store_url(&args.store);
    match args.store.split_once(':') {
        Some(("sqlite", path)) if !std::path::Path::new(path).is_file() => {
            bail!("no store at {shown}: the file does not exist (nothing to remove)");
        }
        Some(("memory", _)) => bail!("a memory: store lives in its process; nothing to remove"),
        _ => {}
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let store = shardik_persistence::open_store(&args.store)
            .await
            .with_context(|| format!("cannot open the store {shown}"))?;
        let names = store
            .lease_names(&format!("{cluster}-"))
            .await
            .context("cannot list the leases")?;
        let (leases, unsure) = kind_leases(&cluster, &args.kind, names);
        for name in &unsure {
            eprintln!(
                "left alone: lease {name:?} (a shard id with a '-', or another kind's lease)"
            );
        }
        let removed = store
            .remove_kind_data(&args.kind, &leases)
            .await
            .context("the removal failed; nothing was removed")?;
        let result = match removed {
            Ok(removed) => {
                println!(
                    "removed kind {:?} from {shown}: {} remembered entities, {} leases, {} fences, \
                     {} queued commands",
                    args.kind, removed.remembered, removed.leases, removed.fences, removed.queued
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(held) => {
                eprintln!(
                    "refused: the kind {:?} may be running: {held}. Stop every node of the \
                     cluster (or wait for the lease to expire), then run this again. Nothing \
                     was removed.",
                    args.kind
                );
                Ok(ExitCode::from(1))
            }
        };
        store.close().await.ok();
        result
    })
}

#[cfg(test)]
mod tests {
    use super::kind_leases;

    #[test]
    fn a_kinds_leases_are_its_coordinators_and_its_shards() {
        let names = [
            "c-coordinator-cart",
            "c-shard-cart-0",
            "c-shard-cart-17",
            "c-shard-cart-items-3",
            "c-shard-carts-1",
            "c-coordinator-cart-items",
            "c-shard-other-1",
        ]
        .map(String::from)
        .to_vec();
        let (ours, unsure) = kind_leases("c", "cart", names);
        assert_eq!(
            ours,
            ["c-coordinator-cart", "c-shard-cart-0", "c-shard-cart-17"]
        );
        assert_eq!(unsure, ["c-shard-cart-items-3"]);
    }
}
