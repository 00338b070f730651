//! The split-brain resolver's side effects on a running node: the store calls of its
//! lease-majority lease, and the logs and metrics of its decisions.
//!
//! The membership core decides, lease timing included: its lease holder (a `LeaseKeeper`,
//! `shardik_core::membership` `node/sbr_lease.rs`) answers the resolver at once while it holds
//! the lease, asks for one acquisition otherwise, renews on its timers and knows when the lease
//! is lost. This module only carries out what it emits:
//! - [`Effect::SbrLease`]: one call on the store (acquire as this node's
//!   [`owner_for`](crate::lease::owner_for) name, renew, release), each bounded by
//!   `coordination.lease.lease-operation-timeout` (made by `lease.rs`, as sharding's lease
//!   calls are); the answers of acquisitions and renewals go back to the core as
//!   [`Input::SbrLeaseAnswered`] (a timeout or an error is [`LeaseAnswer::Failed`]).
//! - [`Effect::SbrLeaseLost`]: logged and counted.
//! - [`Effect::Sbr`]: a decision the core has carried out, logged and counted.
//!
//! Calls run one at a time, in order, on a task of their own, so the driver never waits for
//! the store and a release is never overtaken by a later acquisition (the core relies on it).
//!
//! When the node stops, the lease is *not* released: the core's renewals stop and it expires
//! after `heartbeat-timeout`. Releasing early could hand it to a side this node's cluster has
//! just downed, which would then survive too.
//!
//! [`Effect::SbrLease`]: shardik_core::membership::Effect::SbrLease
//! [`Effect::SbrLeaseLost`]: shardik_core::membership::Effect::SbrLeaseLost
//! [`Effect::Sbr`]: shardik_core::membership::Effect::Sbr

use std::sync::Arc;

use shardik_config::{ConfigError, LeaseSettings, Settings};
use shardik_core::lease::{LeaseAnswer, LeaseCall, LeaseLoss, LeaseRequest};
use shardik_core::membership::sbr::SbrAction;
use shardik_core::membership::{Input, UniqueAddress};
use shardik_persistence::{LeaseAcquired, Store};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::lease::{CallFailure, LeaseCalls};
use crate::metrics::{LEASE_LOSSES_TOTAL, SBR_DECISIONS_TOTAL, SBR_LEASE_REQUESTS_TOTAL};

/// How many lease calls may wait for the worker. The core has at most one acquisition or
/// renewal out and a release or two behind it, so this is never reached in practice; it
/// bounds the queue all the same.
const QUEUE: usize = 16;

/// What a node needs to keep the lease-majority lease.
#[derive(Clone)]
pub struct SbrLeaseOptions {
    /// The store that keeps the lease: the node's store (`persistence.store`), which every
    /// node of the cluster must share.
    pub store: Arc<dyn Store>,
    /// The lease's name, the same on every node (`lease-majority.lease-name`).
    pub name: String,
    /// Its time-to-live and call timeout (`coordination.lease.*`; the renewal interval is the
    /// core's business).
    pub settings: LeaseSettings,
}

impl std::fmt::Debug for SbrLeaseOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SbrLeaseOptions")
            .field("name", &self.name)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl SbrLeaseOptions {
    /// The lease the settings ask for, in `store`: named by [`Settings::sbr_lease_name`],
    /// timed by `coordination.lease.*`.
    pub fn from_settings(settings: &Settings, store: Arc<dyn Store>) -> Self {
        SbrLeaseOptions {
            store,
            name: settings.sbr_lease_name(),
            settings: settings.coordination.lease,
        }
    }
}

/// Where the worker makes its calls.
struct Target {
    store: Arc<dyn Store>,
    name: String,
    owner: String,
    settings: LeaseSettings,
}

impl Target {
    /// The lease's store calls, each bounded by `lease-operation-timeout`.
    fn calls(&self) -> LeaseCalls<'_> {
        LeaseCalls {
            store: &*self.store,
            name: &self.name,
            owner: &self.owner,
            limit: self.settings.lease_operation_timeout,
        }
    }
}

/// Carries out the resolver's effects for one node: owned by the node's driver.
pub struct SbrLease {
    /// To the worker that makes the store calls; `None` without a lease.
    calls: Option<mpsc::Sender<LeaseRequest<()>>>,
    /// Answers for the driver to feed to the core (also used for the failures made here).
    answers_tx: mpsc::Sender<Input>,
    answers_rx: Option<mpsc::Receiver<Input>>,
    /// The lease's name, for logs (`None` without a lease).
    name: Option<String>,
}

impl std::fmt::Debug for SbrLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SbrLease")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SbrLease {
    /// The effects' executor for `node`, with the lease of `options` if given (taken as
    /// [`owner_for`](crate::lease::owner_for) the node). Without options, every acquisition
    /// fails with an error in the log: a resolver configured for lease-majority without a
    /// lease can only down its own side. Must be called inside a tokio runtime.
    ///
    /// Errors: lease settings that cannot keep a lease.
    pub fn start(
        options: Option<SbrLeaseOptions>,
        node: &UniqueAddress,
    ) -> Result<Self, ConfigError> {
        let (answers_tx, answers_rx) = mpsc::channel(QUEUE);
        let mut this = SbrLease {
            calls: None,
            answers_tx,
            answers_rx: Some(answers_rx),
            name: None,
        };
        if let Some(o) = options {
            o.settings.validate()?;
            let (calls_tx, calls_rx) = mpsc::channel(QUEUE);
            this.name = Some(o.name.clone());
            let target = Target {
                store: o.store,
                name: o.name,
                owner: crate::lease::owner_for(node),
                settings: o.settings,
            };
            crate::task::spawn(work(target, calls_rx, this.answers_tx.clone()));
            this.calls = Some(calls_tx);
        }
        Ok(this)
    }

    /// The answers to feed to the core
    /// ([`Membership::handle`](shardik_core::membership::Membership::handle)); taken once by
    /// the driver.
    pub fn take_answers(&mut self) -> Option<mpsc::Receiver<Input>> {
        self.answers_rx.take()
    }

    /// The lease's name in the store, if this node has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Reports a decision of the resolver ([`Effect::Sbr`]); its lease requests never reach
    /// the driver (the core's holder turns them into [`call`](Self::call)s).
    ///
    /// [`Effect::Sbr`]: shardik_core::membership::Effect::Sbr
    pub fn report(&self, action: &SbrAction) {
        if let SbrAction::Down { decision, nodes } = action {
            metrics::counter!(SBR_DECISIONS_TOTAL, "decision" => decision.as_str()).increment(1);
            let list: Vec<String> = nodes.iter().map(|n| n.address.to_string()).collect();
            warn!(
                event = "split-brain-resolver",
                decision = decision.as_str(),
                nodes = %list.join(", "),
                "split-brain resolver: {}, downing {}",
                decision.as_str(),
                list.join(", ")
            );
        }
    }

    /// The core's holder lost the lease ([`Effect::SbrLeaseLost`]): logged and counted.
    ///
    /// [`Effect::SbrLeaseLost`]: shardik_core::membership::Effect::SbrLeaseLost
    pub fn lost(&self, reason: LeaseLoss) {
        metrics::counter!(LEASE_LOSSES_TOTAL, "reason" => reason.as_str()).increment(1);
        warn!(
            lease = self.name.as_deref().unwrap_or(""),
            reason = reason.as_str(),
            "split-brain resolver: lease lost; this node no longer counts on it"
        );
    }

    /// Queues one store call of the core's holder ([`Effect::SbrLease`]); never blocks.
    ///
    /// [`Effect::SbrLease`]: shardik_core::membership::Effect::SbrLease
    pub fn call(&self, request: LeaseRequest<()>) {
        let Some(calls) = &self.calls else {
            if request.call == LeaseCall::Acquire {
                error!(
                    "split-brain resolver: lease-majority has no lease to acquire (set \
                     cluster.split-brain-resolver.lease-majority.lease-implementation = \
                     \"store\"); this side downs itself"
                );
                self.fail(request, "no lease is configured".into());
            }
            return;
        };
        if let Err(e) = calls.try_send(request) {
            // Only if the worker is gone or hopelessly behind: either way no answer from it.
            error!("split-brain resolver: its lease calls cannot be queued");
            self.fail(e.into_inner(), "the lease calls cannot be queued".into());
        }
    }

    /// Answers an acquisition or renewal that was never made with a failure.
    fn fail(&self, request: LeaseRequest<()>, why: String) {
        if let LeaseCall::Release { .. } = request.call {
            return;
        }
        if request.call == LeaseCall::Acquire {
            metrics::counter!(SBR_LEASE_REQUESTS_TOTAL, "result" => "failed").increment(1);
        }
        let answer = Input::SbrLeaseAnswered {
            id: request.id,
            answer: LeaseAnswer::Failed(why),
        };
        if self.answers_tx.try_send(answer).is_err() {
            // The core counts an unanswered call as failed once its timeout passes.
            warn!(
                "split-brain resolver: a lease failure could not be queued; the call times out instead"
            );
        }
    }
}

/// The worker: one store call at a time, each answered to the core (releases are not).
async fn work(
    target: Target,
    mut calls: mpsc::Receiver<LeaseRequest<()>>,
    answers: mpsc::Sender<Input>,
) {
    while let Some(request) = calls.recv().await {
        let answer = match request.call {
            LeaseCall::Acquire => acquire(&target).await,
            LeaseCall::Renew { token } => renew(&target, token).await,
            LeaseCall::Release { token } => {
                release(&target, token).await;
                continue;
            }
        };
        let input = Input::SbrLeaseAnswered {
            id: request.id,
            answer,
        };
        if answers.send(input).await.is_err() {
            return; // The driver stopped.
        }
    }
}

/// One acquisition, logged and counted by result.
async fn acquire(t: &Target) -> LeaseAnswer {
    let (answer, result) = match t.calls().acquire(t.settings.heartbeat_timeout).await {
        Ok(LeaseAcquired::Granted(grant)) => {
            info!(lease = %t.name, token = grant.token, "split-brain resolver: lease acquired");
            (LeaseAnswer::Granted { token: grant.token }, "granted")
        }
        Ok(LeaseAcquired::HeldByOther { owner, time_left }) => {
            warn!(lease = %t.name, holder = %owner, ?time_left, "split-brain resolver: the lease is held by another node; this side downs itself");
            (LeaseAnswer::HeldByOther, "refused")
        }
        Err(failure) => {
            match &failure {
                CallFailure::Store(e) => {
                    warn!(lease = %t.name, error = %e, "split-brain resolver: the lease could not be acquired; this side downs itself")
                }
                CallFailure::Timeout(limit) => {
                    warn!(lease = %t.name, timeout = ?limit, "split-brain resolver: the store did not answer the lease acquisition in time; this side downs itself")
                }
            }
            let why = failure.describe("acquiring", &t.name);
            (LeaseAnswer::Failed(why), "failed")
        }
    };
    metrics::counter!(SBR_LEASE_REQUESTS_TOTAL, "result" => result).increment(1);
    answer
}

/// One renewal; a failed one is counted (by [`LeaseCalls::renew`]) and logged (the core keeps
/// the lease until its deadline and tries again sooner).
async fn renew(t: &Target, token: u64) -> LeaseAnswer {
    match t.calls().renew(token, t.settings.heartbeat_timeout).await {
        Ok(true) => LeaseAnswer::Renewed,
        Ok(false) => LeaseAnswer::Refused,
        Err(failure) => {
            let why = failure.describe("renewing", &t.name);
            warn!(lease = %t.name, error = %why, "split-brain resolver: lease renewal failed; retrying");
            LeaseAnswer::Failed(why)
        }
    }
}

/// One release; a failure is only logged (the lease expires by itself).
async fn release(t: &Target, token: u64) {
    match t.calls().release(token).await {
        Ok(released) => {
            info!(lease = %t.name, token, released, "split-brain resolver: lease given back")
        }
        Err(CallFailure::Store(e)) => {
            warn!(lease = %t.name, error = %e, "split-brain resolver: giving the lease back failed; it expires by itself")
        }
        Err(CallFailure::Timeout(limit)) => {
            warn!(lease = %t.name, timeout = ?limit, "split-brain resolver: giving the lease back was not answered in time; it expires by itself")
        }
    }
}
