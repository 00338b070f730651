//! Fences: the lease token a write carries, so that the store can refuse a write from a holder
//! that lost its lease without noticing yet.
//!
//! A fence names a scope (what the lease protects, say `"{kind}|{shard}"`) and a token. In the
//! same transaction as the write, the store keeps the newest token it has accepted per scope:
//! a write with an older token is refused as a whole ([`WriteRefused::Fenced`]); an equal or
//! newer one is accepted and, if newer, raises the bar. A refused write changes nothing, its
//! fence included. Writes without a fence are not checked.

use std::sync::Arc;

use crate::error::{WriteRefused, WriteResult};
use crate::records::PersistenceId;

/// The lease token a write carries, and the scope it fences.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    /// What the token protects (all writes under one lease share it), e.g. `"{kind}|{shard}"`.
    pub scope: Arc<str>,
    /// The writer's lease token (its [`LeaseGrant::token`](crate::LeaseGrant::token)).
    pub token: u64,
}

impl Fence {
    /// A fence on `scope` with `token`.
    pub fn new(scope: impl Into<Arc<str>>, token: u64) -> Self {
        Fence {
            scope: scope.into(),
            token,
        }
    }

    /// Judges this fence against `newest`, the newest token accepted in its scope (`None`:
    /// none yet): refused when older.
    pub(crate) fn judge(&self, persistence_id: &str, newest: Option<u64>) -> WriteResult {
        match newest {
            Some(newest) if self.token < newest => Err(WriteRefused::Fenced {
                persistence_id: PersistenceId::from(persistence_id),
                scope: Arc::clone(&self.scope),
                token: self.token,
                newest,
            }),
            _ => Ok(()),
        }
    }

    /// Refuses an empty scope, and a token SQL cannot store (no lease grants such a token).
    pub(crate) fn check_shape(&self, persistence_id: &str) -> WriteResult {
        if self.scope.is_empty() {
            return Err(WriteRefused::Malformed {
                persistence_id: PersistenceId::from(persistence_id),
                why: "the fence's scope is empty".to_string(),
            });
        }
        if i64::try_from(self.token).is_err() {
            return Err(WriteRefused::Malformed {
                persistence_id: PersistenceId::from(persistence_id),
                why: format!(
                    "fence token {} on {:?} is above 2^63-1; no lease grants such a token",
                    self.token, self.scope
                ),
            });
        }
        Ok(())
    }
}
