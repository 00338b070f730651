//! The shopping cart: an event-sourced entity in the shape of Akka's shopping-cart sample.
//!
//! A cart decides in [`handle_command`](EventSourcedEntity::handle_command) (which never
//! changes it) and changes only in [`apply_event`](EventSourcedEntity::apply_event), so the
//! cart rebuilt from its journal after a crash is exactly the cart whose answers were sent. A
//! change is answered once its event is durable in the store; a checked-out cart refuses every
//! change. Answers are `Result<Summary, CartError>`: asked with
//! [`ask_result`](shardik::EntityRef::ask_result), a refusal arrives as
//! [`AskError::Refused`](shardik::AskError::Refused) carrying the [`CartError`], which the
//! HTTP API matches.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use shardik::persistence::{
    Effect, EventSourced, EventSourcedContext, EventSourcedEntity, EventSourcedKind, Persistence,
    Retention,
};
use shardik::{EntityKind, EntityTypeKey, ReplyTo};

/// Why a cart refuses a command: the cart's own error type, carried to the asker by serde
/// (on any node) and matched by the HTTP API. A refused command changed nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CartError {
    /// The command itself is malformed (an empty item id, a zero quantity, ...).
    Invalid(String),
    /// The cart is checked out: it refuses every change.
    CheckedOut,
    /// The item is in the cart already; adjust its quantity instead.
    AlreadyInCart(String),
    /// The item is not in the cart.
    NotInCart(String),
    /// An empty cart cannot be checked out.
    EmptyCheckout,
}

impl std::fmt::Display for CartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CartError::Invalid(why) => f.write_str(why),
            CartError::CheckedOut => {
                f.write_str("the cart is checked out and can no longer be changed")
            }
            CartError::AlreadyInCart(item) => write!(
                f,
                "item {item:?} is already in the cart; adjust its quantity instead"
            ),
            CartError::NotInCart(item) => write!(f, "item {item:?} is not in the cart"),
            CartError::EmptyCheckout => f.write_str("an empty cart cannot be checked out"),
        }
    }
}

impl std::error::Error for CartError {}

/// The kind's typed name; carts are stored under the persistence ids `cart|{cart id}`.
pub const CART: EntityTypeKey<EventSourced<Cart>> = EntityTypeKey::new("cart");

/// The tag on every cart event, for projections reading all carts' events in order
/// (`Store::events_by_tag`).
pub const TAG: &str = "cart";

/// Snapshot after this many events: recovering a long-lived cart reads one snapshot and
/// fewer than this many events.
pub const SNAPSHOT_EVERY: u64 = 100;

/// The longest item name, in bytes.
pub const MAX_ITEM_LEN: usize = 256;

/// A cart's answer: what it holds now, or why it refused.
pub type CartAnswer = Result<Summary, CartError>;

/// What a cart is sent: a command and where its answer goes. Every command of a cart is
/// answered the same way, so the `ReplyTo` travels beside the command rather than inside each
/// variant; [`CartRequest::of`] makes the function `ask_result` takes.
#[derive(Debug, Serialize, Deserialize)]
pub struct CartRequest {
    /// What to do.
    pub command: CartCommand,
    /// Where the answer goes.
    pub reply_to: ReplyTo<CartAnswer>,
}

impl CartRequest {
    /// `command`, asked: `cart.ask_result(CartRequest::of(command), timeout)`.
    pub fn of(command: CartCommand) -> impl FnOnce(ReplyTo<CartAnswer>) -> CartRequest {
        move |reply_to| CartRequest { command, reply_to }
    }
}

/// What a cart is asked to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CartCommand {
    /// Put `quantity` of an item that is not in the cart yet into it.
    AddItem {
        /// The item's name.
        item: String,
        /// How many; at least 1.
        quantity: u32,
    },
    /// Take an item out of the cart.
    RemoveItem {
        /// The item's name.
        item: String,
    },
    /// Set the quantity of an item already in the cart.
    AdjustQuantity {
        /// The item's name.
        item: String,
        /// The new quantity; at least 1 (remove the item to have none).
        quantity: u32,
    },
    /// Close the cart: from now on it refuses every change.
    Checkout,
    /// Read the cart.
    Get,
}

/// What a cart records. The stored form is JSON (see [`cart_kind`]), so a field added later
/// as an `Option` still reads the events written before it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CartEvent {
    /// An item went into the cart.
    ItemAdded {
        /// The item's name.
        item: String,
        /// How many.
        quantity: u32,
    },
    /// An item left the cart.
    ItemRemoved {
        /// The item's name.
        item: String,
    },
    /// An item's quantity changed.
    QuantityAdjusted {
        /// The item's name.
        item: String,
        /// The new quantity.
        quantity: u32,
    },
    /// The cart was checked out.
    CheckedOut {
        /// When, in milliseconds since the Unix epoch (wall clock of the deciding node).
        at_ms: u64,
    },
}

/// A cart's state: the fold of its events. Also its snapshot form.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cart {
    items: BTreeMap<String, u32>,
    checked_out_at_ms: Option<u64>,
}

/// What a cart answers: its contents after the command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Item name to quantity.
    pub items: BTreeMap<String, u32>,
    /// Whether the cart is checked out (and so refuses changes).
    pub checked_out: bool,
    /// When it was checked out, in milliseconds since the Unix epoch.
    pub checked_out_at_ms: Option<u64>,
    /// `host:port` of the cluster node running the cart when it answered.
    pub node: String,
}

/// Why an item name is refused, if it is.
pub fn check_item(item: &str) -> Result<(), String> {
    if item.is_empty() || item.len() > MAX_ITEM_LEN {
        return Err(format!("an item name is 1 to {MAX_ITEM_LEN} bytes"));
    }
    Ok(())
}

/// Why a quantity is refused, if it is.
pub fn check_quantity(quantity: u32) -> Result<(), String> {
    if quantity == 0 {
        return Err("the quantity must be at least 1 (remove the item to have none)".into());
    }
    Ok(())
}

impl Cart {
    /// Item name to quantity.
    pub fn items(&self) -> &BTreeMap<String, u32> {
        &self.items
    }

    /// Whether the cart is checked out.
    pub fn is_checked_out(&self) -> bool {
        self.checked_out_at_ms.is_some()
    }

    /// The answer describing this cart, as run on `node`.
    pub fn summary(&self, node: &str) -> Summary {
        Summary {
            items: self.items.clone(),
            checked_out: self.is_checked_out(),
            checked_out_at_ms: self.checked_out_at_ms,
            node: node.to_string(),
        }
    }

    /// Why the command would be refused on this cart, if it would be. The checks of the item
    /// and quantity come first, so that a malformed request is reported as such on any cart.
    fn refusal(&self, cmd: &CartCommand) -> Option<CartError> {
        let (item, quantity) = match cmd {
            CartCommand::AddItem { item, quantity }
            | CartCommand::AdjustQuantity { item, quantity } => (Some(item), Some(*quantity)),
            CartCommand::RemoveItem { item } => (Some(item), None),
            CartCommand::Checkout | CartCommand::Get => (None, None),
        };
        if let Some(why) = item.and_then(|i| check_item(i).err()) {
            return Some(CartError::Invalid(why));
        }
        if let Some(why) = quantity.and_then(|q| check_quantity(q).err()) {
            return Some(CartError::Invalid(why));
        }
        if self.is_checked_out() && *cmd != CartCommand::Get {
            return Some(CartError::CheckedOut);
        }
        match cmd {
            CartCommand::AddItem { item, .. } if self.items.contains_key(item) => {
                Some(CartError::AlreadyInCart(item.clone()))
            }
            CartCommand::RemoveItem { item } | CartCommand::AdjustQuantity { item, .. }
                if !self.items.contains_key(item) =>
            {
                Some(CartError::NotInCart(item.clone()))
            }
            CartCommand::Checkout if self.items.is_empty() => Some(CartError::EmptyCheckout),
            _ => None,
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl EventSourcedEntity for Cart {
    type Command = CartRequest;
    type Event = CartEvent;

    fn handle_command(
        &self,
        request: CartRequest,
        ctx: &mut EventSourcedContext<Self>,
    ) -> Effect<Self> {
        let CartRequest {
            command: cmd,
            reply_to,
        } = request;
        let node = ctx.node().address.to_string();
        if let Some(why) = self.refusal(&cmd) {
            return Effect::reply(reply_to, Err(why));
        }
        let event = match cmd {
            CartCommand::AddItem { item, quantity } => CartEvent::ItemAdded { item, quantity },
            CartCommand::RemoveItem { item } => CartEvent::ItemRemoved { item },
            // Setting the quantity already there changes nothing: nothing to record.
            CartCommand::AdjustQuantity { item, quantity }
                if self.items.get(&item) == Some(&quantity) =>
            {
                return Effect::reply(reply_to, Ok(self.summary(&node)));
            }
            CartCommand::AdjustQuantity { item, quantity } => {
                CartEvent::QuantityAdjusted { item, quantity }
            }
            // The wall clock is read here, when deciding, and the time is recorded in the
            // event: replaying the event later must give the same cart.
            CartCommand::Checkout => CartEvent::CheckedOut { at_ms: now_ms() },
            CartCommand::Get => return Effect::reply(reply_to, Ok(self.summary(&node))),
        };
        Self::persist(event).then_reply(reply_to, move |cart| Ok(cart.summary(&node)))
    }

    fn apply_event(&mut self, event: &CartEvent) {
        match event {
            CartEvent::ItemAdded { item, quantity }
            | CartEvent::QuantityAdjusted { item, quantity } => {
                self.items.insert(item.clone(), *quantity);
            }
            CartEvent::ItemRemoved { item } => {
                self.items.remove(item);
            }
            CartEvent::CheckedOut { at_ms } => self.checked_out_at_ms = Some(*at_ms),
        }
    }

    fn tags(&self, _event: &CartEvent) -> Vec<String> {
        vec![TAG.to_string()]
    }
}

/// The `cart` kind on `persistence`'s store: a snapshot every [`SNAPSHOT_EVERY`] events, the
/// newest two kept. Events before a snapshot are kept too: projections read them by tag, and
/// a deleted event would be missing from every projection built later.
///
/// Events and snapshots are stored as JSON rather than postcard: readable in the database,
/// and a cart that gains a field keeps reading what was stored before.
pub fn cart_kind(persistence: &Persistence) -> EntityKind<EventSourced<Cart>> {
    EventSourcedKind::new(CART, persistence, |_id| Cart::default())
        .with_snapshots(Retention {
            every: SNAPSHOT_EVERY,
            keep: 2,
            delete_events: false,
        })
        .with_json_storage()
        .into_kind()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `cmd` on `cart` as the runtime would once the events are written: the events the
    /// handler decided, and the answer made from the cart after them.
    fn run(cart: &mut Cart, cmd: CartCommand) -> (Vec<CartEvent>, CartAnswer) {
        let mut ctx = EventSourcedContext::<Cart>::detached("cart-1");
        let (reply_to, answer) = ReplyTo::detached();
        let effect = cart.handle_command(CartRequest::of(cmd)(reply_to), &mut ctx);
        let events = effect.events().to_vec();
        effect.run(cart);
        (events, answer.take().expect("every command is answered"))
    }

    fn add(item: &str, quantity: u32) -> CartCommand {
        CartCommand::AddItem {
            item: item.into(),
            quantity,
        }
    }

    fn adjust(item: &str, quantity: u32) -> CartCommand {
        CartCommand::AdjustQuantity {
            item: item.into(),
            quantity,
        }
    }

    fn remove(item: &str) -> CartCommand {
        CartCommand::RemoveItem { item: item.into() }
    }

    fn items(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(i, q)| (i.to_string(), *q)).collect()
    }

    /// The refusal's reason; panics on a success.
    fn refused(reply: CartAnswer) -> String {
        match reply {
            Err(why) => why.to_string(),
            Ok(s) => panic!("expected a refusal, got {s:?}"),
        }
    }

    fn success(reply: CartAnswer) -> Summary {
        match reply {
            Ok(s) => s,
            Err(why) => panic!("expected a success, refused: {why}"),
        }
    }

    /// A refused command records nothing and leaves the cart as it was.
    fn assert_refused(cart: &mut Cart, cmd: CartCommand, reason_contains: &str) {
        let before = cart.clone();
        let (events, reply) = run(cart, cmd);
        assert!(events.is_empty(), "a refusal records nothing: {events:?}");
        let why = refused(reply);
        assert!(
            why.contains(reason_contains),
            "reason {why:?} should contain {reason_contains:?}"
        );
        assert_eq!(*cart, before);
    }

    #[test]
    fn adding_records_item_added_and_answers_the_new_contents() {
        let mut cart = Cart::default();
        let (events, reply) = run(&mut cart, add("socks", 2));
        assert_eq!(
            events,
            [CartEvent::ItemAdded {
                item: "socks".into(),
                quantity: 2
            }]
        );
        let summary = success(reply);
        assert_eq!(summary.items, items(&[("socks", 2)]));
        assert!(!summary.checked_out);
        assert_eq!(summary.node, "127.0.0.1:0", "the node running the cart");
    }

    #[test]
    fn adjusting_and_removing_record_their_events() {
        let mut cart = Cart::default();
        success(run(&mut cart, add("socks", 2)).1);
        success(run(&mut cart, add("hat", 1)).1);
        let (events, reply) = run(&mut cart, adjust("socks", 5));
        assert_eq!(
            events,
            [CartEvent::QuantityAdjusted {
                item: "socks".into(),
                quantity: 5
            }]
        );
        assert_eq!(success(reply).items, items(&[("hat", 1), ("socks", 5)]));
        let (events, reply) = run(&mut cart, remove("hat"));
        assert_eq!(events, [CartEvent::ItemRemoved { item: "hat".into() }]);
        assert_eq!(success(reply).items, items(&[("socks", 5)]));
    }

    #[test]
    fn adjusting_to_the_quantity_already_there_records_nothing() {
        let mut cart = Cart::default();
        success(run(&mut cart, add("socks", 2)).1);
        let (events, reply) = run(&mut cart, adjust("socks", 2));
        assert!(events.is_empty());
        assert_eq!(success(reply).items, items(&[("socks", 2)]));
    }

    #[test]
    fn get_records_nothing() {
        let mut cart = Cart::default();
        success(run(&mut cart, add("socks", 2)).1);
        let (events, reply) = run(&mut cart, CartCommand::Get);
        assert!(events.is_empty());
        assert_eq!(success(reply).items, items(&[("socks", 2)]));
    }

    #[test]
    fn adding_an_item_already_there_is_refused() {
        let mut cart = Cart::default();
        success(run(&mut cart, add("socks", 2)).1);
        assert_refused(&mut cart, add("socks", 1), "already in the cart");
    }

    #[test]
    fn removing_or_adjusting_an_item_not_there_is_refused() {
        let mut cart = Cart::default();
        assert_refused(&mut cart, remove("socks"), "not in the cart");
        assert_refused(&mut cart, adjust("socks", 3), "not in the cart");
    }

    #[test]
    fn a_quantity_of_zero_is_refused() {
        let mut cart = Cart::default();
        assert_refused(&mut cart, add("socks", 0), "at least 1");
        success(run(&mut cart, add("socks", 2)).1);
        assert_refused(&mut cart, adjust("socks", 0), "at least 1");
    }

    #[test]
    fn an_empty_or_overlong_item_name_is_refused() {
        let mut cart = Cart::default();
        assert_refused(&mut cart, add("", 1), "item name");
        assert_refused(
            &mut cart,
            add(&"x".repeat(MAX_ITEM_LEN + 1), 1),
            "item name",
        );
        success(run(&mut cart, add(&"x".repeat(MAX_ITEM_LEN), 1)).1);
    }

    #[test]
    fn an_empty_cart_cannot_be_checked_out() {
        assert_refused(&mut Cart::default(), CartCommand::Checkout, "empty cart");
    }

    #[test]
    fn a_checked_out_cart_refuses_every_change_but_answers_get() {
        let mut cart = Cart::default();
        success(run(&mut cart, add("socks", 2)).1);
        let (events, reply) = run(&mut cart, CartCommand::Checkout);
        assert!(matches!(events[..], [CartEvent::CheckedOut { at_ms }] if at_ms > 0));
        let summary = success(reply);
        assert!(summary.checked_out);
        assert!(summary.checked_out_at_ms.is_some());
        for cmd in [
            add("hat", 1),
            adjust("socks", 3),
            remove("socks"),
            CartCommand::Checkout,
        ] {
            assert_refused(&mut cart, cmd, "checked out");
        }
        let (events, reply) = run(&mut cart, CartCommand::Get);
        assert!(events.is_empty());
        let summary = success(reply);
        assert!(summary.checked_out);
        assert_eq!(summary.items, items(&[("socks", 2)]));
    }

    #[test]
    fn replaying_the_events_rebuilds_the_cart_that_answered() {
        let mut live = Cart::default();
        let mut journal = Vec::new();
        for cmd in [
            add("socks", 2),
            add("hat", 1),
            add("socks", 9), // refused: records nothing
            adjust("socks", 4),
            remove("hat"),
            add("scarf", 3),
            CartCommand::Checkout,
        ] {
            journal.extend(run(&mut live, cmd).0);
        }
        let mut recovered = Cart::default();
        for event in &journal {
            recovered.apply_event(event);
        }
        assert_eq!(recovered, live);
        assert_eq!(live.items(), &items(&[("scarf", 3), ("socks", 4)]));
        assert!(live.is_checked_out());
    }

    #[test]
    fn every_event_is_tagged_for_projections() {
        let cart = Cart::default();
        let event = CartEvent::ItemRemoved { item: "x".into() };
        assert_eq!(cart.tags(&event), [TAG]);
    }

    #[test]
    fn events_and_snapshots_keep_their_stored_json_form() {
        // The stored form is JSON: changing it would make stored carts unreadable.
        let event = CartEvent::ItemAdded {
            item: "socks".into(),
            quantity: 2,
        };
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"ItemAdded":{"item":"socks","quantity":2}}"#
        );
        let mut cart = Cart::default();
        cart.apply_event(&event);
        let json = serde_json::to_string(&cart).unwrap();
        assert_eq!(json, r#"{"items":{"socks":2},"checked_out_at_ms":null}"#);
        assert_eq!(serde_json::from_str::<Cart>(&json).unwrap(), cart);
    }
}
