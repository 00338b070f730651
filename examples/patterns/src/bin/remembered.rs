//! Remembered entities: devices that must keep running although nobody writes to them. The
//! kind remembers which of its entities were started (in the node's store); when the node that
//! ran some of them leaves, their shards start them again on the other node without a message.
//!
//! ```sh
//! cargo run -p patterns --bin remembered
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shardik::{Entity, EntityContext, EntityKind, EntityRecovery, EntityTypeKey, ReplyTo};

/// A device that would poll something while it runs.
struct Device;

#[derive(Serialize, Deserialize)]
enum Command {
    /// Start, and say so (once the start is recorded).
    Start(ReplyTo<()>),
}

impl Entity for Device {
    type Command = Command;
    async fn handle(&mut self, Command::Start(reply_to): Command, _ctx: &mut EntityContext<Self>) {
        reply_to.send(());
    }
}

const DEVICE: EntityTypeKey<Device> = EntityTypeKey::new("device");
const DEVICES: [&str; 6] = ["d1", "d2", "d3", "d4", "d5", "d6"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut nodes = patterns::start_durable_cluster(&patterns::addresses(2)?).await?;
    for node in &nodes {
        let store = Arc::clone(node.persistence().await?.store());
        node.sharding().init(
            EntityKind::for_key(DEVICE, |_id| Device)
                .with_remember_entities(store, EntityRecovery::All),
        )?;
    }
    let second = nodes.pop().expect("two nodes");
    let first = nodes.pop().expect("two nodes");
    // One message each starts them (and records them as started, before the message is
    // handled); none is sent after this. Asked rather than told, so that the leave below comes
    // after they run.
    for id in DEVICES {
        let device = first.sharding().entity_ref_for(DEVICE, id)?;
        device.ask(Command::Start, Duration::from_secs(10)).await?;
    }
    println!("started {} devices", DEVICES.len());

    println!("first node: {:?}", first.leave().await);
    // The shards that were on the first node start on the second, and with them, without a
    // message, the devices they remember.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = second
            .sharding()
            .region_state(DEVICE.name(), Duration::from_secs(5))
            .await
            .ok_or("the region did not answer")?;
        let mut running: Vec<String> = state
            .shards
            .iter()
            .flat_map(|(_, ids)| ids.iter().map(|id| id.to_string()))
            .collect();
        running.sort();
        if running.len() == DEVICES.len() || Instant::now() > deadline {
            println!("running on the second node: {}", running.join(" "));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("second node: {:?}", second.leave().await);
    Ok(())
}
