//! The lease rules every store keeps: one holder at a time, taken over only after expiry by
//! the store's clock, renewals that keep the token, releases only by the holder, and a token
//! that goes up whenever the lease changes hands.

use std::time::{Duration, Instant};

use super::fixtures::fresh;
use crate::error::StoreError;
use crate::lease::{LeaseAcquired, LeaseGrant, MAX_LEASE_TTL};
use crate::store::Store;

/// A time-to-live no check outlasts.
const LONG: Duration = Duration::from_secs(60);

async fn granted<S: Store + ?Sized>(store: &S, name: &str, owner: &str, ttl: Duration) -> u64 {
    match store.acquire_lease(name, owner, ttl).await.unwrap() {
        LeaseAcquired::Granted(LeaseGrant { token, expires_in }) => {
            assert_eq!(expires_in, ttl, "a grant lasts the time-to-live asked for");
            token
        }
        other => panic!("{owner} should get {name}: {other:?}"),
    }
}

async fn held_by<S: Store + ?Sized>(store: &S, name: &str, owner: &str, holder: &str) {
    match store.acquire_lease(name, owner, LONG).await.unwrap() {
        LeaseAcquired::HeldByOther {
            owner: o,
            time_left,
        } => {
            assert_eq!(o, holder, "{name} is held by {holder}");
            assert!(!time_left.is_zero() && time_left <= LONG, "{time_left:?}");
        }
        other => panic!("{owner} should find {name} held by {holder}: {other:?}"),
    }
}

/// Acquire, acquire again, renew, release, and a new holder: who may do what, and the tokens.
pub async fn leases_acquire_renew_release<S: Store + ?Sized>(store: &S) {
    let name = fresh("lease");
    assert_eq!(store.read_lease(&name).await.unwrap(), None);

    let t1 = granted(store, &name, "a", LONG).await;
    assert!(t1 >= 1, "tokens start at 1");
    let info = store.read_lease(&name).await.unwrap().unwrap();
    assert_eq!((info.owner.as_deref(), info.token), (Some("a"), t1));
    assert!(
        !info.time_left.is_zero() && info.time_left <= LONG,
        "{info:?}"
    );
    assert_eq!(info.holder(), Some("a"));

    held_by(store, &name, "b", "a").await;
    assert_eq!(
        granted(store, &name, "a", LONG).await,
        t1,
        "the holder taking its lease again keeps its token"
    );

    assert!(store.renew_lease(&name, "a", t1, LONG).await.unwrap());
    assert!(!store.renew_lease(&name, "a", t1 + 1, LONG).await.unwrap());
    assert!(!store.renew_lease(&name, "b", t1, LONG).await.unwrap());
    assert!(!store.release_lease(&name, "b", t1).await.unwrap());
    assert!(!store.release_lease(&name, "a", t1 + 1).await.unwrap());
    assert_eq!(
        store.read_lease(&name).await.unwrap().unwrap().holder(),
        Some("a"),
        "refused renewals and releases change nothing"
    );

    assert!(store.release_lease(&name, "a", t1).await.unwrap());
    let info = store.read_lease(&name).await.unwrap().unwrap();
    assert_eq!(
        (info.owner, info.token, info.time_left),
        (None, t1, Duration::ZERO)
    );
    assert!(
        !store.renew_lease(&name, "a", t1, LONG).await.unwrap(),
        "a released lease is not renewed"
    );
    assert!(!store.release_lease(&name, "a", t1).await.unwrap());

    let t2 = granted(store, &name, "b", LONG).await;
    assert!(t2 > t1, "a new holder gets a newer token: {t2} after {t1}");
    assert!(!store.release_lease(&name, "a", t1).await.unwrap());
    held_by(store, &name, "a", "b").await;
    let t3 = {
        assert!(store.release_lease(&name, "b", t2).await.unwrap());
        granted(store, &name, "b", LONG).await
    };
    assert!(
        t3 > t2,
        "taking a lease again after releasing it is a new tenure: {t3} after {t2}"
    );
}

/// A lease is taken over only once it expired by the store's clock; then its old holder can
/// neither renew nor take it; and a holder whose own lease expired gets a new token.
pub async fn leases_are_taken_over_only_after_expiry<S: Store + ?Sized>(store: &S) {
    let ttl = Duration::from_secs(1);
    let name = fresh("expiry");
    let sent = Instant::now();
    let first = granted(store, &name, "a", ttl).await;
    let answered = Instant::now();
    let rival = store.acquire_lease(&name, "b", ttl).await.unwrap();
    // The store granted a's lease after `sent`: it cannot have expired before `sent + ttl`.
    assert!(
        sent.elapsed() < ttl,
        "the store took {:?} to answer two calls; this check needs them within {ttl:?}",
        sent.elapsed()
    );
    match rival {
        LeaseAcquired::HeldByOther { owner, time_left } => {
            assert_eq!(owner, "a");
            assert!(time_left <= ttl, "{time_left:?}");
        }
        granted => panic!("b took a's lease before it expired: {granted:?}"),
    }
    // The store granted it before `answered`: it has expired by then plus the time-to-live.
    tokio::time::sleep((answered + ttl + Duration::from_millis(50)).duration_since(Instant::now()))
        .await;
    let second = granted(store, &name, "b", ttl).await;
    assert!(second > first, "{second} after {first}");
    assert!(
        !store.renew_lease(&name, "a", first, ttl).await.unwrap(),
        "the old holder cannot renew"
    );
    match store.acquire_lease(&name, "a", ttl).await.unwrap() {
        LeaseAcquired::HeldByOther { owner, .. } => assert_eq!(owner, "b"),
        other => panic!("a should find the lease b's: {other:?}"),
    }

    // Nobody took it, yet an expired lease is a new tenure for its own holder too.
    let own = fresh("own-expiry");
    let short = Duration::from_millis(100);
    let before = granted(store, &own, "c", short).await;
    tokio::time::sleep(short + Duration::from_millis(50)).await;
    assert!(
        !store.renew_lease(&own, "c", before, short).await.unwrap(),
        "an expired lease is not renewed"
    );
    let after = granted(store, &own, "c", LONG).await;
    assert!(after > before, "{after} after {before}");
    let info = store.read_lease(&own).await.unwrap().unwrap();
    assert_eq!((info.holder(), info.token), (Some("c"), after));
}

/// Empty names and owners, times-to-live out of range and tokens never granted are refused
/// with [`StoreError::InvalidArgument`], changing nothing.
pub async fn lease_arguments_are_checked<S: Store + ?Sized>(store: &S) {
    let name = fresh("args");
    let refused = |r: Result<_, StoreError>, what: &str| match r {
        Err(StoreError::InvalidArgument(why)) => assert!(!why.is_empty()),
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    };
    refused(
        store.acquire_lease("", "a", LONG).await.map(drop),
        "no name",
    );
    refused(
        store.acquire_lease(&name, "", LONG).await.map(drop),
        "no owner",
    );
    refused(
        store
            .acquire_lease(&name, "a", Duration::ZERO)
            .await
            .map(drop),
        "zero ttl",
    );
    refused(
        store
            .acquire_lease(&name, "a", Duration::from_micros(999))
            .await
            .map(drop),
        "ttl under 1 ms",
    );
    refused(
        store
            .acquire_lease(&name, "a", MAX_LEASE_TTL + Duration::from_secs(1))
            .await
            .map(drop),
        "ttl over the maximum",
    );
    refused(
        store.renew_lease(&name, "", 1, LONG).await.map(drop),
        "renew without owner",
    );
    refused(
        store
            .renew_lease(&name, "a", 1, Duration::ZERO)
            .await
            .map(drop),
        "renew with zero ttl",
    );
    refused(
        store
            .renew_lease(&name, "a", u64::MAX, LONG)
            .await
            .map(drop),
        "renew with a token never granted",
    );
    refused(
        store.release_lease("", "a", 1).await.map(drop),
        "release without name",
    );
    refused(
        store.release_lease(&name, "a", u64::MAX).await.map(drop),
        "release with a token never granted",
    );
    assert_eq!(
        store.read_lease(&name).await.unwrap(),
        None,
        "nothing taken"
    );
}
