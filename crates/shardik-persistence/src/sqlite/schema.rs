//! The SQLite schema, its migrations, and the checks made before a file is opened for writing.
//!
//! The schema's version is the one row of `shardik_schema`. Migrations run at open inside one
//! `BEGIN IMMEDIATE` transaction, so processes opening the same file together migrate it once
//! (the second waits for the first's lock, then finds the new version). A version newer than
//! this build's refuses the open before anything is written.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::error::{Ctx, map_error};
use crate::error::StoreError;

/// Migration `i` brings the schema from version `i` to `i + 1`.
///
/// Version 1, journals and the rest: event rows are never deleted (deletion clears the
/// payload), so the `INTEGER PRIMARY KEY` ordinal is never reused; and SQLite has one writer at
/// a time, so ordinals grow in commit order, which queries by tag rely on.
///
/// Version 2, leases and fences: a lease row is never deleted either (a release clears its
/// owner), so its token keeps growing across tenures; `expires_at` is in microseconds since
/// the Unix epoch by the machine's clock. A fence row holds the newest token accepted for its
/// scope.
///
/// Version 3, event manifests: each event keeps what its writer says it is (format and
/// version), so that a later version of the program can read, or adapt, an event written by an
/// earlier one. Events from before have none (`NULL`, read as empty).
///
/// Version 4, the store's identity: one row, drawn at random (128 bits from SQLite's own
/// generator) in the transaction that creates the table, so it is written once per file
/// whatever number of processes open it together (see [`read_identity`]).
///
/// Version 5, reliable delivery's data: each entity's delivery marks (one row per persistence
/// id and producer, written in the transaction of the entity's own write), the last epoch
/// handed out per durable producer, and the durable producer queues. A queue row keeps its
/// payload, which can be large, so its table keeps rowids (SQLite advises against `WITHOUT
/// ROWID` for large rows); its primary key lists a producer's messages in stream order, and
/// the index by kind finds the rows that removing a kind deletes.
const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE shardik_events (
        ordinal INTEGER PRIMARY KEY,
        pid TEXT NOT NULL,
        seq INTEGER NOT NULL,
        payload BLOB,
        UNIQUE (pid, seq)
    );
    CREATE TABLE shardik_event_tags (
        ordinal INTEGER NOT NULL,
        pos INTEGER NOT NULL,
        tag TEXT NOT NULL,
        PRIMARY KEY (ordinal, pos)
    ) WITHOUT ROWID;
    CREATE INDEX shardik_event_tags_by_tag ON shardik_event_tags (tag, ordinal);
    CREATE TABLE shardik_snapshots (
        pid TEXT NOT NULL,
        seq INTEGER NOT NULL,
        payload BLOB NOT NULL,
        UNIQUE (pid, seq)
    );
    CREATE TABLE shardik_states (
        pid TEXT NOT NULL UNIQUE,
        revision INTEGER NOT NULL,
        payload BLOB NOT NULL
    );
    CREATE TABLE shardik_remembered (
        kind TEXT NOT NULL,
        shard TEXT NOT NULL,
        entity TEXT NOT NULL,
        PRIMARY KEY (kind, shard, entity)
    ) WITHOUT ROWID;
",
    "
    CREATE TABLE shardik_leases (
        name TEXT PRIMARY KEY,
        owner TEXT,
        token INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE shardik_fences (
        scope TEXT PRIMARY KEY,
        token INTEGER NOT NULL
    ) WITHOUT ROWID;
",
    "
    ALTER TABLE shardik_events ADD COLUMN manifest TEXT;
",
    "
    CREATE TABLE shardik_store (id TEXT NOT NULL);
    INSERT INTO shardik_store (id) VALUES (lower(hex(randomblob(16))));
",
    "
    CREATE TABLE shardik_delivery_marks (
        pid TEXT NOT NULL,
        producer TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        stream INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        written_at_ms INTEGER NOT NULL,
        PRIMARY KEY (pid, producer)
    ) WITHOUT ROWID;
    CREATE TABLE shardik_producer_epochs (
        producer TEXT PRIMARY KEY,
        epoch INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE shardik_producer_queue (
        producer TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        stream INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        entity TEXT NOT NULL,
        payload BLOB NOT NULL,
        PRIMARY KEY (producer, epoch, stream, seq)
    );
    CREATE INDEX shardik_producer_queue_by_kind ON shardik_producer_queue (kind);
",
];

/// The schema version this build writes and reads.
pub(crate) const CURRENT: u32 = MIGRATIONS.len() as u32;

/// Checks an existing file without changing it, before it is opened for writing: SQLite,
/// opened normally on a damaged file, can leave `-wal` and `-shm` files behind, and a truncated
/// file is only noticed when a missing page is read. So: the header must be SQLite's, the file
/// must hold every page its header counts, and the schema (with its version) must read back on
/// a read-only connection that touches nothing.
///
/// A full `PRAGMA quick_check` is not run: it reads the whole file, which at every start of a
/// large journal costs too much; damage deeper in the file is reported as
/// [`StoreError::Corrupt`] by the call that reads it.
pub(super) fn check_existing_file(path: &Path) -> Result<(), StoreError> {
    let metadata = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(StoreError::Unavailable(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    if metadata.is_dir() {
        return Err(StoreError::Unavailable(format!(
            "{} is a directory, not a database file",
            path.display()
        )));
    }
    // An empty file is a new database to SQLite.
    if metadata.len() == 0 {
        return Ok(());
    }
    check_header(path, metadata.len())?;
    // A non-empty `-wal` file means another connection has the database open (or one crashed
    // with commits not yet copied into the main file): the main file alone is then not the
    // whole database, so only a normal open, which reads the WAL, can judge it. The files are
    // already there, so that open leaves nothing new behind.
    if wal_in_use(path) {
        return Ok(());
    }
    let found = read_version_untouched(path)?;
    if found > CURRENT {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: CURRENT,
        });
    }
    Ok(())
}

fn wal_in_use(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0)
}

/// Checks the 100-byte header: SQLite's magic string, a valid page size, and a file at least
/// as long as the pages the header counts (when that count is valid).
fn check_header(path: &Path, len: u64) -> Result<(), StoreError> {
    let corrupt = |why: String| StoreError::Corrupt(format!("{}: {why}", path.display()));
    let mut header = [0u8; 100];
    let read = File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                corrupt(format!("{len} bytes, too short for a SQLite database"))
            }
            _ => StoreError::Unavailable(format!("cannot read {}: {e}", path.display())),
        });
    read?;
    if &header[..16] != b"SQLite format 3\0" {
        return Err(corrupt("not a SQLite database (wrong header)".into()));
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n if n >= 512 && n.is_power_of_two() => u64::from(n),
        n => return Err(corrupt(format!("invalid page size {n} in the header"))),
    };
    let word = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let (change_counter, pages, valid_for) = (word(24), u64::from(word(28)), word(92));
    // The page count is only valid when the header says so (it was written by a SQLite that
    // maintains it, and not changed since by one that does not).
    if pages > 0 && change_counter == valid_for && len < pages * page_size {
        return Err(corrupt(format!(
            "truncated: the header counts {pages} pages of {page_size} bytes, the file has {len} bytes"
        )));
    }
    Ok(())
}

/// Reads the schema version of an existing file through a read-only, `immutable` connection:
/// no locks, no `-wal` or `-shm` files, nothing written. 0 when the file has no shardik schema.
fn read_version_untouched(path: &Path) -> Result<u32, StoreError> {
    let uri = format!("file:{}?immutable=1", uri_path(path));
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(&uri, flags)
        .map_err(|e| map_error(path, "opening read-only to check it", e))?;
    let version = read_version(&conn).map_err(|e| match e {
        Fault::Db(e) => map_error(path, "checking the schema", e),
        Fault::Store(e) => e,
    });
    // Closing a read-only connection cannot lose anything; its error would only repeat.
    drop(conn);
    version
}

/// The path as a URI path: every byte but unreserved ones and `/` percent-encoded, so that `?`,
/// `#` and `%` in file names are not read as URI syntax.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What reading the version can fail with: the database itself, or what it holds.
enum Fault {
    Db(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for Fault {
    fn from(e: rusqlite::Error) -> Self {
        Fault::Db(e)
    }
}

/// The schema version recorded in the database; 0 when it has no `shardik_schema` table.
fn read_version(conn: &Connection) -> Result<u32, Fault> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'shardik_schema')",
        [],
        |row| row.get(0),
    )?;
    if !exists {
        return Ok(0);
    }
    let version: Option<i64> = conn
        .query_row("SELECT max(version) FROM shardik_schema", [], |row| {
            row.get(0)
        })
        .optional()?
        .flatten();
    let version = version.unwrap_or(0);
    u32::try_from(version).map_err(|_| {
        Fault::Store(StoreError::Corrupt(format!(
            "shardik_schema holds version {version}, which no shardik wrote"
        )))
    })
}

/// Creates or migrates the schema of an open read-write connection, in one transaction; a
/// newer schema is refused with nothing written.
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    conn.execute_batch("BEGIN IMMEDIATE")
        .ctx(path, "locking the database to check its schema")?;
    let outcome = migrate_in_transaction(conn, path);
    let end = if outcome.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    let ended = conn
        .execute_batch(end)
        .ctx(path, "ending the schema transaction");
    outcome.and(ended)
}

fn migrate_in_transaction(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    let found = read_version(conn).map_err(|e| match e {
        Fault::Db(e) => map_error(path, "reading the schema version", e),
        Fault::Store(e) => e,
    })?;
    if found > CURRENT {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: CURRENT,
        });
    }
    if found == CURRENT {
        return Ok(());
    }
    if found == 0 {
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS shardik_schema (version INTEGER NOT NULL);
             DELETE FROM shardik_schema;
             INSERT INTO shardik_schema (version) VALUES (0);",
        )
        .ctx(path, "creating the schema table")?;
    }
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        conn.execute_batch(migration).ctx(
            path,
            &format!("migrating the schema to version {}", from + 1),
        )?;
    }
    conn.execute("UPDATE shardik_schema SET version = ?1", [CURRENT])
        .ctx(path, "recording the schema version")?;
    Ok(())
}

/// The store's identity (schema version 4), from a connection whose schema is current.
pub(super) fn read_identity(conn: &Connection, path: &Path) -> Result<String, StoreError> {
    let ids: Vec<String> = conn
        .prepare("SELECT id FROM shardik_store")
        .and_then(|mut stmt| {
            stmt.query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()
        })
        .ctx(path, "reading the store's identity")?;
    match ids.as_slice() {
        [id] if !id.is_empty() => Ok(id.clone()),
        _ => Err(StoreError::Corrupt(format!(
            "{}: shardik_store holds {} identities, where shardik writes exactly one",
            path.display(),
            ids.len()
        ))),
    }
}
