//! The one reply model (Akka's `ask(replyTo => Cmd(.., replyTo))`): the asker puts a typed
//! [`ReplyTo`] inside its command, and the entity answers through it.
//!
//! A `ReplyTo` made by [`EntityRef::ask`](super::EntityRef::ask) answers its asker
//! directly, without encoding, while it stays on the asker's node. Sent to another node inside
//! a command, it is encoded as the asker's node and ask id (or as a one-byte marker inside its
//! own ask's envelope, which carries both already), and decoded there into a handle that sends
//! the encoded answer back in a reply frame; the asker's node completes the ask from its table
//! of waiting asks. Whichever way the answer comes, the first one completes the ask and
//! later ones are ignored, as a second reply to an Akka `ask` is.

use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shardik_core::membership::UniqueAddress;
use shardik_wire::{ReplyError, ReplyErrorKind};
use tokio::sync::oneshot;

use super::api::{Codec, CodecError, Postcard, ShardingError};
use super::messages::AskSlot;
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
    /// Still on the asker's node: the answer goes straight to the waiting asker. Should this
    /// `ReplyTo` leave the node inside another command than its ask's own (passed on by the
    /// entity that got it), the slot enters the table of waiting asks (until `deadline`) as it
    /// is encoded, for the answer to find it by id.
    Local {
        slot: AnswerSlot<R>,
        endpoint: Arc<ReplyEndpoint>,
        deadline: tokio::time::Instant,
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

/// The asker's side of one ask: taken by the first answer, whichever way it comes.
pub(crate) struct Slot<R> {
    tx: Mutex<Option<oneshot::Sender<Result<R, ShardingError>>>>,
    /// How an answer encoded by another node is read (the ask's codec, chosen by the asker).
    decode: fn(&[u8]) -> Result<R, CodecError>,
}

/// An ask's slot, shared by its `ReplyTo`, its handle on the host and, once the command has
/// left for another node, the table of waiting asks.
pub(crate) type AnswerSlot<R> = Arc<Slot<R>>;

/// A slot for an ask answered with `C`'s encoding when it comes from another node, and the
/// asker's end of it.
pub(crate) fn answer_slot<R, C>() -> (AnswerSlot<R>, oneshot::Receiver<Result<R, ShardingError>>)
where
    R: DeserializeOwned,
    C: Codec + Default,
{
    let (tx, rx) = oneshot::channel();
    let slot = Slot {
        tx: Mutex::new(Some(tx)),
        decode: |bytes| C::default().decode(bytes),
    };
    (Arc::new(slot), rx)
}

impl<R: Send> AskSlot for Slot<R> {
    fn fail(&self, why: ShardingError) {
        fill(self, Err(why));
    }

    fn answer_encoded(&self, answer: Result<Bytes, ShardingError>) {
        let answer = answer.and_then(|bytes| (self.decode)(&bytes).map_err(ShardingError::Codec));
        fill(self, answer);
    }
}

/// Delivers `answer` to the slot's asker, if no answer reached it before; true if it did.
pub(crate) fn fill<R>(slot: &Slot<R>, answer: Result<R, ShardingError>) -> bool {
    let tx = slot.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
    tx.is_some_and(|tx| tx.send(answer).is_ok())
}

impl<R, C> ReplyTo<R, C>
where
    R: Serialize + Send + 'static,
    C: Codec + Default,
{
    /// The handle for ask `ask_id` of this node, answering into `slot` until `deadline`.
    pub(crate) fn local(
        kind: Arc<str>,
        ask_id: NonZeroU64,
        slot: AnswerSlot<R>,
        endpoint: Arc<ReplyEndpoint>,
        deadline: tokio::time::Instant,
    ) -> Self {
        let asker = endpoint.self_node().clone();
        let route = Route::Local {
            slot,
            endpoint,
            deadline,
        };
        ReplyTo::new(kind, asker, ask_id, route)
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
        let slot = Slot {
            tx: Mutex::new(Some(tx)),
            // Never used: a detached ReplyTo cannot be sent to a node.
            decode: |_| {
                Err(CodecError(
                    "a detached ReplyTo has no node to answer it".into(),
                ))
            },
        };
        let reply_to = ReplyTo::new(
            Arc::from(""),
            UniqueAddress::new(shardik_core::membership::Address::new("127.0.0.1", 0), 0),
            NonZeroU64::MIN,
            Route::Detached(Arc::new(slot)),
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
            // An ask answered on its own node is not looked up in the table of waiting asks.
            Route::Local { slot, .. } => {
                fill(slot, Ok(answer));
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

/// On the wire a `ReplyTo` is `Some((kind, asker, ask id))`, or `None` inside the command of
/// its own ask's envelope: that envelope already carries the ask id, and the receiving node
/// knows the sender, so the usual ask costs one byte here rather than about thirty, and
/// nothing to allocate when it is read.
type WireReplyTo<K, A> = Option<(K, A, NonZeroU64)>;

impl<R: Send + 'static, C> Serialize for ReplyTo<R, C> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let inner = &*self.inner;
        let wire: WireReplyTo<&str, &UniqueAddress> = match &inner.route {
            Route::Detached(_) => {
                return Err(serde::ser::Error::custom(
                    "a detached ReplyTo (made for a unit test) cannot be sent to a node",
                ));
            }
            // The kind's task enters the slot in the table as it sends the envelope.
            Route::Local { .. } if resolve::encoding_ask_is(inner.ask_id) => None,
            Route::Local {
                slot,
                endpoint,
                deadline,
            } => {
                let waiting = Arc::clone(slot) as Arc<dyn AskSlot>;
                endpoint
                    .pending()
                    .register_slot(inner.ask_id, *deadline, waiting);
                Some((&*inner.kind, &inner.asker, inner.ask_id))
            }
            Route::Decoded(_) => Some((&*inner.kind, &inner.asker, inner.ask_id)),
        };
        wire.serialize(serializer)
    }
}

impl<'de, R, C> serde::Deserialize<'de> for ReplyTo<R, C> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let wire: WireReplyTo<String, UniqueAddress> =
            serde::Deserialize::deserialize(deserializer)?;
        let endpoint = resolve::reply_endpoint().ok_or_else(|| {
            D::Error::custom(
                "a ReplyTo can only be decoded by a node's sharding (inside a command or an answer)",
            )
        })?;
        match wire {
            Some((kind, asker, ask_id)) => Ok(ReplyTo::new(
                kind.into(),
                asker,
                ask_id,
                Route::Decoded(endpoint),
            )),
            // The envelope's own ask: answered to the node that sent it, by the envelope's ask
            // id (a node that relayed the envelope passes the answer on to the asker).
            None => resolve::with_decoding_ask(|ask| match ask {
                Some(ask) => Ok(ReplyTo::new(
                    Arc::clone(&ask.kind),
                    ask.asker.clone(),
                    ask.ask_id,
                    Route::Decoded(endpoint),
                )),
                None => Err(D::Error::custom(
                    "a ReplyTo written for its envelope's ask arrived in an envelope of no ask",
                )),
            }),
        }
    }
}

#[cfg(test)]
mod ask_handle_tests {
    use super::*;
    use crate::sharding::messages::AskHandle;

    fn slot() -> (
        Arc<dyn AskSlot>,
        oneshot::Receiver<Result<u64, ShardingError>>,
    ) {
        let (slot, rx) = answer_slot::<u64, Postcard>();
        (slot, rx)
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
    fn a_command_sent_on_leaves_the_ask_to_the_answer_that_comes_back_encoded() {
        let (slot, mut rx) = slot();
        let waiting = AskHandle::new(slot).pass_on().expect("armed");
        assert!(rx.try_recv().is_err(), "passing on fails nothing");
        waiting.answer_encoded(Ok(Bytes::from(postcard::to_allocvec(&9u64).unwrap())));
        assert_eq!(rx.try_recv().unwrap(), Ok(9));
    }

    #[test]
    fn an_answer_that_cannot_be_read_fails_the_ask_as_a_codec_error() {
        let (slot, mut rx) = slot();
        slot.answer_encoded(Ok(Bytes::from_static(&[0xff, 0xff])));
        assert!(matches!(
            rx.try_recv().unwrap(),
            Err(ShardingError::Codec(_))
        ));
    }

    #[test]
    fn an_answer_sent_first_wins_over_a_later_failure() {
        let (slot, mut rx) = answer_slot::<u64, Postcard>();
        assert!(fill(&slot, Ok(3)));
        AskHandle::new(slot).fail(ShardingError::EntityFailed("after".into()));
        assert_eq!(rx.try_recv().unwrap(), Ok(3));
    }
}
