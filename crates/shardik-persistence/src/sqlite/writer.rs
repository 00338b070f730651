//! The writer thread: the one connection of a store that writes.
//!
//! It takes every request waiting in its queue (up to [`MAX_BATCH`]) and runs them in ONE
//! transaction, so that many entities' writes share one commit and its fsync: that batching is
//! what makes the store fast under many writers. Each request runs inside a SAVEPOINT of its
//! own, so a request that fails is undone alone while the rest of the batch commits. Every
//! request is answered only once the commit is known, because `Ok` promises durability.

use std::path::Path;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::error::Ctx;
use crate::error::StoreError;

/// How many requests at most one transaction carries (each may hold many writes): bounds the
/// time a batch holds the database's write lock.
const MAX_BATCH: usize = 256;

/// One request to the writer.
pub(super) trait WriteJob: Send {
    /// Does the work inside the batch's transaction; `false` when it failed and must be undone.
    fn run(&mut self, conn: &Connection, path: &Path) -> bool;
    /// Answers the caller once the fate of the batch is known (`Err` when it did not commit).
    fn finish(self: Box<Self>, commit: Result<(), StoreError>);
}

/// What the writer's queue carries.
pub(super) enum WriterMsg {
    Job(Box<dyn WriteJob>),
    /// Answer what came before, close the connection, then signal.
    Close(oneshot::Sender<()>),
}

/// A request made of a closure, answered through a oneshot channel.
pub(super) struct Job<T, F> {
    work: Option<F>,
    outcome: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job<T, F> {
    pub(super) fn new(work: F, reply: oneshot::Sender<Result<T, StoreError>>) -> Self {
        Job {
            work: Some(work),
            outcome: None,
            reply,
        }
    }
}

impl<T, F> WriteJob for Job<T, F>
where
    T: Send,
    F: FnOnce(&Connection, &Path) -> Result<T, StoreError> + Send,
{
    fn run(&mut self, conn: &Connection, path: &Path) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let outcome = work(conn, path);
        let ok = outcome.is_ok();
        self.outcome = Some(outcome);
        ok
    }

    fn finish(self: Box<Self>, commit: Result<(), StoreError>) {
        let answer = match (self.outcome, commit) {
            (Some(Err(own)), _) => Err(own),
            (_, Err(commit)) => Err(commit),
            (Some(Ok(value)), Ok(())) => Ok(value),
            (None, Ok(())) => Err(StoreError::Failed("the write was never run".into())),
        };
        // The caller may have stopped waiting; the work is done either way.
        let _ = self.reply.send(answer);
    }
}

/// The writer thread's loop: batches until the queue closes or a `Close` arrives.
pub(super) fn run(conn: Connection, path: &Path, mut queue: mpsc::Receiver<WriterMsg>) {
    let mut closing = None;
    while closing.is_none() {
        let Some(first) = queue.blocking_recv() else {
            break;
        };
        let mut jobs = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                WriterMsg::Job(job) => jobs.push(job),
                WriterMsg::Close(done) => {
                    closing = Some(done);
                    break;
                }
            }
            if jobs.len() >= MAX_BATCH {
                break;
            }
            next = queue.try_recv().ok();
        }
        if !jobs.is_empty() {
            commit_batch(&conn, path, jobs);
        }
    }
    // Requests still queued are dropped with the queue: their callers learn the store closed.
    drop(queue);
    if let Err((_, e)) = conn.close() {
        tracing::warn!(path = %path.display(), error = %e, "closing the SQLite writer connection failed");
    }
    if let Some(done) = closing {
        let _ = done.send(());
    }
}

/// Runs `jobs` in one transaction and answers each.
fn commit_batch(conn: &Connection, path: &Path, mut jobs: Vec<Box<dyn WriteJob>>) {
    let outcome = run_batch(conn, path, &mut jobs);
    if outcome.is_err() && !conn.is_autocommit() {
        // The batch failed as a whole: undo what it did. A failing rollback leaves nothing
        // more to do; the callers get the batch's error.
        if let Err(e) = conn.execute_batch("ROLLBACK") {
            tracing::warn!(path = %path.display(), error = %e, "rolling back a failed SQLite batch failed");
        }
    }
    for job in jobs {
        job.finish(outcome.clone());
    }
}

fn run_batch(
    conn: &Connection,
    path: &Path,
    jobs: &mut [Box<dyn WriteJob>],
) -> Result<(), StoreError> {
    // IMMEDIATE takes the write lock now (waiting up to the busy timeout for other processes),
    // rather than failing at the first write when another process wrote in between.
    conn.execute_batch("BEGIN IMMEDIATE")
        .ctx(path, "starting a write transaction")?;
    for job in jobs.iter_mut() {
        conn.execute_batch("SAVEPOINT job")
            .ctx(path, "opening a savepoint")?;
        if !job.run(conn, path) {
            conn.execute_batch("ROLLBACK TO job")
                .ctx(path, "undoing a failed request")?;
        }
        conn.execute_batch("RELEASE job")
            .ctx(path, "releasing a savepoint")?;
    }
    conn.execute_batch("COMMIT").ctx(path, "committing")
}
