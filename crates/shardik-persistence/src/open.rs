//! Opening a store from a URL, as configuration names it.

use std::sync::Arc;

use crate::{MemoryStore, PostgresStore, SqliteStore, Store, StoreError};

/// The URL forms [`open_store`] accepts, for error messages.
const ACCEPTED: &str = "expected memory:, sqlite:PATH, postgres://… or postgresql://…";

/// Opens the store a URL names:
///
/// - `memory:` — a new, empty [`MemoryStore`] (gone when the process ends);
/// - `sqlite:PATH` — a [`SqliteStore`] in the file `PATH` (relative to the working directory
///   unless absolute; `sqlite://PATH` is read the same, so `sqlite:///var/lib/x.db` is
///   `/var/lib/x.db`);
/// - `postgres://…` or `postgresql://…` — a [`PostgresStore`] (see
///   [`PostgresStore::connect`]).
///
/// Anything else is [`StoreError::BadUrl`]; the other errors are those of the store opened.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    let bad = |why: &str| StoreError::BadUrl {
        url: redact_store_url(url),
        why: why.to_string(),
    };
    let (scheme, rest) = url
        .split_once(':')
        .ok_or_else(|| bad(&format!("no scheme; {ACCEPTED}")))?;
    match scheme.to_ascii_lowercase().as_str() {
        "memory" if rest.is_empty() => Ok(Arc::new(MemoryStore::new())),
        "memory" => Err(bad("memory: takes nothing after the colon")),
        "sqlite" => {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(bad("no file path after sqlite:"));
            }
            Ok(Arc::new(SqliteStore::open(path).await?))
        }
        "postgres" | "postgresql" => Ok(Arc::new(PostgresStore::connect(url).await?)),
        other => Err(bad(&format!("unknown scheme {other:?}; {ACCEPTED}"))),
    }
}

/// `url` with any password in it replaced by `***`, for messages and logs: the password of
/// `scheme://user:password@…` (any scheme, so a mistyped one too) and the value of a
/// `password` parameter (`?password=…`, or `password=…` in PostgreSQL's `key=value` form).
/// [`StoreError::BadUrl`] carries the URL redacted so already.
pub fn redact_store_url(url: &str) -> String {
    crate::postgres::redact(url)
}
