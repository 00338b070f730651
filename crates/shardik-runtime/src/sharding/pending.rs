//! Asks between nodes: the asks of this node that wait for a reply from another
//! ([`PendingAsks`], `asks.rs`), and the way this node sends an answer to an asker by its ask
//! id ([`ReplyEndpoint`], `answers.rs`).
//!
//! Each waiting ask is its answer slot (or a one-shot callback) under its id, removed when its
//! reply arrives. An asker that gave up (timeout) leaves its entry behind; entries past their
//! deadline are swept as new ones are registered, so the table stays bounded by the asks in
//! flight within their timeouts. Ids start at a random point in each incarnation of a node, so
//! that a late reply meant for an earlier incarnation on the same address does not complete an
//! unrelated ask.

mod answers;
mod asks;

pub(crate) use answers::{AnswerRoute, GatheredAnswer, ReplyEndpoint, gathering, take_gathered};
pub(crate) use asks::PendingAsks;
