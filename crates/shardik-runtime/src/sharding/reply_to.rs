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

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shardik_core::membership::UniqueAddress;
use shardik_wire::{ReplyError, ReplyErrorKind};
use tokio::sync::oneshot;

use super::api::{Codec, CodecError, Postcard, ShardingError};
use super::messages::AskSlot;
use super::pending::AnswerRoute;
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
    /// The ask's id in its node's table of waiting asks: given by the kind's task when the
    /// command leaves the node (or when this `ReplyTo` is written into another message), so
    /// that an ask answered on its own node never takes one, and asking tasks on several
    /// threads do not contend for the node's counter.
    ask_id: LazyAskId,
    /// The kind the ask went to, the asker's node and the way answers are sent: shared by the
    /// asks of one region (or the envelopes of one batch), not made for each.
    route: Arc<AnswerRoute>,
    way: Way<R>,
}

/// An ask id given at most once, lazily. One atomic word rather than a `OnceLock`: a decoded
/// `ReplyTo` is made with its id on every remote ask, and a `OnceLock` pays for its
/// initialisation protocol each time, where here it is one store.
struct LazyAskId(AtomicU64);

impl LazyAskId {
    fn unset() -> Self {
        LazyAskId(AtomicU64::new(0))
    }

    fn get(&self) -> Option<NonZeroU64> {
        NonZeroU64::new(self.0.load(Ordering::Acquire))
    }

    /// The id, given by `fresh` if there is none yet (if two threads race, the first id set
    /// wins and the other fresh id is simply never used).
    fn get_or_init(&self, fresh: impl FnOnce() -> NonZeroU64) -> NonZeroU64 {
        if let Some(id) = self.get() {
            return id;
        }
        let id = fresh();
        match self
            .0
            .compare_exchange(0, id.get(), Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => id,
            Err(set) => NonZeroU64::new(set).unwrap_or(id),
        }
    }
}

impl From<NonZeroU64> for LazyAskId {
    fn from(id: NonZeroU64) -> Self {
        LazyAskId(AtomicU64::new(id.get()))
    }
}

enum Way<R> {
    /// Still on the asker's node: the answer goes straight to the waiting asker. The `Inner`
    /// is then the ask's slot itself ([`AskSlot`]), shared with the host's handle on the
    /// command and, should the command or this `ReplyTo` leave the node, with the table of
    /// waiting asks (until `deadline`), where the answer coming back by id finds it.
    Local {
        slot: Slot<R>,
        deadline: tokio::time::Instant,
    },
    /// Decoded on a node (possibly the asker's, after a round trip): the answer is encoded and
    /// sent to the asker's node by ask id.
    Decoded,
    /// Outside any node, for a handler called directly in a unit test
    /// ([`ReplyTo::detached`]): the answer waits in the slot.
    Detached(Slot<R>),
}

impl<R, C> ReplyTo<R, C> {
    fn new(route: Arc<AnswerRoute>, ask_id: LazyAskId, way: Way<R>) -> Self {
        ReplyTo {
            inner: Arc::new(Inner { ask_id, route, way }),
            codec: PhantomData,
        }
    }
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
struct Slot<R> {
    tx: Mutex<Option<oneshot::Sender<Result<R, ShardingError>>>>,
    /// How an answer encoded by another node is read (the ask's codec, chosen by the asker).
    decode: fn(&[u8]) -> Result<R, CodecError>,
}

impl<R> Slot<R> {
    /// A slot answered with `C`'s encoding when the answer comes from another node, and the
    /// asker's end of it.
    fn new<C: Codec + Default>() -> (Self, AnswerReceiver<R>)
    where
        R: DeserializeOwned,
    {
        let (tx, rx) = oneshot::channel();
        let slot = Slot {
            tx: Mutex::new(Some(tx)),
            decode: |bytes| C::default().decode(bytes),
        };
        (slot, rx)
    }

    /// Delivers `answer` to the asker, if no answer reached it before; true if it did.
    fn fill(&self, answer: Result<R, ShardingError>) -> bool {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        tx.is_some_and(|tx| tx.send(answer).is_ok())
    }
}

/// Where the asker waits for its answer.
pub(crate) type AnswerReceiver<R> = oneshot::Receiver<Result<R, ShardingError>>;

impl<R> Inner<R> {
    fn slot(&self) -> Option<&Slot<R>> {
        match &self.way {
            Way::Local { slot, .. } | Way::Detached(slot) => Some(slot),
            Way::Decoded => None,
        }
    }
}

impl<R: Send> AskSlot for Inner<R> {
    fn fail(&self, why: ShardingError) {
        if let Some(slot) = self.slot() {
            slot.fill(Err(why));
        }
    }

    fn answer_encoded(&self, answer: Result<Bytes, ShardingError>) {
        if let Some(slot) = self.slot() {
            let answer =
                answer.and_then(|bytes| (slot.decode)(&bytes).map_err(ShardingError::Codec));
            slot.fill(answer);
        }
    }

    fn ask_id(&self, fresh: &dyn Fn() -> NonZeroU64) -> NonZeroU64 {
        self.ask_id.get_or_init(fresh)
    }

    fn deadline(&self) -> Option<tokio::time::Instant> {
        match &self.way {
            Way::Local { deadline, .. } => Some(*deadline),
            Way::Decoded | Way::Detached(_) => None,
        }
    }
}

/// A slot for an ask, with no `ReplyTo` of its own, and the asker's end of it (for tests of
/// how the host reports on a command).
#[cfg(test)]
pub(crate) fn answer_slot<R, C>() -> (Arc<dyn AskSlot>, AnswerReceiver<R>)
where
    R: DeserializeOwned + Serialize + Send + 'static,
    C: Codec + Default,
{
    let (slot, rx) = Slot::new::<C>();
    let reply_to = ReplyTo::<R, C>::new(
        detached_route(),
        NonZeroU64::MIN.into(),
        Way::Detached(slot),
    );
    (reply_to.inner, rx)
}

/// The route of a `ReplyTo` that belongs to no node.
fn detached_route() -> Arc<AnswerRoute> {
    let nowhere = UniqueAddress::new(shardik_core::membership::Address::new("127.0.0.1", 0), 0);
    Arc::new(AnswerRoute::new(Arc::from(""), nowhere, Weak::new()))
}

impl<R, C> ReplyTo<R, C>
where
    R: Serialize + Send + 'static,
    C: Codec + Default,
{
    /// The handle for an ask of this node (through `route`, the asking region's) until
    /// `deadline`; the slot the host fails the ask through if the command is not handled; and
    /// where the asker waits for the answer.
    pub(crate) fn for_ask(
        route: &Arc<AnswerRoute>,
        deadline: tokio::time::Instant,
    ) -> (Self, Arc<dyn AskSlot>, AnswerReceiver<R>)
    where
        R: DeserializeOwned,
    {
        let (slot, rx) = Slot::new::<C>();
        let reply_to = ReplyTo::new(
            Arc::clone(route),
            LazyAskId::unset(),
            Way::Local { slot, deadline },
        );
        let slot = Arc::clone(&reply_to.inner) as Arc<dyn AskSlot>;
        (reply_to, slot, rx)
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
            detached_route(),
            NonZeroU64::MIN.into(),
            Way::Detached(slot),
        );
        (reply_to, DetachedAnswer(rx))
    }

    /// Answers the ask. Never waits: on the asker's node the answer is handed over at once;
    /// for an asker on another node it is queued for sending (and counted as dropped, with a
    /// warning, if it cannot be). An answer that cannot be encoded fails the ask with a codec
    /// error. After the first answer (or the asker's timeout), answers are ignored.
    pub fn send(&self, answer: R) {
        let inner = &*self.inner;
        match &inner.way {
            // An ask answered on its own node is not looked up in the table of waiting asks.
            Way::Local { slot, .. } | Way::Detached(slot) => {
                slot.fill(Ok(answer));
            }
            Way::Decoded => {
                let encoded =
                    C::default()
                        .encode(&answer)
                        .map(Bytes::from)
                        .map_err(|e| ReplyError {
                            kind: ReplyErrorKind::DecodeFailed,
                            message: format!("the answer could not be encoded: {e}"),
                        });
                if let Some(ask_id) = inner.ask_id.get() {
                    inner.route.answer(ask_id, encoded);
                }
            }
        }
    }

    /// The node of the asker.
    pub fn asker(&self) -> &UniqueAddress {
        self.inner.route.asker()
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
            .field("kind", self.inner.route.kind())
            .field("asker", self.inner.route.asker())
            .field("ask_id", &self.inner.ask_id.get())
            .finish()
    }
}

thread_local! {
    /// Inside [`round_trip`]: the detached `ReplyTo`s encoded so far, in order. Each is
    /// written as its place in this list, and decoding that place gives the very same
    /// `ReplyTo` back, so that a test kit can send a command through its codec and still hear
    /// its answer.
    static ROUND_TRIP: RefCell<Option<Vec<Arc<dyn Any + Send + Sync>>>> = const { RefCell::new(None) };
}

/// Runs `f`, in which a command is encoded and then decoded, with detached `ReplyTo`s
/// ([`ReplyTo::detached`]) allowed inside it: encoded, each is kept and written as its place;
/// decoded, it is the same `ReplyTo` again. For the test kit, which checks that a command
/// survives its codec without a node to answer through.
pub(crate) fn round_trip<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Vec<Arc<dyn Any + Send + Sync>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            ROUND_TRIP.with(|kept| *kept.borrow_mut() = previous);
        }
    }
    let _restore = Restore(ROUND_TRIP.with(|kept| kept.borrow_mut().replace(Vec::new())));
    f()
}

/// On the wire a `ReplyTo` is `Some((kind, asker, ask id))`, or `None` inside the command of
/// its own ask's envelope: that envelope already carries the ask id, and the receiving node
/// knows the sender, so the usual ask costs one byte here rather than about thirty, and
/// nothing to allocate when it is read.
type WireReplyTo<K, A> = Option<(K, A, NonZeroU64)>;

impl<R: Send + 'static, C> Serialize for ReplyTo<R, C> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let inner = &self.inner;
        let (kind, asker) = (&**inner.route.kind(), inner.route.asker());
        let wire: WireReplyTo<&str, &UniqueAddress> = match &inner.way {
            Way::Detached(_) => {
                let kept = ROUND_TRIP.with(|kept| {
                    kept.borrow_mut().as_mut().map(|kept| {
                        kept.push(Arc::clone(inner) as Arc<dyn Any + Send + Sync>);
                        kept.len()
                    })
                });
                let Some(index) = kept.and_then(|n| NonZeroU64::new(n as u64)) else {
                    return Err(serde::ser::Error::custom(
                        "a detached ReplyTo (made for a unit test) cannot be sent to a node",
                    ));
                };
                Some((kind, asker, index))
            }
            // The kind's task enters the slot in the table as it sends the envelope.
            Way::Local { .. } if inner.ask_id.get().is_some_and(resolve::encoding_ask_is) => None,
            Way::Local { deadline, .. } => {
                let endpoint = inner.route.endpoint().ok_or_else(|| {
                    serde::ser::Error::custom("the asking node's sharding has stopped")
                })?;
                let ask_id = inner.ask_id.get_or_init(|| endpoint.pending().next_id());
                let waiting = Arc::clone(inner) as Arc<dyn AskSlot>;
                endpoint.pending().register_slot(ask_id, *deadline, waiting);
                Some((kind, asker, ask_id))
            }
            Way::Decoded => {
                let ask_id = inner.ask_id.get().ok_or_else(|| {
                    serde::ser::Error::custom("a decoded ReplyTo without its ask id")
                })?;
                Some((kind, asker, ask_id))
            }
        };
        wire.serialize(serializer)
    }
}

impl<'de, R: Send + 'static, C> serde::Deserialize<'de> for ReplyTo<R, C> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let wire: WireReplyTo<String, UniqueAddress> =
            serde::Deserialize::deserialize(deserializer)?;
        if let Some((_, _, index)) = &wire
            && let Some(kept) = ROUND_TRIP.with(|kept| {
                let kept = kept.borrow();
                kept.as_ref()
                    .map(|kept| kept.get(index.get() as usize - 1).cloned())
            })
        {
            let inner = kept
                .and_then(|kept| kept.downcast::<Inner<R>>().ok())
                .ok_or_else(|| {
                    D::Error::custom("a ReplyTo decoded in a round trip that did not encode it")
                })?;
            return Ok(ReplyTo {
                inner,
                codec: PhantomData,
            });
        }
        match wire {
            Some((kind, asker, ask_id)) => {
                let endpoint = resolve::reply_endpoint().ok_or_else(|| {
                    D::Error::custom(
                        "a ReplyTo can only be decoded by a node's sharding (inside a command or an answer)",
                    )
                })?;
                let route = AnswerRoute::new(kind.into(), asker, Arc::downgrade(&endpoint));
                Ok(ReplyTo::new(Arc::new(route), ask_id.into(), Way::Decoded))
            }
            // The envelope's own ask: answered to the node that sent it, by the envelope's ask
            // id (a node that relayed the envelope passes the answer on to the asker).
            None => resolve::with_decoding_ask(|ask| match ask {
                Some(ask) => Ok(ReplyTo::new(
                    Arc::clone(&ask.route),
                    ask.ask_id.into(),
                    Way::Decoded,
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

    fn slot() -> (Arc<dyn AskSlot>, AnswerReceiver<u64>) {
        answer_slot::<u64, Postcard>()
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
        slot.answer_encoded(Ok(Bytes::from(postcard::to_allocvec(&3u64).unwrap())));
        AskHandle::new(slot).fail(ShardingError::EntityFailed("after".into()));
        assert_eq!(rx.try_recv().unwrap(), Ok(3));
    }
}

#[cfg(test)]
mod lazy_ask_id_tests {
    use super::*;

    fn id(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    #[test]
    fn an_ask_id_is_given_once_and_a_decoded_one_is_never_replaced() {
        let lazy = LazyAskId::unset();
        assert_eq!(lazy.get(), None);
        assert_eq!(lazy.get_or_init(|| id(7)), id(7));
        assert_eq!(
            lazy.get_or_init(|| panic!("an id is given only once")),
            id(7)
        );
        assert_eq!(lazy.get(), Some(id(7)));

        let decoded = LazyAskId::from(id(42));
        assert_eq!(decoded.get(), Some(id(42)));
        assert_eq!(decoded.get_or_init(|| id(1)), id(42));
    }

    #[test]
    fn threads_racing_for_an_id_all_see_the_one_that_won() {
        let lazy = Arc::new(LazyAskId::unset());
        let ids: Vec<NonZeroU64> = (1..=8)
            .map(|n| {
                let lazy = Arc::clone(&lazy);
                std::thread::spawn(move || lazy.get_or_init(|| id(n)))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let won = lazy.get().expect("set");
        assert!(ids.iter().all(|i| *i == won), "{ids:?} vs {won}");
    }
}
