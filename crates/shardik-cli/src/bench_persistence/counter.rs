//! The benchmark's event-sourced counter ([`BenchCounter`]), what it is asked
//! ([`CounterCmd`]) and how long an ask may take ([`ASK_TIMEOUT`]).
//!
//! Kept apart from the parent module, which runs the whole benchmark, so that both
//! measurements (`throughput.rs`, `recovery.rs`) ask the counter without importing the module
//! that runs them.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik_runtime::persistence::{Effect, EventSourcedContext, EventSourcedEntity};
use shardik_runtime::sharding::ReplyTo;

use crate::counter::Incremented;

/// Timeout of the benchmark's asks: far above any latency worth measuring, so a timeout means
/// something is broken, and the run fails rather than reporting it as a sample.
pub(super) const ASK_TIMEOUT: Duration = Duration::from_secs(30);

/// The benchmark's event-sourced counter: the demo counter's event ([`Incremented`], one per
/// increment), plus the commands recovery needs (many events at once, stop).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct BenchCounter {
    value: u64,
}

/// What a [`BenchCounter`] is asked; every answer is its value.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum CounterCmd {
    /// Persist one event.
    Increment(ReplyTo<u64>),
    /// Persist this many events in one atomic write (fills a journal quickly).
    Add(u32, ReplyTo<u64>),
    /// Read.
    Get(ReplyTo<u64>),
    /// Read, then passivate: the next command starts a new incarnation, which recovers.
    Stop(ReplyTo<u64>),
}

impl EventSourcedEntity for BenchCounter {
    type Command = CounterCmd;
    type Event = Incremented;

    fn handle_command(&self, cmd: CounterCmd, ctx: &mut EventSourcedContext<Self>) -> Effect<Self> {
        match cmd {
            CounterCmd::Increment(reply_to) => {
                Self::persist(Incremented).then_reply(reply_to, |s| s.value)
            }
            CounterCmd::Add(n, reply_to) => {
                Self::persist_all((0..n).map(|_| Incremented)).then_reply(reply_to, |s| s.value)
            }
            CounterCmd::Get(reply_to) => Effect::reply(reply_to, self.value),
            CounterCmd::Stop(reply_to) => {
                ctx.passivate();
                Effect::reply(reply_to, self.value)
            }
        }
    }

    fn apply_event(&mut self, _: &Incremented) {
        self.value += 1;
    }
}
