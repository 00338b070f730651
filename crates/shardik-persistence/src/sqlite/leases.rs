//! Leases and fences in SQLite.
//!
//! Lease calls run on the writer's connection, inside its batch's `BEGIN IMMEDIATE`
//! transaction: the file's write lock is held from the read of a lease row to its update, so
//! the read-then-write is atomic across every connection and process sharing the file. Expiry
//! is judged by this machine's wall clock (all processes sharing a file are on one machine),
//! in microseconds since the Unix epoch.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use super::error::Ctx;
use crate::error::{StoreError, WriteResult};
use crate::fence::Fence;
use crate::lease::{
    LeaseAcquired, LeaseGrant, LeaseInfo, check_names, time_left, token_sql, ttl_micros,
};
use crate::util::from_sql;

/// The machine's wall clock in microseconds since the Unix epoch.
pub(super) fn now_micros() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

type Row = (Option<String>, i64, i64);

fn read_row(conn: &Connection, path: &Path, name: &str) -> Result<Option<Row>, StoreError> {
    conn.prepare_cached("SELECT owner, token, expires_at FROM shardik_leases WHERE name = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([name], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                .optional()
        })
        .ctx(path, "reading a lease")
}

pub(super) fn acquire(
    conn: &Connection,
    path: &Path,
    name: &str,
    owner: &str,
    ttl: Duration,
) -> Result<LeaseAcquired, StoreError> {
    check_names(name, owner)?;
    let ttl_us = ttl_micros(name, ttl)?;
    let now = now_micros();
    let expires_at = now.saturating_add(ttl_us);
    let token = match read_row(conn, path, name)? {
        Some((Some(holder), _, expiry)) if expiry > now && holder != owner => {
            return Ok(LeaseAcquired::HeldByOther {
                owner: holder,
                time_left: time_left(expiry - now),
            });
        }
        Some((holder, token, expiry)) => {
            // Still ours: the same tenure. Free or expired: a new one, with a new token.
            let ours = expiry > now && holder.as_deref() == Some(owner);
            let token = if ours { token } else { token + 1 };
            conn.prepare_cached(
                "UPDATE shardik_leases SET owner = ?2, token = ?3, expires_at = ?4
                 WHERE name = ?1",
            )
            .and_then(|mut stmt| stmt.execute(params![name, owner, token, expires_at]))
            .ctx(path, "taking a lease")?;
            token
        }
        None => {
            conn.prepare_cached(
                "INSERT INTO shardik_leases (name, owner, token, expires_at)
                 VALUES (?1, ?2, 1, ?3)",
            )
            .and_then(|mut stmt| stmt.execute(params![name, owner, expires_at]))
            .ctx(path, "taking a new lease")?;
            1
        }
    };
    Ok(LeaseAcquired::Granted(LeaseGrant {
        token: from_sql(token, "lease token")?,
        expires_in: ttl,
    }))
}

pub(super) fn renew(
    conn: &Connection,
    path: &Path,
    name: &str,
    owner: &str,
    token: u64,
    ttl: Duration,
) -> Result<bool, StoreError> {
    check_names(name, owner)?;
    let ttl_us = ttl_micros(name, ttl)?;
    let token = token_sql(name, token)?;
    let now = now_micros();
    let changed = conn
        .prepare_cached(
            "UPDATE shardik_leases SET expires_at = ?5
             WHERE name = ?1 AND owner = ?2 AND token = ?3 AND expires_at > ?4",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![name, owner, token, now, now.saturating_add(ttl_us)])
        })
        .ctx(path, "renewing a lease")?;
    Ok(changed == 1)
}

pub(super) fn release(
    conn: &Connection,
    path: &Path,
    name: &str,
    owner: &str,
    token: u64,
) -> Result<bool, StoreError> {
    check_names(name, owner)?;
    let token = token_sql(name, token)?;
    let changed = conn
        .prepare_cached(
            "UPDATE shardik_leases SET owner = NULL, expires_at = min(expires_at, ?4)
             WHERE name = ?1 AND owner = ?2 AND token = ?3",
        )
        .and_then(|mut stmt| stmt.execute(params![name, owner, token, now_micros()]))
        .ctx(path, "releasing a lease")?;
    Ok(changed == 1)
}

pub(super) fn read(
    conn: &Connection,
    path: &Path,
    name: &str,
) -> Result<Option<LeaseInfo>, StoreError> {
    let now = now_micros();
    read_row(conn, path, name)?
        .map(|(owner, token, expiry)| {
            Ok(LeaseInfo {
                owner,
                token: from_sql(token, "lease token")?,
                time_left: time_left(expiry.saturating_sub(now)),
            })
        })
        .transpose()
}

/// The newest tokens of the fence scopes one call writes under: each scope is read once per
/// call, however many of the call's writes carry it.
#[derive(Default)]
pub(super) struct FenceBars {
    newest: HashMap<Arc<str>, Option<u64>>,
}

impl FenceBars {
    /// Judges `fence` against its scope's newest token.
    pub(super) fn judge(
        &mut self,
        conn: &Connection,
        path: &Path,
        pid: &str,
        fence: &Fence,
    ) -> Result<WriteResult, StoreError> {
        let newest = match self.newest.get(&fence.scope) {
            Some(newest) => *newest,
            None => {
                let stored: Option<i64> = conn
                    .prepare_cached("SELECT token FROM shardik_fences WHERE scope = ?1")
                    .and_then(|mut stmt| {
                        stmt.query_row([&*fence.scope], |row| row.get(0)).optional()
                    })
                    .ctx(path, "reading a fence")?;
                let newest = stored.map(|t| from_sql(t, "fence token")).transpose()?;
                self.newest.insert(Arc::clone(&fence.scope), newest);
                newest
            }
        };
        Ok(fence.judge(pid, newest))
    }

    /// Raises `fence`'s scope to its token, for a write that was accepted (and judged first).
    /// Call it inside the write's savepoint, so that undoing the write undoes this too; the
    /// cache follows only once the statement succeeded.
    pub(super) fn raise(
        &mut self,
        conn: &Connection,
        path: &Path,
        fence: &Fence,
    ) -> Result<(), StoreError> {
        let newest = self.newest.get(&fence.scope).copied().flatten();
        if newest.is_some_and(|n| n >= fence.token) {
            return Ok(());
        }
        // In range: checked with the write's shape.
        let token = fence.token as i64;
        conn.prepare_cached(
            "INSERT INTO shardik_fences (scope, token) VALUES (?1, ?2)
             ON CONFLICT (scope) DO UPDATE SET token = max(token, excluded.token)",
        )
        .and_then(|mut stmt| stmt.execute(params![&*fence.scope, token]))
        .ctx(path, "raising a fence")?;
        self.newest
            .insert(Arc::clone(&fence.scope), Some(fence.token));
        Ok(())
    }
}
