//! A cluster singleton: one instance in the whole cluster, on the oldest node, reached the
//! same way from every node. When that node leaves, the singleton starts on the next oldest.
//!
//! ```sh
//! cargo run -p patterns --bin singleton
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik::{ClusterSingleton, Entity, EntityContext, ReplyTo, SingletonSettings};

/// Hands out ticket numbers, one sequence for the whole cluster (kept in memory here: a
/// singleton that must not lose its count across moves would be a durable entity).
struct TicketDesk {
    next: u64,
}

#[derive(Serialize, Deserialize)]
enum Command {
    /// The next ticket, and the node that handed it out.
    Take(ReplyTo<(u64, String)>),
}

impl Entity for TicketDesk {
    type Command = Command;
    async fn handle(&mut self, Command::Take(reply_to): Command, ctx: &mut EntityContext<Self>) {
        self.next += 1;
        reply_to.send((self.next, ctx.node().address.to_string()));
    }
}

const ASK: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addresses = patterns::addresses(2)?;
    let mut nodes = patterns::start_cluster(&addresses).await?;
    let mut desks = Vec::new();
    for node in &nodes {
        let desk = ClusterSingleton::init(
            node.sharding(),
            SingletonSettings::new("ticket-desk"),
            || TicketDesk { next: 0 },
        )?;
        desks.push(desk);
    }
    // From both nodes: one sequence, on the oldest node (the first).
    for desk in &desks {
        let (ticket, at) = desk.ask(Command::Take, ASK).await?;
        let which = if at == addresses[0].to_string() {
            "first"
        } else {
            "second"
        };
        println!("ticket {ticket} from the {which} node");
    }
    let second = nodes.pop().expect("two nodes");
    let first = nodes.pop().expect("two nodes");
    println!("first node: {:?}", first.leave().await);
    // The singleton starts again on the second node (its count starts over: it was in memory).
    let (ticket, at) = desks[1].ask(Command::Take, ASK).await?;
    let which = if at == addresses[1].to_string() {
        "second"
    } else {
        "first"
    };
    println!("after the leave: ticket {ticket} from the {which} node");
    println!("second node: {:?}", second.leave().await);
    Ok(())
}
