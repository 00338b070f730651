//! How an [`EntityRef`](super::EntityRef) or a [`ReplyTo`](super::ReplyTo) that arrived inside a
//! message finds its way back to a live node: the kind task that decodes a command or a reply
//! makes its node's sharding reachable from the decoding thread for the duration of the
//! (synchronous) decode, and their `Deserialize` looks the kind, or the node's way of sending
//! replies, up there.
//!
//! A scope is used, not a value passed to the codec, so that any serde codec works unchanged
//! and an `EntityRef` or a `ReplyTo` may sit anywhere inside a user's command or reply.

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Arc, Weak};

use super::pending::ReplyEndpoint;

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
