//! The PostgreSQL schema and its migrations.
//!
//! The version is the one row of `shardik_schema`. Every node migrates at start, in one
//! transaction holding a transaction-scoped advisory lock, so nodes starting together migrate
//! once: the others wait for the lock, then find the new version. A version newer than this
//! build's is refused and the transaction rolled back, leaving the database as it was.
//!
//! Text columns use the "C" collation so that sorting compares bytes, as Rust sorts strings,
//! whatever the database's locale.

use deadpool_postgres::Client;

use super::error::PgErr;
use crate::error::StoreError;

/// Migration `i` brings the schema from version `i` to `i + 1`.
///
/// Version 1, journals and the rest: `ordinal` is a bigserial: numbers are taken when rows are
/// inserted, not when they commit, so with concurrent writers a smaller ordinal can become
/// visible after a larger one (see [`super::PostgresStore`]).
///
/// Version 2, leases and fences: a lease row is never deleted (a release clears its owner), so
/// its token keeps growing across tenures; `expires_at` is judged by the server's clock. A
/// fence row holds the newest token accepted for its scope.
///
/// Version 3, event manifests: each event keeps what its writer says it is (format and
/// version), so that a later version of the program can read, or adapt, an event written by an
/// earlier one. Events from before have none (`NULL`, read as empty).
///
/// Version 4, the store's identity: one row, drawn at random by the server
/// (`gen_random_uuid`, PostgreSQL 13 and later) in the migration's transaction, so it is
/// written once per database whatever number of nodes start together.
///
/// Version 5, reliable delivery's data: each entity's delivery marks (one row per persistence
/// id and producer, written in the transaction of the entity's own write), the last epoch
/// handed out per durable producer, and the durable producer queues, whose primary key lists
/// a producer's messages in stream order and whose index by kind finds the rows that removing
/// a kind deletes.
const MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE shardik_events (
        ordinal BIGSERIAL PRIMARY KEY,
        pid TEXT COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL,
        payload BYTEA,
        UNIQUE (pid, seq)
    );
    CREATE TABLE shardik_event_tags (
        ordinal BIGINT NOT NULL,
        pos INTEGER NOT NULL,
        tag TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (ordinal, pos)
    );
    CREATE INDEX shardik_event_tags_by_tag ON shardik_event_tags (tag, ordinal);
    CREATE TABLE shardik_snapshots (
        pid TEXT COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL,
        payload BYTEA NOT NULL,
        PRIMARY KEY (pid, seq)
    );
    CREATE TABLE shardik_states (
        pid TEXT COLLATE "C" PRIMARY KEY,
        revision BIGINT NOT NULL,
        payload BYTEA NOT NULL
    );
    CREATE TABLE shardik_remembered (
        kind TEXT COLLATE "C" NOT NULL,
        shard TEXT COLLATE "C" NOT NULL,
        entity TEXT COLLATE "C" NOT NULL,
        PRIMARY KEY (kind, shard, entity)
    );
"#,
    r#"
    CREATE TABLE shardik_leases (
        name TEXT COLLATE "C" PRIMARY KEY,
        owner TEXT COLLATE "C",
        token BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE shardik_fences (
        scope TEXT COLLATE "C" PRIMARY KEY,
        token BIGINT NOT NULL
    );
"#,
    r#"
    ALTER TABLE shardik_events ADD COLUMN manifest TEXT COLLATE "C";
"#,
    r#"
    CREATE TABLE shardik_store (id TEXT COLLATE "C" NOT NULL);
    INSERT INTO shardik_store (id) VALUES (replace(gen_random_uuid()::text, '-', ''));
"#,
    r#"
    CREATE TABLE shardik_delivery_marks (
        pid TEXT COLLATE "C" NOT NULL,
        producer TEXT COLLATE "C" NOT NULL,
        epoch BIGINT NOT NULL,
        stream BIGINT NOT NULL,
        seq BIGINT NOT NULL,
        written_at_ms BIGINT NOT NULL,
        PRIMARY KEY (pid, producer)
    );
    CREATE TABLE shardik_producer_epochs (
        producer TEXT COLLATE "C" PRIMARY KEY,
        epoch BIGINT NOT NULL
    );
    CREATE TABLE shardik_producer_queue (
        producer TEXT COLLATE "C" NOT NULL,
        epoch BIGINT NOT NULL,
        stream BIGINT NOT NULL,
        seq BIGINT NOT NULL,
        kind TEXT COLLATE "C" NOT NULL,
        entity TEXT COLLATE "C" NOT NULL,
        payload BYTEA NOT NULL,
        PRIMARY KEY (producer, epoch, stream, seq)
    );
    CREATE INDEX shardik_producer_queue_by_kind ON shardik_producer_queue (kind);
"#,
];

/// The schema version this build writes and reads.
pub(crate) const CURRENT: u32 = MIGRATIONS.len() as u32;

/// The advisory lock key that serializes migrations: an arbitrary constant ("shardik" in
/// ASCII), the same in every shardik build.
const MIGRATION_LOCK: i64 = 0x73_68_61_72_64_69_6b;

/// Creates or migrates the schema.
pub(super) async fn migrate(client: &mut Client, err: &PgErr) -> Result<(), StoreError> {
    let tx = client
        .transaction()
        .await
        .map_err(|e| err.query("starting the schema transaction", e))?;
    let outcome = async {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(|e| err.query("locking the schema", e))?;
        let exists: bool = tx
            .query_one("SELECT to_regclass('shardik_schema') IS NOT NULL", &[])
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| err.query("looking for the schema table", e))?;
        let found = if exists {
            let version: Option<i32> = tx
                .query_one("SELECT max(version) FROM shardik_schema", &[])
                .await
                .and_then(|row| row.try_get(0))
                .map_err(|e| err.query("reading the schema version", e))?;
            let version = version.unwrap_or(0);
            u32::try_from(version).map_err(|_| {
                StoreError::Corrupt(format!(
                    "shardik_schema holds version {version}, which no shardik wrote"
                ))
            })?
        } else {
            0
        };
        if found > CURRENT {
            return Err(StoreError::SchemaTooNew {
                found,
                supported: CURRENT,
            });
        }
        if found == CURRENT {
            return Ok(false);
        }
        if !exists {
            tx.batch_execute(
                "CREATE TABLE shardik_schema (version INTEGER NOT NULL);
                 INSERT INTO shardik_schema (version) VALUES (0);",
            )
            .await
            .map_err(|e| err.query("creating the schema table", e))?;
        }
        for (from, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.batch_execute(migration).await.map_err(|e| {
                err.query(&format!("migrating the schema to version {}", from + 1), e)
            })?;
        }
        let current = CURRENT as i32;
        tx.execute("UPDATE shardik_schema SET version = $1", &[&current])
            .await
            .map_err(|e| err.query("recording the schema version", e))?;
        Ok(true)
    }
    .await;
    match outcome {
        Ok(true) => tx
            .commit()
            .await
            .map_err(|e| err.query("committing the schema", e)),
        Ok(false) => tx
            .rollback()
            .await
            .map_err(|e| err.query("ending the schema transaction", e)),
        Err(refused) => {
            // Nothing was written; the rollback only ends the transaction early (dropping it
            // would too).
            let _ = tx.rollback().await;
            Err(refused)
        }
    }
}

/// The store's identity (schema version 4), once the schema is current.
pub(super) async fn read_identity(client: &Client, err: &PgErr) -> Result<String, StoreError> {
    let rows = client
        .query("SELECT id FROM shardik_store", &[])
        .await
        .map_err(|e| err.query("reading the store's identity", e))?;
    let ids: Vec<String> = rows
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()
        .map_err(|e| err.decode("the store's identity", e))?;
    match ids.as_slice() {
        [id] if !id.is_empty() => Ok(id.clone()),
        _ => Err(StoreError::Corrupt(format!(
            "shardik_store on {} holds {} identities, where shardik writes exactly one",
            err.server,
            ids.len()
        ))),
    }
}
