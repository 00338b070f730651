//! What the pattern examples share: starting the nodes of a small cluster in one process.
//!
//! Each program in `src/bin` is one behaviour of cluster sharding, written against the
//! `shardik` facade alone; this file only saves each of them the same dozen lines. Run one
//! with `cargo run -p patterns --bin event-sourced` (the addresses default to
//! `127.0.0.1:2552` and `127.0.0.1:2553`).

use shardik::{Address, Node, Settings};

/// The addresses given on the command line, or `127.0.0.1:2552`, `127.0.0.1:2553`, ... for
/// `n` nodes.
pub fn addresses(n: usize) -> Result<Vec<Address>, Box<dyn std::error::Error>> {
    let given: Vec<String> = std::env::args().skip(1).collect();
    let texts: Vec<String> = if given.is_empty() {
        (0..n).map(|i| format!("127.0.0.1:{}", 2552 + i)).collect()
    } else {
        given
    };
    if texts.len() != n {
        return Err(format!("give {n} addresses (HOST:PORT), or none").into());
    }
    Ok(texts.iter().map(|t| t.parse()).collect::<Result<_, _>>()?)
}

/// Starts one node per address, the first forming the cluster and the others joining it, and
/// waits until all are Up. Settings come from the defaults and `SHARDIK_*` variables. The
/// nodes open no store; a program with durable entities starts them with
/// [`start_durable_cluster`].
pub async fn start_cluster(addresses: &[Address]) -> Result<Vec<Node>, Box<dyn std::error::Error>> {
    start(addresses, false).await
}

/// As [`start_cluster`], for programs with durable entities: each node opens its store
/// (`Node::persistence`: by default `sqlite:{persistence.data-dir}/shardik.db`, one file the
/// nodes of a machine share) before it joins, so that a member on another store refuses it
/// instead of letting durable entities move to a node that lacks their history.
pub async fn start_durable_cluster(
    addresses: &[Address],
) -> Result<Vec<Node>, Box<dyn std::error::Error>> {
    start(addresses, true).await
}

async fn start(
    addresses: &[Address],
    durable: bool,
) -> Result<Vec<Node>, Box<dyn std::error::Error>> {
    let mut nodes = Vec::new();
    for address in addresses {
        let mut builder = Node::builder(Settings::load(None)?)
            .bind(address.clone())
            .seeds([addresses[0].clone()]);
        if durable {
            builder = builder.persistence();
        }
        let node = builder.start().await?;
        node.wait_until_up().await?;
        nodes.push(node);
    }
    Ok(nodes)
}
