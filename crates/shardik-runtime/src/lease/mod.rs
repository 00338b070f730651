//! Leases on a running node (Akka's `Lease`): take a named lease in the node's store, keep it
//! renewed in the background, know at any moment whether it is still held, and hear when it is
//! lost.
//!
//! The store judges expiry by its own clock and hands out a fencing token per tenure
//! ([`shardik_persistence::Store::acquire_lease`]). This handle adds the holder's side: it
//! renews every `heartbeat-interval`, each call bounded by `lease-operation-timeout`, and
//! counts on the lease only until its own conservative deadline: the moment it *sent* the
//! request that last granted or renewed it, plus the time-to-live (`heartbeat-timeout`), minus
//! `lease-operation-timeout` as a safety margin. The store's expiry, counted from the moment
//! the store handled that request, is never earlier (given clocks that run at the same rate),
//! so the holder gives up before anyone else can take over. Writes made under the lease carry
//! its token ([`Lease::fence`]), so a holder that stalls past even that margin still cannot
//! write after its successor.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use shardik_runtime::config::Settings;
//! # use shardik_runtime::lease::{Lease, LeaseStatus};
//! # use shardik_runtime::persistence::Persistence;
//! # async fn run(settings: Settings, persistence: Persistence,
//! #              node: shardik_core::membership::UniqueAddress) -> anyhow::Result<()> {
//! let lease = Lease::new(
//!     Arc::clone(persistence.store()),
//!     "shardik-shard-cart-17",
//!     Lease::owner_for(&node),
//!     settings.coordination.lease,
//! )?;
//! if lease.acquire().await? {
//!     let mut status = lease.subscribe();
//!     tokio::spawn(async move {
//!         // Stop what runs under the lease when it is lost.
//!         let _ = status.wait_for(|s| matches!(s, LeaseStatus::Lost { .. })).await;
//!     });
//!     // ... journal writes carry `lease.fence("cart|17")` ...
//!     lease.release().await?;
//! }
//! # Ok(())
//! # }
//! ```

mod renewal;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shardik_core::membership::UniqueAddress;
use shardik_persistence::{Fence, LeaseAcquired, Store, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::LeaseSettings;
use crate::metrics::{LEASE_ACQUISITIONS_TOTAL, LEASE_LOSSES_TOTAL};

/// Where a lease handle stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Not held: never acquired, or released.
    Free,
    /// Held with this token, renewed in the background.
    Held {
        /// The tenure's fencing token.
        token: u64,
    },
    /// Held with this token, then lost; [`Lease::acquire`] may take it again (for a new token).
    Lost {
        /// The lost tenure's token.
        token: u64,
        /// Why.
        reason: LostReason,
    },
}

/// Why a held lease was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// A renewal was refused: the store says the lease is no longer this owner's with this
    /// token (it expired there and was taken, or was released behind our back).
    Refused,
    /// No renewal succeeded before the holder's own deadline (the store could not be reached
    /// or answered too slowly).
    Expired,
}

impl LostReason {
    /// The metric label.
    fn label(self) -> &'static str {
        match self {
            LostReason::Refused => "refused",
            LostReason::Expired => "expired",
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Refused => "the store refused a renewal: the lease is no longer ours",
            LostReason::Expired => "no renewal succeeded before the lease would expire",
        })
    }
}

/// Why a lease call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The store answered with an error (unreachable, failed, or refused the arguments).
    #[error("lease {lease:?}: {error}")]
    Store {
        /// The lease's name.
        lease: String,
        /// What the store said.
        error: StoreError,
    },
    /// The store did not answer within `lease-operation-timeout`; the call may or may not
    /// have taken effect.
    #[error("lease {lease:?}: the store did not answer {operation} within {after:?}")]
    Timeout {
        /// The lease's name.
        lease: String,
        /// `acquire` or `release`.
        operation: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// The settings cannot keep a lease (see [`LeaseSettings::validate`]).
    #[error("lease settings: {0}")]
    Settings(String),
}

/// A lease of one name for one owner, in one store. Clones share the lease; dropping the last
/// clone stops the renewals (the lease then expires in the store: call [`release`] to free it
/// at once).
///
/// [`release`]: Lease::release
#[derive(Clone)]
pub struct Lease {
    shared: Arc<Shared>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.shared.name)
            .field("owner", &self.shared.owner)
            .field("status", &*self.shared.status.borrow())
            .finish()
    }
}

/// What the handles and the renewal task share.
struct Shared {
    store: Arc<dyn Store>,
    name: String,
    owner: String,
    settings: LeaseSettings,
    state: Mutex<State>,
    /// Changed only with `state` locked, so the two always agree.
    status: watch::Sender<LeaseStatus>,
}

#[derive(Default)]
struct State {
    /// The current tenure's token, kept after a loss so that a release can still free it.
    token: Option<u64>,
    /// Until when the holder counts on the lease; `None` when it does not.
    deadline: Option<Instant>,
    /// Bumped whenever a tenure begins or ends here, so that a renewal task of an earlier
    /// tenure changes nothing.
    tenure: u64,
    renewal: Option<JoinHandle<()>>,
    /// The last failure to reach the store, until a call succeeds again.
    store_error: Option<String>,
    renewal_failures: u64,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(task) = self.state.get_mut().ok().and_then(|s| s.renewal.take()) {
            task.abort();
        }
    }
}

impl Lease {
    /// A handle on lease `name` for `owner` in `store` (use the node's store,
    /// `Persistence::store`, and [`Lease::owner_for`] the node). Nothing is taken until
    /// [`acquire`](Self::acquire). Errors: settings that cannot keep a lease.
    pub fn new(
        store: Arc<dyn Store>,
        name: impl Into<String>,
        owner: impl Into<String>,
        settings: LeaseSettings,
    ) -> Result<Self, LeaseError> {
        settings
            .validate()
            .map_err(|e| LeaseError::Settings(e.to_string()))?;
        Ok(Lease {
            shared: Arc::new(Shared {
                store,
                name: name.into(),
                owner: owner.into(),
                settings,
                state: Mutex::new(State::default()),
                status: watch::Sender::new(LeaseStatus::Free),
            }),
        })
    }

    /// The owner name of a node: its address and uid (`host:port#uid`), so that a restarted
    /// node is a new owner and never mistakes its predecessor's lease for its own.
    pub fn owner_for(node: &UniqueAddress) -> String {
        node.to_string()
    }

    /// The lease's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The owner this handle takes the lease for.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Takes the lease if it is free, expired, or already ours: `Ok(true)` when held (then it
    /// is renewed in the background until released or lost), `Ok(false)` when another owner
    /// holds it. Held already: `Ok(true)` at once.
    pub async fn acquire(&self) -> Result<bool, LeaseError> {
        if self.check() {
            return Ok(true);
        }
        let shared = &self.shared;
        let settings = shared.settings;
        let sent = Instant::now();
        let answer = tokio::time::timeout(
            settings.lease_operation_timeout,
            shared
                .store
                .acquire_lease(&shared.name, &shared.owner, settings.heartbeat_timeout),
        )
        .await;
        let grant = match answer {
            Err(_) => {
                return Err(shared.failed(LeaseError::Timeout {
                    lease: shared.name.clone(),
                    operation: "acquire",
                    after: settings.lease_operation_timeout,
                }));
            }
            Ok(Err(error)) => {
                return Err(shared.failed(LeaseError::Store {
                    lease: shared.name.clone(),
                    error,
                }));
            }
            Ok(Ok(LeaseAcquired::HeldByOther { owner, time_left })) => {
                shared.lock().store_error = None;
                tracing::debug!(lease = %shared.name, holder = %owner, ?time_left, "lease held by another owner");
                return Ok(false);
            }
            Ok(Ok(LeaseAcquired::Granted(grant))) => grant,
        };
        let deadline = shared.deadline_after(sent, grant.expires_in);
        let mut state = shared.lock();
        state.store_error = None;
        if deadline <= Instant::now() {
            // Granted, but the answer came too late to count on it.
            tracing::warn!(lease = %shared.name, token = grant.token, "lease granted too late to use: the store took longer than its time-to-live minus the safety margin");
            state.token = Some(grant.token);
            return Ok(false);
        }
        state.tenure += 1;
        state.token = Some(grant.token);
        state.deadline = Some(deadline);
        if let Some(old) = state.renewal.take() {
            old.abort();
        }
        state.renewal = Some(tokio::spawn(renewal::run(
            Arc::downgrade(shared),
            state.tenure,
            grant.token,
        )));
        shared
            .status
            .send_replace(LeaseStatus::Held { token: grant.token });
        drop(state);
        metrics::counter!(LEASE_ACQUISITIONS_TOTAL).increment(1);
        tracing::info!(lease = %shared.name, owner = %shared.owner, token = grant.token, "lease acquired");
        Ok(true)
    }

    /// Gives the lease up: renewals stop and the status becomes [`LeaseStatus::Free`] at once,
    /// then the store frees it so that anyone can take it. `Ok(true)` when the store released
    /// our tenure, `Ok(false)` when there was nothing of ours to release (never held, or
    /// already taken by another owner).
    pub async fn release(&self) -> Result<bool, LeaseError> {
        let shared = &self.shared;
        let token = {
            let mut state = shared.lock();
            state.tenure += 1;
            state.deadline = None;
            if let Some(task) = state.renewal.take() {
                task.abort();
            }
            shared.status.send_replace(LeaseStatus::Free);
            state.token.take()
        };
        let Some(token) = token else {
            return Ok(false);
        };
        let timeout = shared.settings.lease_operation_timeout;
        match tokio::time::timeout(
            timeout,
            shared
                .store
                .release_lease(&shared.name, &shared.owner, token),
        )
        .await
        {
            Ok(Ok(released)) => {
                shared.lock().store_error = None;
                tracing::info!(lease = %shared.name, token, released, "lease released");
                Ok(released)
            }
            Ok(Err(error)) => Err(shared.failed(LeaseError::Store {
                lease: shared.name.clone(),
                error,
            })),
            Err(_) => Err(shared.failed(LeaseError::Timeout {
                lease: shared.name.clone(),
                operation: "release",
                after: timeout,
            })),
        }
    }

    /// Whether the lease is held: acquired, not lost or released, and not past this holder's
    /// own conservative deadline (see the module's documentation). Cheap: no store call.
    pub fn check(&self) -> bool {
        let state = self.shared.lock();
        matches!(*self.shared.status.borrow(), LeaseStatus::Held { .. })
            && state.deadline.is_some_and(|d| Instant::now() < d)
    }

    /// The fencing token of the tenure held now, if [`check`](Self::check) passes.
    pub fn token(&self) -> Option<u64> {
        // Copied out first: `check` locks the state, and the status is never borrowed while
        // taking that lock (the state's holders update the status).
        let status = self.shared.status.borrow().clone();
        match status {
            LeaseStatus::Held { token } if self.check() => Some(token),
            _ => None,
        }
    }

    /// The fence for writes made under the lease, on `scope` (e.g. `"{kind}|{shard}"`), if
    /// the lease is held: the store refuses them once a newer holder has written.
    pub fn fence(&self, scope: impl Into<Arc<str>>) -> Option<Fence> {
        self.token().map(|token| Fence::new(scope, token))
    }

    /// The status now.
    pub fn status(&self) -> LeaseStatus {
        self.shared.status.borrow().clone()
    }

    /// The status, watched: changes to [`LeaseStatus::Lost`] when the lease is lost (a
    /// renewal refused, or none succeeded before the deadline), the lease's "lost" callback.
    pub fn subscribe(&self) -> watch::Receiver<LeaseStatus> {
        self.shared.status.subscribe()
    }

    /// The last failure to reach the store (for readiness checks and logs); `None` once a call
    /// succeeds again.
    pub fn store_error(&self) -> Option<String> {
        self.shared.lock().store_error.clone()
    }

    /// How many background renewals of this handle failed (store error or timeout).
    pub fn renewal_failures(&self) -> u64 {
        self.shared.lock().renewal_failures
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The holder's deadline for a grant or renewal of `ttl` requested at `sent`.
    fn deadline_after(&self, sent: Instant, ttl: Duration) -> Instant {
        sent + ttl.saturating_sub(self.settings.lease_operation_timeout)
    }

    /// Records a failed call (for [`Lease::store_error`]) and returns its error.
    fn failed(&self, error: LeaseError) -> LeaseError {
        tracing::warn!(lease = %self.name, error = %error, "lease call failed");
        self.lock().store_error = Some(error.to_string());
        error
    }

    /// The deadline of `tenure`, if it is still the current one and held.
    fn deadline_of(&self, tenure: u64) -> Option<Instant> {
        let state = self.lock();
        (state.tenure == tenure).then_some(state.deadline).flatten()
    }

    /// A renewal of `tenure`, requested at `sent`, succeeded.
    fn renewed(&self, tenure: u64, sent: Instant) {
        let mut state = self.lock();
        if state.tenure == tenure {
            state.deadline = Some(self.deadline_after(sent, self.settings.heartbeat_timeout));
            state.store_error = None;
        }
    }

    /// A renewal of `tenure` failed; the lease is kept until the deadline.
    fn renewal_failed(&self, tenure: u64, why: String) {
        let mut state = self.lock();
        if state.tenure != tenure {
            return;
        }
        state.renewal_failures += 1;
        metrics::counter!(crate::metrics::LEASE_RENEWAL_FAILURES_TOTAL).increment(1);
        let left = state
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()));
        tracing::warn!(lease = %self.name, error = %why, time_left = ?left, "lease renewal failed; retrying");
        state.store_error = Some(why);
    }

    /// `tenure` is lost.
    fn lose(&self, tenure: u64, token: u64, reason: LostReason) {
        let mut state = self.lock();
        if state.tenure != tenure {
            return;
        }
        state.deadline = None;
        state.renewal = None;
        // Counted and logged before anyone watching the status hears of the loss.
        metrics::counter!(LEASE_LOSSES_TOTAL, "reason" => reason.label()).increment(1);
        tracing::warn!(lease = %self.name, owner = %self.owner, token, %reason, "lease lost");
        self.status
            .send_replace(LeaseStatus::Lost { token, reason });
        drop(state);
    }
}
