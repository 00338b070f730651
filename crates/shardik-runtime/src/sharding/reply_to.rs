//! The one reply model (Akka's `ask(replyTo => Cmd(.., replyTo))`): the asker puts a typed
//! [`ReplyTo`] inside its command, and the entity answers through it.
//!
//! A `ReplyTo` made by [`EntityRef::ask`](super::EntityRef::ask) answers its asker
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
use super::messages::FailAsk;
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
/// # use shardik_runtime::facade as shardik;
/// use serde::{Deserialize, Serialize};
/// use shardik::{Entity, EntityContext, ReplyTo};
///
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
    /// Behind one pointer: a command enum with a `ReplyTo` in one variant stays as small as
    /// its other variants need (commands are moved through queues by value).
    inner: Arc<Inner<R>>,
    codec: PhantomData<fn() -> C>,
}

struct Inner<R> {
    /// The kind the ask went to (named in the reply frame, for the asker's logs).
    kind: Arc<str>,
    asker: UniqueAddress,
    ask_id: NonZeroU64,
    route: Route<R>,
}

impl<R, C> ReplyTo<R, C> {
    fn new(kind: Arc<str>, asker: UniqueAddress, ask_id: NonZeroU64, route: Route<R>) -> Self {
        ReplyTo {
            inner: Arc::new(Inner {
                kind,
                asker,
                ask_id,
                route,
            }),
            codec: PhantomData,
        }
    }
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
    /// Outside any node, for a handler called directly in a unit test
    /// ([`ReplyTo::detached`]): the answer waits in the slot.
    Detached(AnswerSlot<R>),
}

/// The answer a [`ReplyTo::detached`] received, for a unit test to look at.
pub struct DetachedAnswer<R>(oneshot::Receiver<Result<R, ShardingError>>);

impl<R> DetachedAnswer<R> {
    /// The answer, if one was sent (the first one; later ones are ignored).
    pub fn take(mut self) -> Option<R> {
        self.0.try_recv().ok().and_then(Result::ok)
    }
}

impl<R> std::fmt::Debug for DetachedAnswer<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DetachedAnswer").finish_non_exhaustive()
    }
}

/// The asker's side of one ask: taken by the first answer.
pub(crate) type AnswerSlot<R> = Arc<Mutex<Option<oneshot::Sender<Result<R, ShardingError>>>>>;

impl<R: Send> FailAsk for Mutex<Option<oneshot::Sender<Result<R, ShardingError>>>> {
    fn fail(&self, why: ShardingError) {
        let tx = self.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(tx) = tx {
            let _ = tx.send(Err(why));
        }
    }
}

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
        let asker = endpoint.self_node().clone();
        ReplyTo::new(kind, asker, ask_id, Route::Local { slot, endpoint })
    }

    /// A `ReplyTo` outside any node, and what it will have received: for unit tests that call
    /// a handler directly (with [`EntityContext::detached`](super::EntityContext::detached)).
    /// It cannot be sent to another node.
    ///
    /// ```
    /// # use shardik_runtime::facade as shardik;
    /// use shardik::ReplyTo;
    ///
    /// let (reply_to, answer) = ReplyTo::<u64>::detached();
    /// reply_to.send(7);
    /// assert_eq!(answer.take(), Some(7));
    /// ```
    pub fn detached() -> (Self, DetachedAnswer<R>) {
        let (tx, rx) = oneshot::channel();
        let reply_to = ReplyTo::new(
            Arc::from(""),
            UniqueAddress::new(shardik_core::membership::Address::new("127.0.0.1", 0), 0),
            NonZeroU64::MIN,
            Route::Detached(Arc::new(Mutex::new(Some(tx)))),
        );
        (reply_to, DetachedAnswer(rx))
    }

    /// Answers the ask. Never waits: on the asker's node the answer is handed over at once;
    /// for an asker on another node it is queued for sending (and counted as dropped, with a
    /// warning, if it cannot be). An answer that cannot be encoded fails the ask with a codec
    /// error. After the first answer (or the asker's timeout), answers are ignored.
    pub fn send(&self, answer: R) {
        let inner = &*self.inner;
        match &inner.route {
            Route::Local { slot, endpoint } => {
                if fill(slot, Ok(answer)) {
                    endpoint.pending().forget(inner.ask_id.get());
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
                endpoint.answer(&inner.kind, &inner.asker, inner.ask_id, encoded);
            }
            Route::Detached(slot) => {
                fill(slot, Ok(answer));
            }
        }
    }

    /// The node of the asker.
    pub fn asker(&self) -> &UniqueAddress {
        &self.inner.asker
    }
}

impl<R, C> Clone for ReplyTo<R, C> {
    fn clone(&self) -> Self {
        ReplyTo {
            inner: Arc::clone(&self.inner),
            codec: PhantomData,
        }
    }
}

impl<R, C> std::fmt::Debug for ReplyTo<R, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyTo")
            .field("kind", &self.inner.kind)
            .field("asker", &self.inner.asker)
            .field("ask_id", &self.inner.ask_id)
            .finish()
    }
}

impl<R, C> Serialize for ReplyTo<R, C> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let inner = &*self.inner;
        if matches!(inner.route, Route::Detached(_)) {
            return Err(serde::ser::Error::custom(
                "a detached ReplyTo (made for a unit test) cannot be sent to a node",
            ));
        }
        (&*inner.kind, &inner.asker, inner.ask_id).serialize(serializer)
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
        Ok(ReplyTo::new(
            kind.into(),
            asker,
            ask_id,
            Route::Decoded(endpoint),
        ))
    }
}

#[cfg(test)]
mod ask_handle_tests {
    use super::*;
    use crate::sharding::messages::AskHandle;

    fn slot() -> (
        Arc<dyn FailAsk>,
        oneshot::Receiver<Result<u64, ShardingError>>,
    ) {
        let (tx, rx) = oneshot::channel();
        (Arc::new(Mutex::new(Some(tx))), rx)
    }

    #[test]
    fn a_handled_command_tells_the_asker_nothing() {
        let (slot, mut rx) = slot();
        AskHandle::new(Arc::clone(&slot)).handled();
        assert!(rx.try_recv().is_err(), "the asker was woken for nothing");
        drop(slot);
    }

    #[test]
    fn a_failed_command_fails_the_ask_with_its_reason() {
        let (slot, mut rx) = slot();
        AskHandle::new(slot).fail(ShardingError::EntityFailed("boom".into()));
        assert_eq!(
            rx.try_recv().unwrap(),
            Err(ShardingError::EntityFailed("boom".into()))
        );
    }

    #[test]
    fn a_command_lost_unreported_fails_the_ask_as_lost() {
        let (slot, mut rx) = slot();
        drop(AskHandle::new(slot));
        assert!(matches!(
            rx.try_recv().unwrap(),
            Err(ShardingError::ShardUnavailable(_))
        ));
    }

    #[test]
    fn an_answer_sent_first_wins_over_a_later_failure() {
        let (tx, mut rx) = oneshot::channel::<Result<u64, ShardingError>>();
        let slot: AnswerSlot<u64> = Arc::new(Mutex::new(Some(tx)));
        assert!(fill(&slot, Ok(3)));
        AskHandle::new(slot).fail(ShardingError::EntityFailed("after".into()));
        assert_eq!(rx.try_recv().unwrap(), Ok(3));
    }
}
