//! A sharded daemon process: a fixed number of workers (say, one per partition of a stream to
//! consume) kept running across the cluster, spread over the nodes, and started again on the
//! others when a node leaves, without anyone sending them a message.
//!
//! ```sh
//! cargo run -p patterns --bin daemon
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik::{Entity, EntityContext, ReplyTo, ShardedDaemonProcess};

/// Would consume partition `index`.
struct Consumer {
    #[allow(dead_code)] // what a real consumer would read
    index: u32,
}

#[derive(Serialize, Deserialize)]
enum Command {
    /// The node the worker runs on.
    Where(ReplyTo<String>),
}

impl Entity for Consumer {
    type Command = Command;
    async fn handle(&mut self, Command::Where(reply_to): Command, ctx: &mut EntityContext<Self>) {
        reply_to.send(ctx.node().address.to_string());
    }
}

const WORKERS: u32 = 4;
const ASK: Duration = Duration::from_secs(10);

/// How many workers run on each node.
async fn spread(
    daemon: &ShardedDaemonProcess<Consumer>,
) -> Result<BTreeMap<String, u32>, Box<dyn std::error::Error>> {
    let mut per_node = BTreeMap::new();
    for index in 0..daemon.workers() {
        let worker = daemon.worker(index).expect("an index below workers()");
        *per_node
            .entry(worker.ask(Command::Where, ASK).await?)
            .or_default() += 1;
    }
    Ok(per_node)
}

/// "2 on 127.0.0.1:2552, 2 on 127.0.0.1:2553".
fn describe(per_node: &BTreeMap<String, u32>) -> String {
    let parts: Vec<String> = per_node
        .iter()
        .map(|(node, n)| format!("{n} on {node}"))
        .collect();
    parts.join(", ")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut nodes = patterns::start_cluster(&patterns::addresses(2)?).await?;
    let mut daemons = Vec::new();
    for node in &nodes {
        let daemon = ShardedDaemonProcess::init(node.sharding(), "consumers", WORKERS, |index| {
            Consumer { index }
        })?;
        daemons.push(daemon);
    }
    // Each worker is its own shard: the coordinator spreads them like any shards (and
    // rebalances them if the first node took them all before the second registered).
    let per_node = spread(&daemons[1]).await?;
    println!("running: {}", describe(&per_node));
    let second = nodes.pop().expect("two nodes");
    let first = nodes.pop().expect("two nodes");
    println!("first node: {:?}", first.leave().await);
    println!("after the leave: {}", describe(&spread(&daemons[1]).await?));
    println!("second node: {:?}", second.leave().await);
    Ok(())
}
