//! The reader thread: a second connection that only reads, so that reads (recovering an
//! entity, queries by tag) never wait behind the writer's batches. In WAL mode a reader sees
//! the last commit made before its statement began, by any connection of any process.

use std::path::Path;

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

/// A read, run on the reader's connection; it answers its caller itself.
pub(super) type ReadJob = Box<dyn FnOnce(&Connection, &Path) + Send>;

/// What the reader's queue carries.
pub(super) enum ReaderMsg {
    Job(ReadJob),
    /// Close the connection, then signal.
    Close(oneshot::Sender<()>),
}

/// The reader thread's loop: one read at a time until the queue closes or a `Close` arrives.
pub(super) fn run(conn: Connection, path: &Path, mut queue: mpsc::Receiver<ReaderMsg>) {
    let mut closing = None;
    while let Some(msg) = queue.blocking_recv() {
        match msg {
            ReaderMsg::Job(job) => job(&conn, path),
            ReaderMsg::Close(done) => {
                closing = Some(done);
                break;
            }
        }
    }
    drop(queue);
    if let Err((_, e)) = conn.close() {
        tracing::warn!(path = %path.display(), error = %e, "closing the SQLite reader connection failed");
    }
    if let Some(done) = closing {
        let _ = done.send(());
    }
}
