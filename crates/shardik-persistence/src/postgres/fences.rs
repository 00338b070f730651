//! Fences in PostgreSQL: the newest token accepted per scope, one row each, read and raised
//! inside the transaction of the writes they fence.
//!
//! A transaction locks its scopes' rows before it writes anything else, in sorted order, so
//! concurrent writers under one scope take turns (the second reads what the first committed)
//! and two transactions never wait for each other's fence rows in a cycle. One statement
//! locks (and creates, at token 0, meaning "no token yet") every scope of a batch, and at
//! most one more raises them: per batch, not per write or event.

use std::collections::HashMap;

use deadpool_postgres::Transaction;

use super::error::PgErr;
use crate::error::StoreError;
use crate::util::from_sql;

/// Locks the fence rows of `scopes` (sorted, distinct) until the transaction ends and returns
/// their newest tokens.
pub(super) async fn lock<'s>(
    tx: &Transaction<'_>,
    err: &PgErr,
    scopes: &[&'s str],
) -> Result<HashMap<&'s str, u64>, StoreError> {
    // A no-op update locks an existing row and returns it as it is; a missing one is created.
    let stmt = tx
        .prepare_cached(
            "INSERT INTO shardik_fences AS f (scope, token)
             SELECT scope, 0 FROM unnest($1::text[]) AS scope
             ON CONFLICT (scope) DO UPDATE SET token = f.token
             RETURNING scope, token",
        )
        .await
        .map_err(|e| err.query("preparing to lock fences", e))?;
    let rows = tx
        .query(&stmt, &[&scopes])
        .await
        .map_err(|e| err.query("locking fences", e))?;
    let mut newest = HashMap::with_capacity(rows.len());
    for row in rows {
        let decode = |e| err.decode("a fence", e);
        let scope: &str = row.try_get(0).map_err(decode)?;
        let token: i64 = row.try_get(1).map_err(decode)?;
        // Keyed by the caller's strings, to keep their lifetime (found in the sorted list).
        if let Ok(i) = scopes.binary_search(&scope) {
            newest.insert(scopes[i], from_sql(token, "fence token")?);
        }
    }
    Ok(newest)
}

/// Sets the newest tokens of scopes this transaction locked with [`lock`].
pub(super) async fn raise(
    tx: &Transaction<'_>,
    err: &PgErr,
    raised: &[(&str, u64)],
) -> Result<(), StoreError> {
    if raised.is_empty() {
        return Ok(());
    }
    let scopes: Vec<&str> = raised.iter().map(|r| r.0).collect();
    // In range: checked with the writes' shape.
    let tokens: Vec<i64> = raised.iter().map(|r| r.1 as i64).collect();
    let stmt = tx
        .prepare_cached(
            "UPDATE shardik_fences AS f SET token = v.token
             FROM unnest($1::text[], $2::bigint[]) AS v(scope, token)
             WHERE f.scope = v.scope AND f.token < v.token",
        )
        .await
        .map_err(|e| err.query("preparing to raise fences", e))?;
    tx.execute(&stmt, &[&scopes, &tokens])
        .await
        .map_err(|e| err.query("raising fences", e))?;
    Ok(())
}
