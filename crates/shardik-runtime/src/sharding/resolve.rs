//! How an [`EntityRef`](super::EntityRef) or a [`ReplyTo`](super::ReplyTo) that arrived inside a
//! message finds its way back to a live node: the kind task that decodes a command or a reply
//! makes its node's sharding reachable from the decoding thread for the duration of the
//! (synchronous) decode, and their `Deserialize` looks the kind, or the node's way of sending
//! replies, up there.
//!
//! A scope is used, not a value passed to the codec, so that any serde codec works unchanged
//! and an `EntityRef` or a `ReplyTo` may sit anywhere inside a user's command or reply.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::num::NonZeroU64;
use std::sync::{Arc, Weak};

use super::pending::{AnswerRoute, ReplyEndpoint};

/// A node's registry of entity kinds, as seen by a decoding `EntityRef`.
pub(crate) trait RegionResolver: Send + Sync {
    /// Calls `f` with the type-erased `EntityRegion` of `kind` registered on this node, or with
    /// `None` if no such kind is registered.
    fn with_region(&self, kind: &str, f: &mut dyn FnMut(Option<&(dyn Any + Send + Sync)>));

    /// How this node answers asks by id.
    fn reply_endpoint(&self) -> Arc<ReplyEndpoint>;
}

/// The node whose sharding decodes on this thread right now.
pub(crate) type Resolver = Weak<dyn RegionResolver>;

thread_local! {
    static CURRENT: RefCell<Option<Resolver>> = const { RefCell::new(None) };
}

/// Puts the previous resolver back when the decode ends, even by a panic of the codec.
struct Restore(Option<Resolver>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Runs `decode` with `resolver` available to the `EntityRef`s it decodes.
pub(crate) fn decoding_with<T>(resolver: &Resolver, decode: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|c| c.borrow_mut().replace(resolver.clone()));
    let _restore = Restore(previous);
    decode()
}

/// Why an `EntityRef` could not be decoded.
#[derive(Debug)]
pub(crate) enum ResolveError {
    /// Decoded outside the sharding runtime (no node to resolve the kind on).
    NoSharding,
    /// The kind is not registered on this node.
    UnknownKind,
    /// The kind is registered with another entity type.
    WrongType,
}

/// The current thread's node's way of answering asks, or `None` outside a decode scope.
pub(crate) fn reply_endpoint() -> Option<Arc<ReplyEndpoint>> {
    CURRENT
        .with(|c| c.borrow().as_ref().and_then(Weak::upgrade))
        .map(|resolver| resolver.reply_endpoint())
}

/// Resolves `kind` on the current thread's node with `f` (which gets the type-erased region
/// and returns what it built from it, or `None` when the region has another type).
pub(crate) fn resolve<T>(
    kind: &str,
    mut f: impl FnMut(&(dyn Any + Send + Sync)) -> Option<T>,
) -> Result<T, ResolveError> {
    let resolver = CURRENT
        .with(|c| c.borrow().as_ref().and_then(Weak::upgrade))
        .ok_or(ResolveError::NoSharding)?;
    let mut out = Err(ResolveError::UnknownKind);
    resolver.with_region(kind, &mut |region| {
        out = match region {
            None => Err(ResolveError::UnknownKind),
            Some(region) => f(region).ok_or(ResolveError::WrongType),
        }
    });
    out
}

/// The ask an envelope belongs to, while its command is decoded on the node that received it:
/// where its answer goes (the kind it went to, the node that sent it, which is the asker or a
/// node relaying for the asker) and the ask id the envelope carries.
#[derive(Clone)]
pub(crate) struct EnvelopeAsk {
    pub route: Arc<AnswerRoute>,
    pub ask_id: NonZeroU64,
}

thread_local! {
    /// The ask id of the envelope whose command this thread encodes, on the asker's node.
    static ENCODING_ASK: Cell<Option<NonZeroU64>> = const { Cell::new(None) };
    /// The ask of the envelope whose command this thread decodes.
    static DECODING_ASK: RefCell<Option<EnvelopeAsk>> = const { RefCell::new(None) };
}

/// Runs `encode` (of the command of ask `ask_id`'s envelope, or of a told command when `None`):
/// a `ReplyTo` of that very ask inside it is written as a marker, since the envelope carries
/// the ask id and the receiving node knows who sent it.
pub(crate) fn encoding_envelope<T>(ask_id: Option<NonZeroU64>, encode: impl FnOnce() -> T) -> T {
    struct Restore(Option<NonZeroU64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ENCODING_ASK.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(ENCODING_ASK.with(|c| c.replace(ask_id)));
    encode()
}

/// Whether the envelope being encoded on this thread is that of ask `ask_id` of this node.
pub(crate) fn encoding_ask_is(ask_id: NonZeroU64) -> bool {
    ENCODING_ASK.with(|c| c.get()) == Some(ask_id)
}

/// Runs `decode` (of the command of an envelope that belongs to `ask`, if any), so that the
/// marker `encoding_envelope` wrote becomes a `ReplyTo` answering that ask.
pub(crate) fn decoding_envelope<T>(ask: Option<EnvelopeAsk>, decode: impl FnOnce() -> T) -> T {
    struct Restore(Option<EnvelopeAsk>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            DECODING_ASK.with(|c| *c.borrow_mut() = previous);
        }
    }
    let _restore = Restore(DECODING_ASK.with(|c| c.replace(ask)));
    decode()
}

/// The ask of the envelope being decoded on this thread, if it belongs to one: `f` gets it.
pub(crate) fn with_decoding_ask<T>(f: impl FnOnce(Option<&EnvelopeAsk>) -> T) -> T {
    DECODING_ASK.with(|c| f(c.borrow().as_ref()))
}

#[cfg(test)]
mod envelope_scope_tests {
    use super::*;
    use shardik_core::membership::{Address, UniqueAddress};

    fn id(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    fn route(kind: &str, asker: &UniqueAddress) -> Arc<AnswerRoute> {
        Arc::new(AnswerRoute::new(
            Arc::from(kind),
            asker.clone(),
            Weak::new(),
        ))
    }

    #[test]
    fn only_the_envelope_being_encoded_is_its_asks_own() {
        assert!(!encoding_ask_is(id(7)), "no envelope outside the scope");
        encoding_envelope(Some(id(7)), || {
            assert!(encoding_ask_is(id(7)));
            assert!(
                !encoding_ask_is(id(8)),
                "another ask's ReplyTo is written in full"
            );
            // A told command encoded inside (an answer, a nested encoding) has no ask.
            encoding_envelope(None, || assert!(!encoding_ask_is(id(7))));
            assert!(encoding_ask_is(id(7)), "the outer scope comes back");
        });
        assert!(!encoding_ask_is(id(7)), "the scope ends with the encoding");
    }

    #[test]
    fn a_decoded_marker_answers_whoever_sent_the_envelope_by_its_ask_id() {
        // A node relaying for the asker sends the envelope under its own ask id: the answer
        // goes to the relay, which passes it on to the asker by the original id.
        let relay = UniqueAddress::new(Address::new("10.0.0.2", 2552), 9);
        let ask = EnvelopeAsk {
            route: route("account", &relay),
            ask_id: id(41),
        };
        let seen = decoding_envelope(Some(ask), || {
            with_decoding_ask(|a| {
                a.map(|a| {
                    let (kind, asker) = (a.route.kind().to_string(), a.route.asker().clone());
                    (asker, a.ask_id, kind)
                })
            })
        });
        assert_eq!(seen, Some((relay, id(41), "account".to_string())));
        assert!(
            with_decoding_ask(|a| a.is_none()),
            "the scope ends with the decoding"
        );
    }

    #[test]
    fn a_panicking_decode_still_ends_its_scope() {
        let ask = EnvelopeAsk {
            route: route("k", &UniqueAddress::new(Address::new("h", 1), 1)),
            ask_id: id(1),
        };
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decoding_envelope(Some(ask), || panic!("codec"))
        }));
        assert!(caught.is_err());
        assert!(with_decoding_ask(|a| a.is_none()));
        let caught =
            std::panic::catch_unwind(|| encoding_envelope(Some(id(3)), || panic!("codec")));
        assert!(caught.is_err());
        assert!(!encoding_ask_is(id(3)));
    }
}
