//! An event-sourced bank account whose refusals are a type of its own, on two nodes that share
//! one SQLite file. Deposits and withdrawals are events; a withdrawal beyond the balance is
//! refused with `AccountError::Insufficient`, which the caller matches; after the first node
//! leaves, the other one serves the account, recovered from its journal.
//!
//! ```sh
//! cargo run -p patterns --bin event-sourced
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik::persistence::{Effect, EventSourced, EventSourcedContext, EventSourcedEntity};
use shardik::{AskError, EntityKind, EntityTypeKey, ReplyTo};

/// Why an account refuses a command: sent back to the asker as it is (serde), not as text.
#[derive(Debug, Serialize, Deserialize)]
enum AccountError {
    Insufficient { balance: u64, asked: u64 },
    ZeroAmount,
}

impl std::fmt::Display for AccountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccountError::Insufficient { balance, asked } => {
                write!(f, "{asked} asked, only {balance} there")
            }
            AccountError::ZeroAmount => f.write_str("an amount must be positive"),
        }
    }
}

impl std::error::Error for AccountError {}

/// What an account answers a change with: the new balance, or why not.
type Answer = ReplyTo<Result<u64, AccountError>>;

#[derive(Serialize, Deserialize)]
enum Command {
    Deposit(u64, Answer),
    Withdraw(u64, Answer),
    Balance(ReplyTo<u64>),
}

#[derive(Serialize, Deserialize)]
enum Event {
    Deposited(u64),
    Withdrew(u64),
}

#[derive(Default)]
struct Account {
    balance: u64,
}

impl EventSourcedEntity for Account {
    type Command = Command;
    type Event = Event;

    // Decides, without changing the state: the state changes only in apply_event, so the
    // account rebuilt from its journal is exactly the one whose answers were sent.
    fn handle_command(&self, cmd: Command, _ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
        match cmd {
            Command::Deposit(0, reply_to) | Command::Withdraw(0, reply_to) => {
                Effect::reply(reply_to, Err(AccountError::ZeroAmount))
            }
            Command::Deposit(n, reply_to) => {
                // Answered once the event is durable, from the state after it.
                Self::persist(Event::Deposited(n)).then_reply(reply_to, |s| Ok(s.balance))
            }
            Command::Withdraw(n, reply_to) if n > self.balance => {
                let refusal = AccountError::Insufficient {
                    balance: self.balance,
                    asked: n,
                };
                Effect::reply(reply_to, Err(refusal))
            }
            Command::Withdraw(n, reply_to) => {
                Self::persist(Event::Withdrew(n)).then_reply(reply_to, |s| Ok(s.balance))
            }
            Command::Balance(reply_to) => Effect::reply(reply_to, self.balance),
        }
    }

    fn apply_event(&mut self, event: &Event) {
        match event {
            Event::Deposited(n) => self.balance += n,
            Event::Withdrew(n) => self.balance -= n,
        }
    }
}

const ACCOUNT: EntityTypeKey<EventSourced<Account>> = EntityTypeKey::new("account");
const ASK: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut nodes = patterns::start_durable_cluster(&patterns::addresses(2)?).await?;
    for node in &nodes {
        // The node's store: persistence.store, by default a SQLite file in persistence.data-dir.
        let persistence = node.persistence().await?;
        node.sharding()
            .init(EntityKind::event_sourced(ACCOUNT, &persistence, |_id| {
                Account::default()
            }))?;
    }
    let second = nodes.pop().expect("two nodes");
    let first = nodes.pop().expect("two nodes");

    // From the second node; the account runs wherever its shard was placed.
    let alice = second.sharding().entity_ref_for(ACCOUNT, "alice")?;
    let balance = alice.ask_result(|r| Command::Deposit(100, r), ASK).await?;
    println!("deposited 100: balance {balance}");
    let balance = alice.ask_result(|r| Command::Withdraw(30, r), ASK).await?;
    println!("withdrew 30: balance {balance}");
    match alice.ask_result(|r| Command::Withdraw(500, r), ASK).await {
        Ok(balance) => println!("withdrew 500: balance {balance}"),
        Err(AskError::Refused(AccountError::Insufficient { balance, asked })) => {
            println!("refused: {asked} asked, {balance} there")
        }
        Err(AskError::Refused(other)) => println!("refused: {other:?}"),
        Err(e) => return Err(e.into()),
    }

    // The first node leaves: its shards are handed off, and the account, wherever it ran, is
    // served by the second node from its journal.
    println!("first node: {:?}", first.leave().await);
    let balance = alice.ask(Command::Balance, ASK).await?;
    println!("after the leave: balance {balance}");
    println!("second node: {:?}", second.leave().await);
    Ok(())
}
