//! The SQLite store: one file, shared by the processes of one machine.
//!
//! rusqlite is synchronous, so all database work runs on two OS threads per store, each owning
//! its connection: a writer that batches every waiting write into one transaction (see
//! [`writer`]), and a reader. Async callers talk to them over bounded queues and get their
//! answers over oneshot channels, so no tokio worker ever blocks on the disk.
//!
//! Durability: the file is in WAL mode with `synchronous=FULL`, so every commit is fsynced
//! before its writes are answered `Ok`: an acknowledged write survives a SIGKILL of the process
//! and a power loss. (`NORMAL` in WAL mode would survive a killed process, since the commit is
//! in the OS's cache, but could lose the last commits on power loss; the batching writer pays
//! one fsync per batch, not per write, so FULL costs little.) A busy handler that retries for
//! 10 s lets several processes share the file: a writer waits for another's write lock
//! instead of failing (see [`wait_for_lock`] for why not SQLite's own `busy_timeout`).

mod delivery;
mod error;
mod leases;
mod queries;
mod reader;
mod schema;
mod writer;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};
use tokio::sync::{mpsc, oneshot};

use crate::delivery::{
    DeliveryMark, KindDataRemoved, LeaseStillHeld, MarkChange, QueueConfirmation, QueuedMessage,
};
use crate::error::{StoreError, WriteResult};
use crate::fence::Fence;
use crate::lease::{LeaseAcquired, LeaseInfo};
use crate::records::{Snapshot, StoredEvent, StoredState, TaggedEvent};
use crate::store::{Store, StoreFuture};
use crate::write::AtomicWrite;
use error::{Ctx, map_error};
use reader::ReaderMsg;
use writer::WriterMsg;

/// How long a connection waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a waiting connection sleeps between tries for a lock (after a few quicker tries).
const LOCK_RETRY: Duration = Duration::from_micros(500);

/// Quick tries (no sleep but a yield) before the waiter sleeps [`LOCK_RETRY`] between tries.
const QUICK_TRIES: i32 = 10;

/// How many requests may wait for each thread; callers beyond that wait to enqueue
/// (backpressure instead of unbounded memory).
const QUEUE: usize = 1024;

/// A [`Store`] in one SQLite file (created, with its directory, when missing).
///
/// Several stores, in one process or in several, may open the same file at once: each write
/// takes the file's write lock, and the store's rules (a taken sequence number refuses the
/// write) hold across all of them.
pub struct SqliteStore {
    path: Arc<Path>,
    /// Read at open (schema version 4): see [`Store::identity`].
    identity: String,
    writer: mpsc::Sender<WriterMsg>,
    reader: mpsc::Sender<ReaderMsg>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the database at `path`, creating the file when missing (its directory must
    /// exist: a typo in a path must not quietly give an empty store), and creating or migrating
    /// its schema.
    ///
    /// Errors: [`StoreError::Corrupt`] for a file that is not a sound SQLite database (it is
    /// left exactly as it was), [`StoreError::SchemaTooNew`] for a schema written by a newer
    /// shardik (nothing is changed), [`StoreError::Unavailable`] when the directory does not
    /// exist or the file cannot be created, opened or written.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path: Arc<Path> = Arc::from(path.as_ref());
        let opening = Arc::clone(&path);
        tokio::task::spawn_blocking(move || Self::open_blocking(opening))
            .await
            .map_err(|e| StoreError::Failed(format!("opening {} stopped: {e}", path.display())))?
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_blocking(path: Arc<Path>) -> Result<Self, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
            && !parent.is_dir()
        {
            // Creating it would turn a mistyped path into a new, empty store that looks
            // healthy; the configured data directory is created by whoever configured it
            // (`persistence.data-dir`, by the node).
            return Err(StoreError::Unavailable(format!(
                "the directory {} of the SQLite store {} does not exist: check the path, or \
                 create the directory first",
                parent.display(),
                path.display()
            )));
        }
        schema::check_existing_file(&path)?;
        let writer_conn = connect(&path)?;
        let journal_mode: String = retry_while_busy(|| {
            writer_conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        })
        .ctx(&path, "switching to WAL mode")?;
        if !journal_mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unavailable(format!(
                "{}: SQLite refused WAL mode (journal mode is {journal_mode}); is it on a network file system?",
                path.display()
            )));
        }
        schema::migrate(&writer_conn, &path)?;
        let identity = schema::read_identity(&writer_conn, &path)?;
        let reader_conn = connect(&path)?;
        // The reader only reads; this makes a mistake an error instead of a write.
        reader_conn
            .execute_batch("PRAGMA query_only = ON")
            .ctx(&path, "making the reader read-only")?;

        let (writer, writer_queue) = mpsc::channel(QUEUE);
        let (reader, reader_queue) = mpsc::channel(QUEUE);
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let writer_path = Arc::clone(&path);
        spawn(format!("sqlite-w {name}"), &path, move || {
            writer::run(writer_conn, &writer_path, writer_queue)
        })?;
        let reader_path = Arc::clone(&path);
        spawn(format!("sqlite-r {name}"), &path, move || {
            reader::run(reader_conn, &reader_path, reader_queue)
        })?;
        Ok(SqliteStore {
            path,
            identity,
            writer,
            reader,
        })
    }

    fn closed(&self) -> StoreError {
        StoreError::Unavailable(format!(
            "the SQLite store {} is closed",
            self.path.display()
        ))
    }

    /// Runs `work` on the writer's connection, in the next batch's transaction.
    fn write<T, F>(&self, work: F) -> StoreFuture<'_, T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(writer::Job::new(work, reply));
        Box::pin(async move {
            self.writer
                .send(WriterMsg::Job(job))
                .await
                .map_err(|_| self.closed())?;
            answer.await.map_err(|_| self.closed())?
        })
    }

    /// Runs `work` on the reader's connection.
    fn read<T, F>(&self, work: F) -> StoreFuture<'_, T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job: reader::ReadJob = Box::new(move |conn, path| {
            // The caller may have stopped waiting.
            let _ = reply.send(work(conn, path));
        });
        Box::pin(async move {
            self.reader
                .send(ReaderMsg::Job(job))
                .await
                .map_err(|_| self.closed())?;
            answer.await.map_err(|_| self.closed())?
        })
    }
}

/// Opens a read-write connection with the settings every connection of the store needs.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| {
        match map_error(path, "opening", e) {
            // SQLite says "unable to open database file" for a missing directory as for a
            // refused permission: either way the store cannot be had.
            StoreError::Failed(why) => StoreError::Unavailable(why),
            other => other,
        }
    })?;
    conn.busy_handler(Some(wait_for_lock))
        .ctx(path, "setting the busy handler")?;
    conn.execute_batch("PRAGMA synchronous = FULL")
        .ctx(path, "setting synchronous = FULL")?;
    // A batch from the journal writer holds many writes, each in a savepoint of its own; the
    // page images those savepoints may need would spill past 64 KiB into a temporary file on
    // disk and cost about a third of the throughput (docs/PERFORMANCE-HISTORY.md, "Fifth round"). In
    // memory they are bounded by the batch, which the writer bounds.
    conn.execute_batch("PRAGMA temp_store = MEMORY")
        .ctx(path, "setting temp_store = MEMORY")?;
    Ok(conn)
}

/// The busy handler: called by SQLite with the number of tries so far while another
/// connection holds a lock; `true` tries again, `false` fails the statement (`SQLITE_BUSY`).
///
/// This replaces SQLite's `busy_timeout`, which backs off to 100 ms between tries: a store
/// under load commits batch after batch, leaving gaps of microseconds between its
/// transactions, and a writer in another process that looks only every 100 ms can miss every
/// gap for the whole timeout (the two-process test showed it starving). Trying every 0.5 ms
/// finds a gap within milliseconds, for about [`BUSY_TIMEOUT`] in all.
fn wait_for_lock(tries: i32) -> bool {
    let sleeping_tries = (BUSY_TIMEOUT.as_micros() / LOCK_RETRY.as_micros()) as i32;
    if tries < QUICK_TRIES {
        std::thread::yield_now();
        true
    } else if tries < QUICK_TRIES + sleeping_tries {
        std::thread::sleep(LOCK_RETRY);
        true
    } else {
        false
    }
}

/// Runs `step` again while SQLite answers `SQLITE_BUSY`, for about [`BUSY_TIMEOUT`] in all.
///
/// For the switch of a new file to WAL mode, which needs the file to itself: when several
/// processes open a new file at the same moment (the nodes of a local cluster started
/// together), SQLite refuses the switch at once, without calling the busy handler, because
/// waiting could deadlock with another connection's switch in the middle. Trying again after
/// that connection is done succeeds (the file is then in WAL mode already).
fn retry_while_busy<T>(mut step: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match step() {
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(LOCK_RETRY);
            }
            outcome => return outcome,
        }
    }
}

fn spawn(
    name: String,
    path: &Path,
    body: impl FnOnce() + Send + 'static,
) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name(name)
        .spawn(body)
        .map(drop)
        .map_err(|e| {
            StoreError::Unavailable(format!("cannot start a thread for {}: {e}", path.display()))
        })
}

impl Store for SqliteStore {
    fn identity(&self) -> &str {
        &self.identity
    }

    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    fn append(&self, writes: Vec<AtomicWrite>) -> StoreFuture<'_, Vec<WriteResult>> {
        if writes.is_empty() {
            return Box::pin(std::future::ready(Ok(Vec::new())));
        }
        self.write(move |conn, path| queries::append(conn, path, writes))
    }

    fn read_events<'a>(
        &'a self,
        persistence_id: &'a str,
        from: u64,
        to: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        let pid = persistence_id.to_owned();
        self.read(move |conn, path| queries::read_events(conn, path, &pid, from, to, max))
    }

    fn highest_seq<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, u64> {
        let pid = persistence_id.to_owned();
        self.read(move |conn, path| queries::highest_seq(conn, path, &pid))
    }

    fn delete_events_to<'a>(&'a self, persistence_id: &'a str, to: u64) -> StoreFuture<'a, ()> {
        let pid = persistence_id.to_owned();
        self.write(move |conn, path| queries::delete_events_to(conn, path, &pid, to))
    }

    fn events_by_tag<'a>(
        &'a self,
        tag: &'a str,
        offset: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<TaggedEvent>> {
        let tag = tag.to_owned();
        self.read(move |conn, path| queries::events_by_tag(conn, path, &tag, offset, max))
    }

    fn save_snapshot<'a>(
        &'a self,
        persistence_id: &'a str,
        snapshot: Snapshot,
    ) -> StoreFuture<'a, ()> {
        let pid = persistence_id.to_owned();
        self.write(move |conn, path| queries::save_snapshot(conn, path, &pid, &snapshot))
    }

    fn latest_snapshot<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<Snapshot>> {
        let pid = persistence_id.to_owned();
        self.read(move |conn, path| queries::latest_snapshot(conn, path, &pid))
    }

    fn delete_snapshots_below<'a>(
        &'a self,
        persistence_id: &'a str,
        below: u64,
    ) -> StoreFuture<'a, ()> {
        let pid = persistence_id.to_owned();
        self.write(move |conn, path| queries::delete_snapshots_below(conn, path, &pid, below))
    }

    fn load_state<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<StoredState>> {
        let pid = persistence_id.to_owned();
        self.read(move |conn, path| queries::load_state(conn, path, &pid))
    }

    fn write_state<'a>(
        &'a self,
        persistence_id: &'a str,
        state: StoredState,
        fence: Option<Fence>,
        marks: Vec<MarkChange>,
    ) -> StoreFuture<'a, WriteResult> {
        let pid = persistence_id.to_owned();
        self.write(move |conn, path| {
            queries::write_state(conn, path, &pid, &state, fence.as_ref(), &marks)
        })
    }

    fn acquire_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, LeaseAcquired> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.write(move |conn, path| leases::acquire(conn, path, &name, &owner, ttl))
    }

    fn renew_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, bool> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.write(move |conn, path| leases::renew(conn, path, &name, &owner, token, ttl))
    }

    fn release_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
    ) -> StoreFuture<'a, bool> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.write(move |conn, path| leases::release(conn, path, &name, &owner, token))
    }

    fn read_lease<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<LeaseInfo>> {
        let name = name.to_owned();
        self.read(move |conn, path| leases::read(conn, path, &name))
    }

    fn update_remembered<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
        started: &'a [String],
        stopped: &'a [String],
    ) -> StoreFuture<'a, ()> {
        let (kind, shard) = (kind.to_owned(), shard.to_owned());
        let (started, stopped) = (started.to_vec(), stopped.to_vec());
        self.write(move |conn, path| {
            queries::update_remembered(conn, path, &kind, &shard, &started, &stopped)
        })
    }

    fn remembered_shards<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>> {
        let kind = kind.to_owned();
        self.read(move |conn, path| queries::remembered_shards(conn, path, &kind))
    }

    fn remembered_entities<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
    ) -> StoreFuture<'a, Vec<String>> {
        let (kind, shard) = (kind.to_owned(), shard.to_owned());
        self.read(move |conn, path| queries::remembered_entities(conn, path, &kind, &shard))
    }

    /// Yes: schema version 5 holds marks, producer epochs and producer queues.
    fn keeps_delivery_data(&self) -> bool {
        true
    }

    fn delivery_marks<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Vec<DeliveryMark>> {
        let pid = persistence_id.to_owned();
        self.read(move |conn, path| delivery::delivery_marks(conn, path, &pid))
    }

    fn start_producer<'a>(&'a self, producer: &'a str) -> StoreFuture<'a, u64> {
        let producer = producer.to_owned();
        self.write(move |conn, path| delivery::start_producer(conn, path, &producer))
    }

    fn enqueue<'a>(
        &'a self,
        producer: &'a str,
        messages: Vec<QueuedMessage>,
    ) -> StoreFuture<'a, ()> {
        let producer = producer.to_owned();
        self.write(move |conn, path| delivery::enqueue(conn, path, &producer, &messages))
    }

    fn confirm_queued<'a>(
        &'a self,
        producer: &'a str,
        confirmations: Vec<QueueConfirmation>,
    ) -> StoreFuture<'a, ()> {
        let producer = producer.to_owned();
        self.write(move |conn, path| {
            delivery::confirm_queued(conn, path, &producer, &confirmations)
        })
    }

    fn queued<'a>(&'a self, producer: &'a str) -> StoreFuture<'a, Vec<QueuedMessage>> {
        let producer = producer.to_owned();
        self.read(move |conn, path| delivery::queued(conn, path, &producer))
    }

    fn lease_names<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<String>> {
        let prefix = prefix.to_owned();
        self.read(move |conn, path| delivery::lease_names(conn, path, &prefix))
    }

    fn remove_kind_data<'a>(
        &'a self,
        kind: &'a str,
        leases: &'a [String],
    ) -> StoreFuture<'a, Result<KindDataRemoved, LeaseStillHeld>> {
        let (kind, leases) = (kind.to_owned(), leases.to_vec());
        self.write(move |conn, path| delivery::remove_kind_data(conn, path, &kind, &leases))
    }

    /// Answers the writes already queued, then closes both connections (the last connection
    /// to the file checkpoints the WAL into it and removes the `-wal` and `-shm` files).
    fn close(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            // Reader first: the writer's connection, closed last, can then checkpoint.
            let (reader_done, reader_closed) = oneshot::channel();
            if self
                .reader
                .send(ReaderMsg::Close(reader_done))
                .await
                .is_ok()
            {
                // An error means the thread already ended: closed all the same.
                let _ = reader_closed.await;
            }
            let (writer_done, writer_closed) = oneshot::channel();
            if self
                .writer
                .send(WriterMsg::Close(writer_done))
                .await
                .is_ok()
            {
                let _ = writer_closed.await;
            }
            Ok(())
        })
    }
}
