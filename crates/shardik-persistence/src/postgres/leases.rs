//! Leases in PostgreSQL: each call is one statement, so one atomic step under the row's lock,
//! with expiry judged by the server's clock (`clock_timestamp()`, the time the statement reads
//! it, not the transaction's start), whatever the nodes' clocks say.

use std::time::Duration;

use super::PostgresStore;
use crate::error::StoreError;
use crate::lease::{
    LeaseAcquired, LeaseGrant, LeaseInfo, check_names, time_left, token_sql, ttl_micros,
};
use crate::util::from_sql;

/// How many times an acquire tries again when the lease looked held, but free by the time it
/// was read (released or expired between the two statements).
const ACQUIRE_ATTEMPTS: usize = 5;

/// The microseconds a row's lease has left, by the server's clock (0 when none).
const TIME_LEFT: &str =
    "GREATEST(0, floor(extract(epoch FROM (expires_at - clock_timestamp())) * 1000000))::bigint";

impl PostgresStore {
    pub(super) async fn acquire_lease_impl(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseAcquired, StoreError> {
        check_names(name, owner)?;
        let ttl_us = ttl_micros(name, ttl)?;
        for _ in 0..ACQUIRE_ATTEMPTS {
            // Free, expired or ours: take it. Still ours keeps the token (the same tenure);
            // otherwise the token goes up (a new one). Held by another: no row comes back.
            let rows = self
                .query(
                    "INSERT INTO shardik_leases AS l (name, owner, token, expires_at)
                     VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 microsecond')
                     ON CONFLICT (name) DO UPDATE SET
                         token = CASE WHEN l.owner = excluded.owner
                                           AND l.expires_at > clock_timestamp()
                                      THEN l.token ELSE l.token + 1 END,
                         owner = excluded.owner,
                         expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
                     WHERE l.owner IS NULL OR l.owner = excluded.owner
                           OR l.expires_at <= clock_timestamp()
                     RETURNING token",
                    &[&name, &owner, &ttl_us],
                    "taking a lease",
                )
                .await?;
            if let Some(row) = rows.first() {
                let token: i64 = row
                    .try_get(0)
                    .map_err(|e| self.err.decode("a lease token", e))?;
                return Ok(LeaseAcquired::Granted(LeaseGrant {
                    token: from_sql(token, "lease token")?,
                    expires_in: ttl,
                }));
            }
            if let Some(info) = self.read_lease_impl(name).await?
                && let Some(holder) = info.holder().filter(|h| *h != owner)
            {
                return Ok(LeaseAcquired::HeldByOther {
                    owner: holder.to_string(),
                    time_left: info.time_left,
                });
            }
        }
        Err(StoreError::Failed(format!(
            "PostgreSQL at {}: lease {name:?} changed hands {ACQUIRE_ATTEMPTS} times while it was being taken",
            self.err.server
        )))
    }

    pub(super) async fn renew_lease_impl(
        &self,
        name: &str,
        owner: &str,
        token: u64,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        check_names(name, owner)?;
        let ttl_us = ttl_micros(name, ttl)?;
        let token = token_sql(name, token)?;
        let changed = self
            .execute(
                "UPDATE shardik_leases
                 SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
                 WHERE name = $1 AND owner = $2 AND token = $3
                       AND expires_at > clock_timestamp()",
                &[&name, &owner, &token, &ttl_us],
                "renewing a lease",
            )
            .await?;
        Ok(changed == 1)
    }

    pub(super) async fn release_lease_impl(
        &self,
        name: &str,
        owner: &str,
        token: u64,
    ) -> Result<bool, StoreError> {
        check_names(name, owner)?;
        let token = token_sql(name, token)?;
        let changed = self
            .execute(
                "UPDATE shardik_leases
                 SET owner = NULL, expires_at = LEAST(expires_at, clock_timestamp())
                 WHERE name = $1 AND owner = $2 AND token = $3",
                &[&name, &owner, &token],
                "releasing a lease",
            )
            .await?;
        Ok(changed == 1)
    }

    pub(super) async fn read_lease_impl(
        &self,
        name: &str,
    ) -> Result<Option<LeaseInfo>, StoreError> {
        let rows = self
            .query(
                &format!("SELECT owner, token, {TIME_LEFT} FROM shardik_leases WHERE name = $1"),
                &[&name],
                "reading a lease",
            )
            .await?;
        rows.first()
            .map(|row| {
                let decode = |e| self.err.decode("a lease", e);
                let owner: Option<String> = row.try_get(0).map_err(decode)?;
                let token: i64 = row.try_get(1).map_err(decode)?;
                let left: i64 = row.try_get(2).map_err(decode)?;
                Ok(LeaseInfo {
                    owner,
                    token: from_sql(token, "lease token")?,
                    time_left: time_left(left),
                })
            })
            .transpose()
    }
}
