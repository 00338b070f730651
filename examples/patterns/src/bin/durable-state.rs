//! A durable-state entity: a user profile whose whole state is stored after each change (by
//! revision, so that a second live copy could not overwrite it unseen). The profile is asked
//! to stop, and the next command finds it as it was stored.
//!
//! ```sh
//! cargo run -p patterns --bin durable-state
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik::persistence::{DurableState, DurableStateContext, DurableStateEntity, StateEffect};
use shardik::{EntityKind, EntityTypeKey, ReplyTo};

#[derive(Clone, Default, Serialize, Deserialize)]
struct Profile {
    name: String,
    visits: u64,
}

#[derive(Serialize, Deserialize)]
enum Command {
    Rename(String, ReplyTo<()>),
    Visit(ReplyTo<u64>),
    Show(ReplyTo<(String, u64)>),
    /// Stop this incarnation (to show that the next one reads the stored state).
    Stop,
}

impl DurableStateEntity for Profile {
    type Command = Command;

    fn handle_command(
        &self,
        cmd: Command,
        ctx: &mut DurableStateContext<Self>,
    ) -> StateEffect<Self> {
        match cmd {
            Command::Rename(name, reply_to) => {
                let next = Profile {
                    name,
                    ..self.clone()
                };
                // Answered once the new state is stored.
                StateEffect::persist(next).then_reply(reply_to, |_| ())
            }
            Command::Visit(reply_to) => {
                let next = Profile {
                    visits: self.visits + 1,
                    ..self.clone()
                };
                StateEffect::persist(next).then_reply(reply_to, |p| p.visits)
            }
            Command::Show(reply_to) => {
                StateEffect::reply(reply_to, (self.name.clone(), self.visits))
            }
            Command::Stop => {
                ctx.passivate();
                StateEffect::none()
            }
        }
    }
}

const PROFILE: EntityTypeKey<DurableState<Profile>> = EntityTypeKey::new("profile");
const ASK: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = patterns::start_durable_cluster(&patterns::addresses(1)?).await?;
    let node = &nodes[0];
    let persistence = node.persistence().await?;
    node.sharding()
        .init(EntityKind::durable_state(PROFILE, &persistence, |_id| {
            Profile::default()
        }))?;

    let ada = node.sharding().entity_ref_for(PROFILE, "ada")?;
    ada.ask(|r| Command::Rename("Ada Lovelace".into(), r), ASK)
        .await?;
    ada.ask(Command::Visit, ASK).await?;
    let visits = ada.ask(Command::Visit, ASK).await?;
    println!("visits: {visits}");
    ada.tell(Command::Stop).await?;
    // A new incarnation: it loads the stored state before its first command.
    let (name, visits) = ada.ask(Command::Show, ASK).await?;
    println!("after a stop: {name}, {visits} visits");
    println!(
        "{:?}",
        nodes.into_iter().next().expect("one node").leave().await
    );
    Ok(())
}
