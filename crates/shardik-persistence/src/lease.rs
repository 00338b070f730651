//! Leases kept by a store: what [`Store::acquire_lease`](crate::Store::acquire_lease) and its
//! siblings answer, and the checks of their arguments that every store shares.
//!
//! A lease is a named row with an owner, an expiry and a fencing token. Expiry is judged by
//! one clock per store (the PostgreSQL server's, the machine's for SQLite, an injectable one
//! for [`MemoryStore`](crate::MemoryStore)), never by the callers' clocks, so callers on
//! machines whose clocks disagree still never hold one lease at once. A lease is taken only
//! when it is free, expired, or already held by the same owner; its token goes up every time
//! it changes hands (renewals keep it), so a write carrying an older token can be refused
//! ([`Fence`](crate::Fence)).

use std::time::Duration;

use crate::error::StoreError;

/// A lease granted to its owner: the token of this tenure and how long it lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseGrant {
    /// The fencing token: the same for the whole tenure (renewals keep it), higher than every
    /// token the lease had before.
    pub token: u64,
    /// How long the lease lasts from the moment the store granted it (the time-to-live asked
    /// for). A caller that starts its own countdown when it *sent* the request stays on the
    /// safe side of the store's expiry.
    pub expires_in: Duration,
}

/// The answer to [`Store::acquire_lease`](crate::Store::acquire_lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseAcquired {
    /// The lease is the caller's.
    Granted(LeaseGrant),
    /// Another owner holds the lease and it has time left.
    HeldByOther {
        /// Who holds it.
        owner: String,
        /// How long it still has, by the store's clock, unless its holder renews it.
        time_left: Duration,
    },
}

/// A lease as the store sees it, for inspection ([`Store::read_lease`](crate::Store::read_lease)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The last owner; `None` once released.
    pub owner: Option<String>,
    /// The token of the last tenure.
    pub token: u64,
    /// How long the lease still has by the store's clock; zero once expired or released.
    pub time_left: Duration,
}

impl LeaseInfo {
    /// The owner holding the lease now: there is one, and the lease has time left.
    pub fn holder(&self) -> Option<&str> {
        self.owner.as_deref().filter(|_| !self.time_left.is_zero())
    }
}

/// The longest time-to-live a store accepts: a century, far past any use, and small enough
/// that expiries in microseconds fit a signed 64-bit SQL integer.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn invalid(what: String) -> StoreError {
    StoreError::InvalidArgument(what)
}

/// Checks a lease's name and owner: neither may be empty (an empty owner would be
/// indistinguishable from "nobody").
pub(crate) fn check_names(name: &str, owner: &str) -> Result<(), StoreError> {
    if name.is_empty() {
        return Err(invalid(
            "a lease needs a name; an empty one was given".into(),
        ));
    }
    if owner.is_empty() {
        return Err(invalid(format!(
            "lease {name:?}: the owner is empty; name the node that takes it (its address and uid)"
        )));
    }
    Ok(())
}

/// Checks a time-to-live and returns it in whole microseconds (the stores' unit): at least
/// 1 ms, at most [`MAX_LEASE_TTL`].
pub(crate) fn ttl_micros(name: &str, ttl: Duration) -> Result<i64, StoreError> {
    if ttl < Duration::from_millis(1) || ttl > MAX_LEASE_TTL {
        return Err(invalid(format!(
            "lease {name:?}: time-to-live {ttl:?} is out of range (1 ms to 100 years)"
        )));
    }
    // In range: at most about 3.2e15 microseconds.
    Ok(ttl.as_micros() as i64)
}

/// Checks a token handed back by a caller: stores keep tokens as signed 64-bit integers.
pub(crate) fn token_sql(name: &str, token: u64) -> Result<i64, StoreError> {
    i64::try_from(token)
        .map_err(|_| invalid(format!("lease {name:?}: token {token} was never granted")))
}

/// A remaining time in microseconds, read back from a store, as a duration (negative: none).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn time_left(micros: i64) -> Duration {
    Duration::from_micros(u64::try_from(micros).unwrap_or(0))
}
