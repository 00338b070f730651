//! Version 2 of the cart's events: `ItemAdded` gained a field with a default, `CheckedOut` is
//! now `Closed` (with a field of its own), `ItemsAdded` and `Viewed` are gone. Events stored by
//! version 1 reach it through [`adapt`], the kind's event adapter.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use shardik_runtime::persistence::{
    Effect, EventAdapterError, EventSourced, EventSourcedContext, EventSourcedEntity, JournalEvent,
};
use shardik_runtime::sharding::{EntityTypeKey, ReplyTo};

use super::cart_v1;

pub const CART: EntityTypeKey<EventSourced<Cart>> = EntityTypeKey::new("cart");

/// The version new events are written as.
pub const VERSION: u32 = 2;

#[derive(Debug, Serialize, Deserialize)]
pub enum Command {
    Add {
        item: String,
        quantity: u32,
        currency: String,
        reply_to: ReplyTo<Cart>,
    },
    Close {
        reason: String,
        reply_to: ReplyTo<Cart>,
    },
    Get(ReplyTo<Cart>),
}

fn default_currency() -> String {
    "EUR".into()
}

/// The events of version 2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CartEvent {
    ItemAdded {
        item: String,
        quantity: u32,
        /// New in version 2: version 1 sold in euros only.
        #[serde(default = "default_currency")]
        currency: String,
    },
    /// Version 1's `CheckedOut`.
    Closed {
        #[serde(default)]
        reason: Option<String>,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub quantity: u32,
    pub currency: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cart {
    pub lines: BTreeMap<String, Line>,
    pub closed: bool,
    pub close_reason: Option<String>,
    /// Events applied, old and new: shows what the adapter split and dropped.
    pub events: u32,
}

impl EventSourcedEntity for Cart {
    type Command = Command;
    type Event = CartEvent;

    fn handle_command(&self, cmd: Command, _ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
        match cmd {
            Command::Add {
                item,
                quantity,
                currency,
                reply_to,
            } => Self::persist(CartEvent::ItemAdded {
                item,
                quantity,
                currency,
            })
            .then_reply(reply_to, Cart::clone),
            Command::Close { reason, reply_to } => Self::persist(CartEvent::Closed {
                reason: Some(reason),
            })
            .then_reply(reply_to, Cart::clone),
            Command::Get(reply_to) => Effect::reply(reply_to, self.clone()),
        }
    }

    fn apply_event(&mut self, event: &CartEvent) {
        self.events += 1;
        match event {
            CartEvent::ItemAdded {
                item,
                quantity,
                currency,
            } => {
                let line = self.lines.entry(item.clone()).or_default();
                line.quantity += quantity;
                line.currency = currency.clone();
            }
            CartEvent::Closed { reason } => {
                self.closed = true;
                self.close_reason = reason.clone();
            }
        }
    }
}

/// The event adapter: version 1's events as version 2's. `ItemAdded` decodes as the new type
/// directly (the codec fills the added field from its default); `CheckedOut` is renamed;
/// `ItemsAdded` becomes one event per item, and `Viewed` none.
pub fn adapt(stored: &JournalEvent<'_>) -> Result<Vec<CartEvent>, EventAdapterError> {
    if stored.version() != 1 {
        return Err(EventAdapterError(format!(
            "no adapter for version {}",
            stored.version()
        )));
    }
    Ok(match stored.decode::<cart_v1::CartEvent>()? {
        cart_v1::CartEvent::ItemAdded { .. } => vec![stored.decode::<CartEvent>()?],
        cart_v1::CartEvent::ItemsAdded { items } => items
            .into_iter()
            .map(|(item, quantity)| CartEvent::ItemAdded {
                item,
                quantity,
                currency: default_currency(),
            })
            .collect(),
        cart_v1::CartEvent::Viewed => Vec::new(),
        cart_v1::CartEvent::CheckedOut => vec![CartEvent::Closed { reason: None }],
    })
}
