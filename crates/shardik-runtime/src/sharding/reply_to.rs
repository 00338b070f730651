//! A reply type per command (Akka's `ask(replyTo => Cmd(.., replyTo))`): the asker puts a
//! typed [`ReplyTo`] inside its command, and the entity answers through it.
//!
//! A `ReplyTo` made by [`EntityRef::ask_with`](super::EntityRef::ask_with) answers its asker
//! directly, without encoding, while it stays on the asker's node. Sent to another node inside
//! a command, it is encoded as the asker's node and ask id, and decoded there into a handle that
//! sends the encoded answer back in a reply frame; the asker's node completes the ask from its
//! table of waiting asks. Whichever way the answer comes, the first one completes the ask and
//! later ones are ignored, as a second reply to an Akka `ask` is.

use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::Serialize;
use shardik_core::membership::UniqueAddress;
use shardik_wire::{ReplyError, ReplyErrorKind};
use tokio::sync::oneshot;

use super::api::{Codec, Postcard, ShardingError};
use super::pending::ReplyEndpoint;
use super::resolve;

/// Where the answer to one ask goes, carried inside the command (Akka's `replyTo`): the entity
/// answers with [`send`](Self::send). Each command of an entity may carry a `ReplyTo` of its
/// own reply type.
///
/// `C` is the codec of the answer when it crosses the network (postcard unless chosen); the
/// asker and the entity name the same type, so both ends agree. A `ReplyTo` can be cloned and
/// passed on, to another entity on another node included; the first answer completes the ask.
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # use shardik_runtime::facade as shardik;
/// # use shardik::{Entity, EntityContext, ReplyTo};
/// #[derive(Serialize, Deserialize)]
/// enum AccountCmd {
///     Deposit(u64),
///     Balance(ReplyTo<u64>),
///     History(ReplyTo<Vec<u64>>),
/// }
///
/// #[derive(Default)]
/// struct Account(Vec<u64>);
///
/// impl Entity for Account {
///     type Command = AccountCmd;
///     type Reply = ();
///     async fn handle(&mut self, cmd: AccountCmd, _ctx: &mut EntityContext<Self>) {
///         match cmd {
///             AccountCmd::Deposit(n) => self.0.push(n),
///             AccountCmd::Balance(reply_to) => reply_to.send(self.0.iter().sum()),
///             AccountCmd::History(reply_to) => reply_to.send(self.0.clone()),
///         }
///     }
/// }
/// ```
pub struct ReplyTo<R, C = Postcard> {
    /// The kind the ask went to (named in the reply frame, for the asker's logs).
    kind: Arc<str>,
    asker: UniqueAddress,
    ask_id: NonZeroU64,
    route: Route<R>,
    codec: PhantomData<fn() -> C>,
}

enum Route<R> {
    /// Still on the asker's node: the answer goes straight to the waiting asker.
    Local {
        slot: AnswerSlot<R>,
        endpoint: Arc<ReplyEndpoint>,
    },
    /// Decoded on a node (possibly the asker's, after a round trip): the answer is encoded and
    /// sent to the asker's node by ask id.
    Decoded(Arc<ReplyEndpoint>),
}

/// The asker's side of one ask: taken by the first answer.
pub(crate) type AnswerSlot<R> = Arc<Mutex<Option<oneshot::Sender<Result<R, ShardingError>>>>>;

/// Delivers `answer` to the slot's asker, if no answer reached it before; true if it did.
pub(crate) fn fill<R>(slot: &AnswerSlot<R>, answer: Result<R, ShardingError>) -> bool {
    let tx = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    tx.is_some_and(|tx| tx.send(answer).is_ok())
}

impl<R, C> ReplyTo<R, C>
where
    R: Serialize + Send + 'static,
    C: Codec + Default,
{
    /// The handle for ask `ask_id` of this node, answering into `slot`.
    pub(crate) fn local(
        kind: Arc<str>,
        ask_id: NonZeroU64,
        slot: AnswerSlot<R>,
        endpoint: Arc<ReplyEndpoint>,
    ) -> Self {
        ReplyTo {
            kind,
            asker: endpoint.self_node().clone(),
            ask_id,
            route: Route::Local { slot, endpoint },
            codec: PhantomData,
        }
    }

    /// Answers the ask. Never waits: on the asker's node the answer is handed over at once;
    /// for an asker on another node it is queued for sending (and counted as dropped, with a
    /// warning, if it cannot be). An answer that cannot be encoded fails the ask with a codec
    /// error. After the first answer (or the asker's timeout), answers are ignored.
    pub fn send(&self, answer: R) {
        match &self.route {
            Route::Local { slot, endpoint } => {
                if fill(slot, Ok(answer)) {
                    endpoint.pending().forget(self.ask_id.get());
                }
            }
            Route::Decoded(endpoint) => {
                let encoded =
                    C::default()
                        .encode(&answer)
                        .map(Bytes::from)
                        .map_err(|e| ReplyError {
                            kind: ReplyErrorKind::DecodeFailed,
                            message: format!("the answer could not be encoded: {e}"),
                        });
                endpoint.answer(&self.kind, &self.asker, self.ask_id, encoded);
            }
        }
    }

    /// The node of the asker.
    pub fn asker(&self) -> &UniqueAddress {
        &self.asker
    }
}

impl<R, C> Clone for ReplyTo<R, C> {
    fn clone(&self) -> Self {
        ReplyTo {
            kind: Arc::clone(&self.kind),
            asker: self.asker.clone(),
            ask_id: self.ask_id,
            route: match &self.route {
                Route::Local { slot, endpoint } => Route::Local {
                    slot: Arc::clone(slot),
                    endpoint: Arc::clone(endpoint),
                },
                Route::Decoded(endpoint) => Route::Decoded(Arc::clone(endpoint)),
            },
            codec: PhantomData,
        }
    }
}

impl<R, C> std::fmt::Debug for ReplyTo<R, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyTo")
            .field("kind", &self.kind)
            .field("asker", &self.asker)
            .field("ask_id", &self.ask_id)
            .finish()
    }
}

impl<R, C> Serialize for ReplyTo<R, C> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (&*self.kind, &self.asker, self.ask_id).serialize(serializer)
    }
}

impl<'de, R, C> serde::Deserialize<'de> for ReplyTo<R, C> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let (kind, asker, ask_id): (String, UniqueAddress, NonZeroU64) =
            serde::Deserialize::deserialize(deserializer)?;
        let endpoint = resolve::reply_endpoint().ok_or_else(|| {
            D::Error::custom(format!(
                "ReplyTo for ask {ask_id} of {asker:?}: a ReplyTo can only be decoded by a node's sharding"
            ))
        })?;
        Ok(ReplyTo {
            kind: kind.into(),
            asker,
            ask_id,
            route: Route::Decoded(endpoint),
            codec: PhantomData,
        })
    }
}
