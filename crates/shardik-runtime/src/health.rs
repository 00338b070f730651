//! The sharding part of the readiness check (`GET /ready`), the reference's
//! `ClusterShardingHealthCheck`, configured by `cluster.sharding.healthcheck`.
//!
//! A node is ready for sharded traffic once the region of every named entity kind has
//! registered with its coordinator: before that, messages to it would only be buffered. The
//! check then passes for good, because a coordinator that moves later (its node left) must
//! not make every node of the cluster unready at once. It also passes, without asking anyone,
//! once `disabled-after` has passed since this member was first seen with a status other than
//! Joining or Removed, so that a kind whose coordinator cannot start (say, a kind added in a
//! rolling update whose oldest node runs the old version) cannot keep nodes unready forever.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use shardik_config::ShardingHealthCheckSettings;
use shardik_core::membership::MemberStatus;
use tokio::time::Instant;

use crate::node::handle::MembershipSnapshot;
use crate::sharding::Sharding;

/// What the check asks of sharding. [`Sharding`] is the real one; the check's own tests use a
/// fake, so that latching, timeouts and unknown kinds are tested without a cluster.
pub trait RegionRegistry {
    /// The entity kinds initialized on this node.
    fn kinds(&self) -> Vec<String>;
    /// Whether this node's region of `kind` is registered with its coordinator, or `None`
    /// when it did not answer within `timeout`.
    fn registered(
        &self,
        kind: &str,
        timeout: Duration,
    ) -> impl Future<Output = Option<bool>> + Send;
}

impl RegionRegistry for Sharding {
    fn kinds(&self) -> Vec<String> {
        Sharding::kinds(self)
    }

    async fn registered(&self, kind: &str, timeout: Duration) -> Option<bool> {
        self.region_state(kind, timeout).await.map(|s| s.registered)
    }
}

/// One named entity kind that keeps this node from being ready, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KindNotReady {
    /// The entity kind's name.
    pub kind: String,
    /// Why its region does not count as ready, in a sentence.
    pub reason: String,
}

/// The sharding readiness check of one node. Cheap to call often: after it first passed it
/// answers from a flag.
#[derive(Debug)]
pub struct ShardingHealthCheck {
    settings: ShardingHealthCheckSettings,
    /// Every named region was registered once: the check passes from then on.
    registered: AtomicBool,
    /// When this member was first seen neither Joining nor Removed (recorded when the check
    /// runs, as the reference does).
    active_since: Mutex<Option<Instant>>,
    /// `disabled-after` has been logged as elapsed.
    disabled_logged: AtomicBool,
}

impl ShardingHealthCheck {
    /// A check with these settings (`cluster.sharding.healthcheck`).
    pub fn new(settings: ShardingHealthCheckSettings) -> Self {
        ShardingHealthCheck {
            settings,
            registered: AtomicBool::new(false),
            active_since: Mutex::new(None),
            disabled_logged: AtomicBool::new(false),
        }
    }

    /// Passes when no kind is named, once every named kind's region on this node has reported
    /// itself registered with its coordinator (and from then on), or when `disabled-after`
    /// has elapsed since this member became active. Otherwise lists each named kind that is
    /// not ready: not registered on this node (or no sharding at all), its region not yet
    /// registered with a coordinator, or no answer within `timeout`.
    pub async fn check<R: RegionRegistry>(
        &self,
        snapshot: &MembershipSnapshot,
        sharding: Option<&R>,
    ) -> Result<(), Vec<KindNotReady>> {
        if self.settings.names.is_empty() || self.registered.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.disabled(snapshot) {
            return Ok(());
        }
        let Some(sharding) = sharding else {
            return Err(self
                .settings
                .names
                .iter()
                .map(|kind| KindNotReady {
                    kind: kind.clone(),
                    reason: "sharding is not running on this node".to_string(),
                })
                .collect());
        };
        let known = sharding.kinds();
        // Asked all at once, so the whole check takes at most one `timeout`.
        let answers = futures_util::future::join_all(
            self.settings
                .names
                .iter()
                .map(|kind| self.check_kind(sharding, &known, kind)),
        )
        .await;
        let not_ready: Vec<KindNotReady> = answers.into_iter().flatten().collect();
        if not_ready.is_empty() {
            self.registered.store(true, Ordering::Release);
            tracing::info!(
                kinds = ?self.settings.names,
                "sharding health check passed: every named region is registered with its coordinator"
            );
            Ok(())
        } else {
            Err(not_ready)
        }
    }

    async fn check_kind<R: RegionRegistry>(
        &self,
        sharding: &R,
        known: &[String],
        kind: &str,
    ) -> Option<KindNotReady> {
        let not_ready = |reason: String| {
            Some(KindNotReady {
                kind: kind.to_string(),
                reason,
            })
        };
        if !known.iter().any(|k| k == kind) {
            return not_ready(
                "no region of this kind on this node: the kind is not initialized here \
                 (check `cluster.sharding.healthcheck.names` against the kinds the application \
                 starts)"
                    .to_string(),
            );
        }
        match sharding.registered(kind, self.settings.timeout).await {
            None => not_ready(format!(
                "the region did not answer within {} (`cluster.sharding.healthcheck.timeout`)",
                humantime::format_duration(self.settings.timeout)
            )),
            Some(false) => {
                not_ready("the region has not registered with its coordinator yet".to_string())
            }
            Some(true) => None,
        }
    }

    /// Whether `disabled-after` has elapsed since this member was first seen active; records
    /// that moment the first time it is seen.
    fn disabled(&self, snapshot: &MembershipSnapshot) -> bool {
        let active = matches!(
            snapshot.self_status,
            Some(status) if status != MemberStatus::Joining && status != MemberStatus::Removed
        );
        let mut since = self.active_since.lock().unwrap_or_else(|e| e.into_inner());
        if since.is_none() && active {
            *since = Some(Instant::now());
        }
        let disabled = since.is_some_and(|t| t.elapsed() > self.settings.disabled_after);
        if disabled && !self.disabled_logged.swap(true, Ordering::Relaxed) {
            tracing::info!(
                disabled_after = %humantime::format_duration(self.settings.disabled_after),
                "sharding health check passes from now on: `cluster.sharding.healthcheck.disabled-after` has elapsed since this node became a member"
            );
        }
        disabled
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use shardik_config::Settings;
    use shardik_core::membership::{Address, UniqueAddress};

    /// Kinds with a registration answer each: `Some(true)` registered, `Some(false)` not yet,
    /// `None` never answers (the fake then waits out the timeout, as a stuck region would).
    #[derive(Default)]
    struct FakeRegions(Mutex<BTreeMap<String, Option<bool>>>);

    impl FakeRegions {
        fn set(&self, kind: &str, answer: Option<bool>) {
            self.0.lock().unwrap().insert(kind.to_string(), answer);
        }
    }

    impl RegionRegistry for FakeRegions {
        fn kinds(&self) -> Vec<String> {
            self.0.lock().unwrap().keys().cloned().collect()
        }

        async fn registered(&self, kind: &str, timeout: Duration) -> Option<bool> {
            let answer = self.0.lock().unwrap().get(kind).copied().flatten();
            if answer.is_none() {
                tokio::time::sleep(timeout).await;
            }
            answer
        }
    }

    fn settings(names: &[&str], disabled_after: Duration) -> ShardingHealthCheckSettings {
        let mut settings = Settings::reference().cluster.sharding.healthcheck;
        settings.names = names.iter().map(|n| n.to_string()).collect();
        settings.timeout = Duration::from_millis(100);
        settings.disabled_after = disabled_after;
        settings
    }

    fn snapshot(status: Option<MemberStatus>) -> MembershipSnapshot {
        let mut s =
            MembershipSnapshot::not_joined(UniqueAddress::new(Address::new("127.0.0.1", 1), 1));
        s.self_status = status;
        s
    }

    const LONG: Duration = Duration::from_secs(600);

    fn kinds(err: &[KindNotReady]) -> Vec<&str> {
        err.iter().map(|k| k.kind.as_str()).collect()
    }

    #[tokio::test]
    async fn passes_without_names() {
        let check = ShardingHealthCheck::new(settings(&[], LONG));
        assert_eq!(check.check::<Sharding>(&snapshot(None), None).await, Ok(()));
    }

    #[tokio::test]
    async fn every_named_kind_must_be_registered_then_the_check_latches() {
        let up = snapshot(Some(MemberStatus::Up));
        let regions = FakeRegions::default();
        regions.set("counter", Some(false));
        regions.set("cart", Some(true));
        regions.set("unnamed", Some(false));
        let check = ShardingHealthCheck::new(settings(&["counter", "cart", "missing"], LONG));

        let err = check.check(&up, Some(&regions)).await.unwrap_err();
        assert_eq!(kinds(&err), ["counter", "missing"]);
        assert!(
            err[0]
                .reason
                .contains("not registered with its coordinator yet"),
            "{err:?}"
        );
        assert!(err[1].reason.contains("not initialized here"), "{err:?}");

        regions.set("counter", Some(true));
        regions.set("missing", None);
        let err = check.check(&up, Some(&regions)).await.unwrap_err();
        assert_eq!(kinds(&err), ["missing"]);
        assert!(
            err[0].reason.contains("did not answer within 100ms"),
            "{err:?}"
        );

        regions.set("missing", Some(true));
        assert_eq!(check.check(&up, Some(&regions)).await, Ok(()));
        // Latched: a region losing its coordinator later does not make the node unready.
        regions.set("counter", Some(false));
        regions.set("missing", None);
        assert_eq!(check.check(&up, Some(&regions)).await, Ok(()));
    }

    #[tokio::test]
    async fn names_fail_until_disabled_after_has_passed_since_the_member_became_active() {
        let disabled_after = Duration::from_millis(200);
        let check = ShardingHealthCheck::new(settings(&["counter", "cart"], disabled_after));
        let err = check
            .check::<Sharding>(&snapshot(None), None)
            .await
            .unwrap_err();
        assert_eq!(kinds(&err), ["counter", "cart"]);
        assert!(err[0].reason.contains("sharding is not running"), "{err:?}");
        // Joining does not start the clock, however long it lasts.
        tokio::time::sleep(disabled_after * 2).await;
        let joining = snapshot(Some(MemberStatus::Joining));
        assert!(check.check::<Sharding>(&joining, None).await.is_err());
        // Up starts it; the check still fails until `disabled-after` has passed.
        let up = snapshot(Some(MemberStatus::Up));
        assert!(check.check::<Sharding>(&up, None).await.is_err());
        tokio::time::sleep(disabled_after + Duration::from_millis(100)).await;
        assert_eq!(check.check::<Sharding>(&up, None).await, Ok(()));
    }
}
