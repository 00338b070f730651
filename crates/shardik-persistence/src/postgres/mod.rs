//! The PostgreSQL store: one database shared by the nodes of a cluster, over a connection pool
//! with prepared statements cached per connection.

mod append;
mod delivery;
mod error;
mod fences;
mod leases;
mod limits;
mod schema;
mod tls;
mod url;

#[cfg(test)]
mod session_tests;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deadpool_postgres::{
    Client, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Transaction,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::delivery::{
    DeliveryMark, KindDataRemoved, LeaseStillHeld, MarkChange, QueueConfirmation, QueuedMessage,
    check_marks,
};
use crate::error::{StoreError, WriteRefused, WriteResult};
use crate::fence::Fence;
use crate::lease::{LeaseAcquired, LeaseInfo};
use crate::records::{PersistenceId, Snapshot, StoredEvent, StoredState, TaggedEvent};
use crate::store::{Store, StoreFuture};
use crate::store_url::redact;
use crate::util::{bound, check_mark_numbers, describe, from_sql, limit, to_sql};
use crate::write::AtomicWrite;
use error::{PgErr, server_name};
use limits::{CONNECT_TIMEOUT, CREATE_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT, POOL_SIZE, POOL_WAIT};
use tls::StoreTls;
use url::{SslMode, TlsParams};

/// A [`Store`] in a PostgreSQL database.
///
/// Connections are encrypted with TLS as the URL's `sslmode` says, the server's certificate
/// checked against the CAs of `sslrootcert` (see [`connect`](Self::connect)).
///
/// Queries by tag ([`Store::events_by_tag`]) order events by a `bigserial` ordinal. Its numbers
/// are taken when rows are inserted, not when they commit: with several writers at once a
/// smaller offset can become visible after a larger one was read, so a query resuming after
/// the larger one can miss it. Readers that must see every event should stay a little behind
/// the newest offsets (as Akka's JDBC journal does with its "eventual consistency delay").
pub struct PostgresStore {
    pool: Pool,
    err: PgErr,
    /// Read at open (schema version 4): see [`Store::identity`].
    identity: String,
    /// `postgres://HOST:PORT/DATABASE`, for messages.
    location: String,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.err.server)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database?…`, or
    /// PostgreSQL's `key=value` form) and creates or migrates the schema.
    ///
    /// TLS is set as libpq's parameters of the same names say:
    ///
    /// - `sslmode`: `disable` (never), `prefer` (the default: when the server offers it),
    ///   `require` (always), `verify-ca` (always, and the server's certificate must be signed
    ///   by a CA of `sslrootcert`) or `verify-full` (as `verify-ca`, and the certificate must
    ///   name the host connected to);
    /// - `sslrootcert=PATH`: PEM file of the CAs to trust; needed by `verify-ca` and
    ///   `verify-full`, and under `prefer` and `require` it has the chain checked too, as in
    ///   libpq (there is no default file);
    /// - `sslcert=PATH` and `sslkey=PATH`: a client certificate (with any intermediates) and
    ///   its key, in PEM, for servers that ask for one.
    ///
    /// The files are read again for each new connection, so rotated certificates are used
    /// without a restart.
    ///
    /// Errors: [`StoreError::BadUrl`] when `url` does not parse, a TLS parameter is not one
    /// allowed, or a certificate file cannot be read (the URL in the error has its password
    /// replaced by `***`), [`StoreError::Unavailable`] (naming the server and the cause) when
    /// the server cannot be reached within a few seconds, its certificate is refused, or it
    /// refuses the login, [`StoreError::SchemaTooNew`] when a newer shardik wrote the schema
    /// (nothing is changed).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let bad = |why: String| StoreError::BadUrl {
            url: redact(url),
            why,
        };
        let split = url::split(url).map_err(bad)?;
        let mut config =
            tokio_postgres::Config::from_str(&split.driver).map_err(|e| bad(describe(&e)))?;
        config.ssl_mode(split.tls.mode.driver());
        let tls = StoreTls::new(split.tls).map_err(bad)?;
        Self::open(config, tls).await
    }

    /// As [`connect`](Self::connect), from a parsed configuration: TLS as its `ssl_mode` says
    /// (`prefer` and `require` encrypt without checking the server's certificate; use
    /// [`connect`](Self::connect) with `sslrootcert` to check it).
    pub async fn from_config(config: tokio_postgres::Config) -> Result<Self, StoreError> {
        let mode = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => SslMode::Disable,
            tokio_postgres::config::SslMode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        };
        let tls = StoreTls::new(TlsParams::new(mode))
            .map_err(|e| StoreError::Failed(format!("cannot set up TLS: {e}")))?;
        Self::open(config, tls).await
    }

    async fn open(mut config: tokio_postgres::Config, tls: StoreTls) -> Result<Self, StoreError> {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        // Appended to what the URL's `options` say, so that a user's own value (given later
        // on the same command line) wins.
        let ours = format!(
            "-c idle_in_transaction_session_timeout={}",
            IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
        );
        let options = match config.get_options() {
            Some(theirs) if !theirs.is_empty() => format!("{ours} {theirs}"),
            _ => ours,
        };
        config.options(options);
        let err = PgErr {
            server: Arc::from(server_name(&config)),
        };
        let location = format!(
            "postgres://{}/{}",
            err.server,
            config.get_dbname().unwrap_or("")
        );
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                // Checking a connection before each use costs a round trip; a broken one shows
                // up as a failed call instead, and the pool drops it.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(CREATE_TIMEOUT))
            .build()
            .map_err(|e| StoreError::Failed(format!("cannot build the connection pool: {e}")))?;
        let mut client = pool.get().await.map_err(|e| err.pool(e))?;
        schema::migrate(&mut client, &err).await?;
        let identity = schema::read_identity(&client, &err).await?;
        drop(client);
        Ok(PostgresStore {
            pool,
            err,
            identity,
            location,
        })
    }

    /// Reads a `(number, payload)` row: a snapshot's sequence number or a state's revision.
    fn numbered_payload(
        &self,
        row: &Row,
        what: &str,
        number: &str,
    ) -> Result<(u64, Bytes), StoreError> {
        let decode = |e| self.err.decode(what, e);
        let n: i64 = row.try_get(0).map_err(decode)?;
        let payload: Vec<u8> = row.try_get(1).map_err(decode)?;
        Ok((from_sql(n, number)?, Bytes::from(payload)))
    }

    async fn client(&self) -> Result<Client, StoreError> {
        self.pool.get().await.map_err(|e| self.err.pool(e))
    }

    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        doing: &str,
    ) -> Result<Vec<Row>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.err.query(doing, e))?;
        client
            .query(&stmt, params)
            .await
            .map_err(|e| self.err.query(doing, e))
    }

    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        doing: &str,
    ) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(sql)
            .await
            .map_err(|e| self.err.query(doing, e))?;
        client
            .execute(&stmt, params)
            .await
            .map_err(|e| self.err.query(doing, e))
    }

    async fn strings(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        doing: &str,
    ) -> Result<Vec<String>, StoreError> {
        self.query(sql, params, doing)
            .await?
            .iter()
            .map(|row| row.try_get(0).map_err(|e| self.err.decode(doing, e)))
            .collect()
    }
}

impl Store for PostgresStore {
    fn identity(&self) -> &str {
        &self.identity
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn append(&self, writes: Vec<AtomicWrite>) -> StoreFuture<'_, Vec<WriteResult>> {
        Box::pin(async move {
            if writes.is_empty() {
                return Ok(Vec::new());
            }
            let mut client = self.client().await?;
            append::append(&mut client, &self.err, &writes).await
        })
    }

    fn read_events<'a>(
        &'a self,
        persistence_id: &'a str,
        from: u64,
        to: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        Box::pin(async move {
            let rows = self
                .query(
                    r#"SELECT e.seq, e.payload,
                           ARRAY(SELECT t.tag FROM shardik_event_tags AS t
                                 WHERE t.ordinal = e.ordinal ORDER BY t.pos),
                           e.manifest
                       FROM shardik_events AS e
                       WHERE e.pid = $1 AND e.seq BETWEEN $2 AND $3 AND e.payload IS NOT NULL
                       ORDER BY e.seq LIMIT $4"#,
                    &[&persistence_id, &bound(from), &bound(to), &limit(max)],
                    "reading a journal",
                )
                .await?;
            rows.iter()
                .map(|row| {
                    let decode = |e| self.err.decode("an event", e);
                    let seq: i64 = row.try_get(0).map_err(decode)?;
                    let payload: Vec<u8> = row.try_get(1).map_err(decode)?;
                    let tags: Vec<String> = row.try_get(2).map_err(decode)?;
                    let manifest: Option<&str> = row.try_get(3).map_err(decode)?;
                    Ok(StoredEvent {
                        seq: from_sql(seq, "sequence number")?,
                        payload: Bytes::from(payload),
                        manifest: manifest.unwrap_or_default().into(),
                        tags,
                    })
                })
                .collect()
        })
    }

    fn highest_seq<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT max(seq) FROM shardik_events WHERE pid = $1",
                    &[&persistence_id],
                    "reading the highest sequence number",
                )
                .await?;
            let highest: Option<i64> = match rows.first() {
                Some(row) => row
                    .try_get(0)
                    .map_err(|e| self.err.decode("the highest sequence number", e))?,
                None => None,
            };
            highest.map_or(Ok(0), |seq| from_sql(seq, "sequence number"))
        })
    }

    fn delete_events_to<'a>(&'a self, persistence_id: &'a str, to: u64) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            // One statement, so atomic: the payloads go (the rows, so the numbers, stay) and
            // so do the tags, so queries by tag no longer find the events.
            self.execute(
                "WITH deleted AS (
                     UPDATE shardik_events SET payload = NULL
                     WHERE pid = $1 AND seq <= $2 AND payload IS NOT NULL
                     RETURNING ordinal)
                 DELETE FROM shardik_event_tags WHERE ordinal IN (SELECT ordinal FROM deleted)",
                &[&persistence_id, &bound(to)],
                "deleting events",
            )
            .await?;
            Ok(())
        })
    }

    fn events_by_tag<'a>(
        &'a self,
        tag: &'a str,
        offset: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<TaggedEvent>> {
        Box::pin(async move {
            // DISTINCT: an event carrying the same tag twice is found once.
            let rows = self
                .query(
                    "SELECT e.ordinal, e.pid, e.seq, e.payload, e.manifest
                     FROM (SELECT DISTINCT ordinal FROM shardik_event_tags
                           WHERE tag = $1 AND ordinal > $2 ORDER BY ordinal LIMIT $3) AS t
                     JOIN shardik_events AS e ON e.ordinal = t.ordinal
                     WHERE e.payload IS NOT NULL
                     ORDER BY e.ordinal",
                    &[&tag, &bound(offset), &limit(max)],
                    "querying by tag",
                )
                .await?;
            let mut found = Vec::with_capacity(rows.len());
            let mut last_pid: Option<PersistenceId> = None;
            for row in &rows {
                let decode = |e| self.err.decode("a tagged event", e);
                let ordinal: i64 = row.try_get(0).map_err(decode)?;
                let pid: &str = row.try_get(1).map_err(decode)?;
                let seq: i64 = row.try_get(2).map_err(decode)?;
                let payload: Vec<u8> = row.try_get(3).map_err(decode)?;
                let manifest: Option<&str> = row.try_get(4).map_err(decode)?;
                // Many events of one journal come in a row: share their persistence id.
                let persistence_id = match &last_pid {
                    Some(p) if &**p == pid => Arc::clone(p),
                    _ => PersistenceId::from(pid),
                };
                last_pid = Some(Arc::clone(&persistence_id));
                found.push(TaggedEvent {
                    offset: from_sql(ordinal, "event offset")?,
                    persistence_id,
                    seq: from_sql(seq, "sequence number")?,
                    payload: Bytes::from(payload),
                    manifest: manifest.unwrap_or_default().into(),
                });
            }
            Ok(found)
        })
    }

    fn save_snapshot<'a>(
        &'a self,
        persistence_id: &'a str,
        snapshot: Snapshot,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let seq = to_sql(snapshot.seq, "snapshot sequence number")?;
            self.execute(
                "INSERT INTO shardik_snapshots (pid, seq, payload) VALUES ($1, $2, $3)
                 ON CONFLICT (pid, seq) DO UPDATE SET payload = excluded.payload",
                &[&persistence_id, &seq, &&snapshot.payload[..]],
                "saving a snapshot",
            )
            .await?;
            Ok(())
        })
    }

    fn latest_snapshot<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<Snapshot>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT seq, payload FROM shardik_snapshots WHERE pid = $1
                     ORDER BY seq DESC LIMIT 1",
                    &[&persistence_id],
                    "reading the latest snapshot",
                )
                .await?;
            rows.first()
                .map(|row| {
                    let (seq, payload) =
                        self.numbered_payload(row, "a snapshot", "snapshot sequence number")?;
                    Ok(Snapshot { seq, payload })
                })
                .transpose()
        })
    }

    fn delete_snapshots_below<'a>(
        &'a self,
        persistence_id: &'a str,
        below: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.execute(
                "DELETE FROM shardik_snapshots WHERE pid = $1 AND seq < $2",
                &[&persistence_id, &bound(below)],
                "deleting snapshots",
            )
            .await?;
            Ok(())
        })
    }

    fn load_state<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<StoredState>> {
        Box::pin(async move {
            let rows = self
                .query(
                    "SELECT revision, payload FROM shardik_states WHERE pid = $1",
                    &[&persistence_id],
                    "reading a durable state",
                )
                .await?;
            rows.first()
                .map(|row| {
                    let (revision, payload) =
                        self.numbered_payload(row, "a durable state", "state revision")?;
                    Ok(StoredState { revision, payload })
                })
                .transpose()
        })
    }

    fn write_state<'a>(
        &'a self,
        persistence_id: &'a str,
        state: StoredState,
        fence: Option<Fence>,
        marks: Vec<MarkChange>,
    ) -> StoreFuture<'a, WriteResult> {
        Box::pin(async move {
            if let Some(fence) = &fence
                && let Err(malformed) = fence.check_shape(persistence_id)
            {
                return Ok(Err(malformed));
            }
            let malformed = |why| WriteRefused::Malformed {
                persistence_id: persistence_id.into(),
                why,
            };
            if let Err(refused) = check_marks(&marks)
                .map_err(malformed)
                .and_then(|()| check_mark_numbers(persistence_id, &marks))
            {
                return Ok(Err(refused));
            }
            let conflict = || {
                Err(WriteRefused::RevisionConflict {
                    persistence_id: persistence_id.into(),
                    expected: state.revision.saturating_sub(1),
                })
            };
            if state.revision == 0 {
                return Ok(conflict());
            }
            let revision = to_sql(state.revision, "state revision")?;
            let payload = &state.payload[..];
            let mut client = self.client().await?;
            let tx = client
                .transaction()
                .await
                .map_err(|e| self.err.query("starting a durable state write", e))?;
            // The fence first: its row stays locked until the commit, so a newer token
            // cannot be accepted between this judgement and the write.
            if let Some(fence) = &fence {
                let newest = fences::lock(&tx, &self.err, &[&fence.scope]).await?;
                if let Err(fenced) = fence.judge(persistence_id, newest.get(&*fence.scope).copied())
                {
                    return Ok(Err(fenced));
                }
            }
            // Revision 1 is an insert that must find no row; revision n an update that must
            // find n - 1. Either way one statement, so two writers cannot both succeed.
            let changed = if revision == 1 {
                run(
                    &tx,
                    &self.err,
                    "INSERT INTO shardik_states (pid, revision, payload) VALUES ($1, 1, $2)
                     ON CONFLICT (pid) DO NOTHING",
                    &[&persistence_id, &payload],
                    "writing a durable state",
                )
                .await?
            } else {
                run(
                    &tx,
                    &self.err,
                    "UPDATE shardik_states SET revision = $2::bigint, payload = $3
                     WHERE pid = $1 AND revision = $2::bigint - 1",
                    &[&persistence_id, &revision, &payload],
                    "writing a durable state",
                )
                .await?
            };
            if changed != 1 {
                // Dropping the transaction rolls it back: nothing changed.
                return Ok(conflict());
            }
            let marks: Vec<(&str, &MarkChange)> =
                marks.iter().map(|m| (persistence_id, m)).collect();
            delivery::change_marks(&tx, &self.err, &marks).await?;
            if let Some(fence) = &fence {
                fences::raise(&tx, &self.err, &[(&fence.scope, fence.token)]).await?;
            }
            tx.commit()
                .await
                .map_err(|e| self.err.query("committing a durable state write", e))?;
            Ok(Ok(()))
        })
    }

    fn acquire_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, LeaseAcquired> {
        Box::pin(self.acquire_lease_impl(name, owner, ttl))
    }

    fn renew_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.renew_lease_impl(name, owner, token, ttl))
    }

    fn release_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
    ) -> StoreFuture<'a, bool> {
        Box::pin(self.release_lease_impl(name, owner, token))
    }

    fn read_lease<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<LeaseInfo>> {
        Box::pin(self.read_lease_impl(name))
    }

    fn update_remembered<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
        started: &'a [String],
        stopped: &'a [String],
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client
                .transaction()
                .await
                .map_err(|e| self.err.query("starting to remember entities", e))?;
            // Started first, then stopped: an id in both ends stopped.
            run(
                &tx,
                &self.err,
                "INSERT INTO shardik_remembered (kind, shard, entity)
                 SELECT $1, $2, entity FROM unnest($3::text[]) AS entity
                 ON CONFLICT DO NOTHING",
                &[&kind, &shard, &started],
                "remembering entities",
            )
            .await?;
            run(
                &tx,
                &self.err,
                "DELETE FROM shardik_remembered
                 WHERE kind = $1 AND shard = $2 AND entity = ANY($3::text[])",
                &[&kind, &shard, &stopped],
                "forgetting entities",
            )
            .await?;
            tx.commit()
                .await
                .map_err(|e| self.err.query("committing remembered entities", e))
        })
    }

    fn remembered_shards<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            self.strings(
                "SELECT DISTINCT shard FROM shardik_remembered WHERE kind = $1 ORDER BY shard",
                &[&kind],
                "reading remembered shards",
            )
            .await
        })
    }

    fn remembered_entities<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
    ) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            self.strings(
                "SELECT entity FROM shardik_remembered WHERE kind = $1 AND shard = $2
                 ORDER BY entity",
                &[&kind, &shard],
                "reading remembered entities",
            )
            .await
        })
    }

    /// Yes: schema version 5 holds marks, producer epochs and producer queues.
    fn keeps_delivery_data(&self) -> bool {
        true
    }

    fn delivery_marks<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Vec<DeliveryMark>> {
        Box::pin(async move {
            let client = self.client().await?;
            delivery::delivery_marks(&client, &self.err, persistence_id).await
        })
    }

    fn start_producer<'a>(&'a self, producer: &'a str) -> StoreFuture<'a, u64> {
        Box::pin(async move {
            let client = self.client().await?;
            delivery::start_producer(&client, &self.err, producer).await
        })
    }

    fn enqueue<'a>(
        &'a self,
        producer: &'a str,
        messages: Vec<QueuedMessage>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let client = self.client().await?;
            delivery::enqueue(&client, &self.err, producer, &messages).await
        })
    }

    fn confirm_queued<'a>(
        &'a self,
        producer: &'a str,
        confirmations: Vec<QueueConfirmation>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let client = self.client().await?;
            delivery::confirm_queued(&client, &self.err, producer, &confirmations).await
        })
    }

    fn queued<'a>(&'a self, producer: &'a str) -> StoreFuture<'a, Vec<QueuedMessage>> {
        Box::pin(async move {
            let client = self.client().await?;
            delivery::queued(&client, &self.err, producer).await
        })
    }

    fn lease_names<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<String>> {
        Box::pin(async move {
            let client = self.client().await?;
            delivery::lease_names(&client, &self.err, prefix).await
        })
    }

    fn remove_kind_data<'a>(
        &'a self,
        kind: &'a str,
        leases: &'a [String],
    ) -> StoreFuture<'a, Result<KindDataRemoved, LeaseStillHeld>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            delivery::remove_kind_data(&mut client, &self.err, kind, leases).await
        })
    }

    /// Closes the pool: connections in use finish their call, then every connection closes.
    fn close(&self) -> StoreFuture<'_, ()> {
        self.pool.close();
        Box::pin(std::future::ready(Ok(())))
    }
}

/// Runs one statement in a transaction, prepared once per connection.
async fn run(
    tx: &Transaction<'_>,
    err: &PgErr,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    doing: &str,
) -> Result<u64, StoreError> {
    let stmt = tx
        .prepare_cached(sql)
        .await
        .map_err(|e| err.query(doing, e))?;
    tx.execute(&stmt, params)
        .await
        .map_err(|e| err.query(doing, e))
}
