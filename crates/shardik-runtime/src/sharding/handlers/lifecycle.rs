//! The types of one kind's entity lifecycle as this runtime hosts it: the core's
//! [`Entities`](shardik_core::sharding::entities::Entities) instantiated for entity `E`, and who
//! waits on a command ([`Asker`]). Everything else in `handlers/` is written in these terms.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use shardik_core::sharding::entities::{self, Lifecycle};

use crate::sharding::api::Entity;
use crate::sharding::messages::AskHandle;
use crate::sharding::pending::AnswerRoute;

/// The types of entity `E`'s lifecycle.
pub(crate) struct Hosted<E>(PhantomData<E>);

impl<E: Entity> Lifecycle for Hosted<E> {
    type Entity = E;
    type Command = E::Command;
    /// A handler's only result is that it finished: answers go through the command's
    /// `ReplyTo`, and the asker is told only of a failure (or that the command was handled).
    type Reply = ();
    type Asker = Asker;
}

/// A command waiting for, or being handled by, its entity.
pub(crate) type Job<E> = entities::Job<Hosted<E>>;
/// What a handler hands back.
pub(crate) type Completed<E> = entities::Done<Hosted<E>>;
/// The lifecycle of one kind's entities on this node.
pub(crate) type Entities<E> = entities::Entities<Hosted<E>>;
/// What the lifecycle asks the kind's task to do.
pub(crate) type HostOutput<E> = entities::Output<Hosted<E>>;

/// Who waits on a command: told only if it was not handled (the answer itself goes through the
/// command's `ReplyTo`).
pub(crate) enum Asker {
    /// Nobody (a tell).
    None,
    /// A local asker.
    Local(AskHandle),
    /// An asker on another node (or a node relaying for it): where a failure is reported,
    /// and the ask's id there. Two words, as a local asker: every command carries an `Asker`.
    Remote(Arc<AnswerRoute>, std::num::NonZeroU64),
}

impl entities::Asker for Asker {
    fn nobody() -> Self {
        Asker::None
    }

    fn waits(&self) -> bool {
        !matches!(self, Asker::None)
    }
}

/// A handler that could not finish when it started, polled by the kind's task.
pub(crate) type Running<E> = Pin<Box<dyn Future<Output = Completed<E>> + Send>>;
