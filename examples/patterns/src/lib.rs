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
/// waits until all are Up. Settings come from the defaults and `SHARDIK_*` variables. A node
/// opens its store (`Node::persistence`: by default `sqlite:{persistence.data-dir}/shardik.db`,
/// one file the nodes of a machine share) when a program first asks for it.
pub async fn start_cluster(addresses: &[Address]) -> Result<Vec<Node>, Box<dyn std::error::Error>> {
    let mut nodes = Vec::new();
    for address in addresses {
        let node = Node::builder(Settings::load(None)?)
            .bind(address.clone())
            .seeds([addresses[0].clone()])
            .start()
            .await?;
        node.wait_until_up().await?;
        nodes.push(node);
    }
    Ok(nodes)
}
