//! The smallest shardik program: one node that forms a cluster by itself, a sharded counter,
//! a tell and an ask, and a graceful leave.
//!
//! ```sh
//! cargo run -p counter -- 127.0.0.1:2552
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik::{Entity, EntityContext, EntityKind, EntityTypeKey, Node, ReplyTo, Settings};

#[derive(Serialize, Deserialize)]
enum Cmd {
    Add(u64),
    // Asked: the answer goes through the ReplyTo the command carries.
    Get(ReplyTo<u64>),
}

#[derive(Default)]
struct Counter(u64);

impl Entity for Counter {
    type Command = Cmd;
    async fn handle(&mut self, cmd: Cmd, _ctx: &mut EntityContext<Self>) {
        match cmd {
            Cmd::Add(n) => self.0 += n,
            Cmd::Get(reply_to) => reply_to.send(self.0),
        }
    }
}

const COUNTER: EntityTypeKey<Counter> = EntityTypeKey::new("counter");

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let address: shardik::Address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2552".into())
        .parse()?;
    // Built-in defaults, then SHARDIK_* environment variables (`Settings::load(Some(path))`
    // reads a TOML file between the two).
    let node = Node::builder(Settings::load(None)?)
        .logging()
        .bind(address.clone())
        .seeds([address]) // the first seed forms the cluster: here, this node alone
        .start()
        .await?;
    node.wait_until_up().await?;
    node.sharding()
        .init(EntityKind::for_key(COUNTER, |_id| Counter::default()))?;
    let counter = node.sharding().entity_ref_for(COUNTER, "counter-42")?;
    counter.tell(Cmd::Add(2)).await?;
    let value = counter.ask(Cmd::Get, Duration::from_secs(10)).await?;
    println!("counter-42 = {value}");
    println!("{:?}", node.leave().await);
    Ok(())
}
