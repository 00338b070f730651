//! Shopping carts on a shardik cluster: an example application.
//!
//! Each cart is an event-sourced entity ([`cart::Cart`]) sharded over the cluster: it runs on
//! one node at a time, records its changes as events in the store the nodes share (one SQLite
//! file on one machine, or PostgreSQL), and is rebuilt from them wherever it runs next, after
//! a passivation, a rebalance or the crash of its node. The [`api`] module serves the carts
//! over HTTP; the binary `shopping-cart` is one node with that API, and `shopping-cart-load`
//! ([`load`]) drives a cluster of them at a fixed rate and reports throughput and latency.
//!
//! See `examples/shopping-cart/README.md` for running three nodes and the load generator.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod cart;
pub mod load;

pub use cart::{
    CART, Cart, CartAnswer, CartCommand, CartError, CartEvent, CartRequest, Summary, cart_kind,
};
