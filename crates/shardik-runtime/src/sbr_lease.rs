//! The split-brain resolver's side effects on a running node: its lease-majority lease
//! calls, carried out with a [`Lease`] on the node's store, and the logs and metrics of its
//! decisions.
//!
//! The membership core decides; this module only does what it asks
//! ([`Effect::Sbr`](shardik_core::membership::Effect::Sbr)) and reports back:
//! - [`SbrAction::AcquireLease`] is `Lease::acquire` (answered at once, without a store call,
//!   while this node's handle still holds the lease; otherwise one store call bounded by
//!   `coordination.lease.lease-operation-timeout`), answered to the core as
//!   [`Input::SbrLeaseAnswer`]. A refusal, an error and a timeout are all "not granted": the
//!   core then downs its own side. While held, the lease is renewed in the background.
//! - [`SbrAction::ReleaseLease`] is `Lease::release`.
//! - [`SbrAction::Down`] is a decision the core has carried out: it is logged and counted.
//!
//! Calls run one at a time, in order, on a task of their own, so the driver never waits for
//! the store and a release is never overtaken by a later acquire.
//!
//! When the node stops, the lease is *not* released: the renewals stop and it expires after
//! `heartbeat-timeout`. Releasing early could hand it to a side this node's cluster has just
//! downed, which would then survive too.

use std::sync::Arc;

use shardik_core::membership::Input;
use shardik_core::membership::UniqueAddress;
use shardik_core::membership::sbr::SbrAction;
use shardik_persistence::Store;
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::config::{LeaseSettings, Settings};
use crate::lease::{Lease, LeaseError};
use crate::metrics::{SBR_DECISIONS_TOTAL, SBR_LEASE_REQUESTS_TOTAL};

/// How many lease calls may wait for the worker. The resolver has at most one decision
/// waiting for the lease and one release outstanding, so this is never reached in practice;
/// it bounds the queue all the same.
const QUEUE: usize = 16;

/// What a node needs to keep the lease-majority lease.
#[derive(Clone)]
pub struct SbrLeaseOptions {
    /// The store that keeps the lease: the node's store (`persistence.store`), which every
    /// node of the cluster must share.
    pub store: Arc<dyn Store>,
    /// The lease's name, the same on every node (`lease-majority.lease-name`).
    pub name: String,
    /// Its time-to-live, renewal interval and call timeout (`coordination.lease.*`).
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

enum Call {
    Acquire { attempt: u64 },
    Release,
}

/// Carries out the resolver's effects for one node: owned by the node's driver.
pub struct SbrLease {
    /// To the worker that makes the lease calls; `None` without a lease.
    calls: Option<mpsc::Sender<Call>>,
    /// Answers for the driver to feed to the core (also used for the refusals made here).
    answers_tx: mpsc::Sender<Input>,
    answers_rx: Option<mpsc::Receiver<Input>>,
    lease: Option<Lease>,
}

impl std::fmt::Debug for SbrLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SbrLease")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl SbrLease {
    /// The effects' executor for `node`, with the lease of `options` if given (taken for
    /// [`Lease::owner_for`] the node). Without options, every lease request is refused with
    /// an error in the log: a resolver configured for lease-majority without a lease can
    /// only down its own side. Must be called inside a tokio runtime.
    ///
    /// Errors: lease settings that cannot keep a lease.
    pub fn start(
        options: Option<SbrLeaseOptions>,
        node: &UniqueAddress,
    ) -> Result<Self, LeaseError> {
        let (answers_tx, answers_rx) = mpsc::channel(QUEUE);
        let mut this = SbrLease {
            calls: None,
            answers_tx,
            answers_rx: Some(answers_rx),
            lease: None,
        };
        if let Some(o) = options {
            let lease = Lease::new(o.store, o.name, Lease::owner_for(node), o.settings)?;
            let (calls_tx, calls_rx) = mpsc::channel(QUEUE);
            tokio::spawn(work(lease.clone(), calls_rx, this.answers_tx.clone()));
            this.calls = Some(calls_tx);
            this.lease = Some(lease);
        }
        Ok(this)
    }

    /// The answers to feed to the core
    /// ([`Membership::handle`](shardik_core::membership::Membership::handle)); taken once by
    /// the driver.
    pub fn take_answers(&mut self) -> Option<mpsc::Receiver<Input>> {
        self.answers_rx.take()
    }

    /// The lease handle, if this node has one (for inspection: status, token).
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// Carries out one effect of the resolver (never blocks).
    pub fn carry_out(&mut self, action: SbrAction) {
        match action {
            SbrAction::Down { decision, nodes } => {
                metrics::counter!(SBR_DECISIONS_TOTAL, "decision" => decision.as_str())
                    .increment(1);
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
            SbrAction::AcquireLease { attempt } => self.call(Call::Acquire { attempt }),
            SbrAction::ReleaseLease => self.call(Call::Release),
        }
    }

    fn call(&mut self, call: Call) {
        let attempt = match &call {
            Call::Acquire { attempt } => Some(*attempt),
            Call::Release => None,
        };
        let Some(calls) = &self.calls else {
            if let Some(attempt) = attempt {
                error!(
                    "split-brain resolver: lease-majority has no lease to acquire (set \
                     cluster.split-brain-resolver.lease-majority.lease-implementation = \
                     \"store\"); this side downs itself"
                );
                self.refuse(attempt);
            }
            return;
        };
        if calls.try_send(call).is_err() {
            // Only if the worker is gone or hopelessly behind: either way no lease now.
            error!("split-brain resolver: its lease calls cannot be queued");
            if let Some(attempt) = attempt {
                self.refuse(attempt);
            }
        }
    }

    fn refuse(&self, attempt: u64) {
        metrics::counter!(SBR_LEASE_REQUESTS_TOTAL, "result" => "failed").increment(1);
        let answer = Input::SbrLeaseAnswer {
            attempt,
            granted: false,
        };
        if self.answers_tx.try_send(answer).is_err() {
            // The core counts an unanswered request as refused once its timeout passes.
            warn!(
                "split-brain resolver: a lease refusal could not be queued; the request times out instead"
            );
        }
    }
}

/// The worker: one lease call at a time, each answered to the core.
async fn work(lease: Lease, mut calls: mpsc::Receiver<Call>, answers: mpsc::Sender<Input>) {
    while let Some(call) = calls.recv().await {
        match call {
            Call::Acquire { attempt } => {
                let granted = acquire(&lease).await;
                let answer = Input::SbrLeaseAnswer { attempt, granted };
                if answers.send(answer).await.is_err() {
                    return; // The driver stopped.
                }
            }
            Call::Release => match lease.release().await {
                Ok(released) => {
                    info!(lease = %lease.name(), released, "split-brain resolver: lease given back")
                }
                Err(e) => {
                    warn!(lease = %lease.name(), error = %e, "split-brain resolver: giving the lease back failed; it expires by itself")
                }
            },
        }
    }
}

/// One acquisition, logged and counted by result.
async fn acquire(lease: &Lease) -> bool {
    let (granted, result) = match lease.acquire().await {
        Ok(true) => {
            info!(lease = %lease.name(), token = ?lease.token(), "split-brain resolver: lease acquired; this side survives");
            (true, "granted")
        }
        Ok(false) => {
            warn!(lease = %lease.name(), "split-brain resolver: the lease is held by another node; this side downs itself");
            (false, "refused")
        }
        Err(e) => {
            warn!(lease = %lease.name(), error = %e, "split-brain resolver: the lease could not be acquired; this side downs itself");
            (false, "failed")
        }
    };
    metrics::counter!(SBR_LEASE_REQUESTS_TOTAL, "result" => result).increment(1);
    granted
}
