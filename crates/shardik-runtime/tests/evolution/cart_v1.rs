//! Version 1 of a shopping cart's events, as the fixture journal was written: kept so that
//! the fixture can be made again (`regenerate_the_journal_v1_fixture`), and so that version 2's
//! adapter can decode what version 1 stored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use shardik_runtime::persistence::{Effect, EventSourced, EventSourcedContext, EventSourcedEntity};
use shardik_runtime::sharding::{EntityTypeKey, ReplyTo};

pub const CART: EntityTypeKey<EventSourced<Cart>> = EntityTypeKey::new("cart");

/// A [`Command`] as asked: answered once its event is written.
#[derive(Debug, Serialize, Deserialize)]
pub struct Asked(pub Command, pub ReplyTo<()>);

#[derive(Debug, Serialize, Deserialize)]
pub enum Command {
    Add { item: String, quantity: u32 },
    AddMany(Vec<(String, u32)>),
    View,
    CheckOut,
}

/// The events of version 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CartEvent {
    ItemAdded {
        item: String,
        quantity: u32,
    },
    /// Several items in one event; version 2 records one event per item.
    ItemsAdded {
        items: Vec<(String, u32)>,
    },
    /// Version 2 no longer records views.
    Viewed,
    /// Renamed `Closed` in version 2.
    CheckedOut,
}

#[derive(Debug, Default)]
pub struct Cart {
    pub lines: BTreeMap<String, u32>,
    pub views: u32,
    pub checked_out: bool,
}

impl EventSourcedEntity for Cart {
    type Command = Asked;
    type Event = CartEvent;

    fn handle_command(&self, asked: Asked, _ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
        let Asked(cmd, reply_to) = asked;
        let event = match cmd {
            Command::Add { item, quantity } => CartEvent::ItemAdded { item, quantity },
            Command::AddMany(items) => CartEvent::ItemsAdded { items },
            Command::View => CartEvent::Viewed,
            Command::CheckOut => CartEvent::CheckedOut,
        };
        Self::persist(event).then_reply(reply_to, |_| ())
    }

    fn apply_event(&mut self, event: &CartEvent) {
        match event {
            CartEvent::ItemAdded { item, quantity } => {
                *self.lines.entry(item.clone()).or_default() += quantity;
            }
            CartEvent::ItemsAdded { items } => {
                for (item, quantity) in items {
                    *self.lines.entry(item.clone()).or_default() += quantity;
                }
            }
            CartEvent::Viewed => self.views += 1,
            CartEvent::CheckedOut => self.checked_out = true,
        }
    }
}

/// What the fixture's carts were sent, in order: the journal is exactly their events.
pub fn fixture_commands() -> Vec<(&'static str, Command)> {
    let add = |item: &str, quantity| Command::Add {
        item: item.into(),
        quantity,
    };
    vec![
        ("alice", add("apple", 2)),
        (
            "alice",
            Command::AddMany(vec![("pear".into(), 1), ("plum".into(), 3)]),
        ),
        ("alice", Command::View),
        ("alice", Command::CheckOut),
        ("bob", add("apple", 1)),
        ("bob", Command::View),
        ("bob", add("apple", 4)),
        ("carol", Command::AddMany(Vec::new())),
        ("carol", Command::View),
    ]
}
