//! Opening a store from a URL, as configuration names it.

use std::sync::Arc;

use crate::error::StoreError;
use crate::memory::MemoryStore;
use crate::store::Store;

/// The URL forms [`open_store`] accepts, for error messages.
const ACCEPTED: &str = "expected memory:, sqlite:PATH, postgres://… or postgresql://…";

/// Opens the store a URL names:
///
/// - `memory:` — a new, empty [`MemoryStore`] (gone when the process ends);
/// - `sqlite:PATH` — a `SqliteStore` in the file `PATH` (relative to the working directory
///   unless absolute; `sqlite://PATH` is read the same, so `sqlite:///var/lib/x.db` is
///   `/var/lib/x.db`);
/// - `postgres://…` or `postgresql://…` — a `PostgresStore` (see `PostgresStore::connect`).
///
/// Anything else is [`StoreError::BadUrl`], and so is the URL of a store this build left out
/// (the crate's `sqlite` or `postgres` feature off), naming the feature; the other errors are
/// those of the store opened.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    let (scheme, rest) = url
        .split_once(':')
        .ok_or_else(|| bad_url(url, &format!("no scheme; {ACCEPTED}")))?;
    match scheme.to_ascii_lowercase().as_str() {
        "memory" if rest.is_empty() => Ok(Arc::new(MemoryStore::new())),
        "memory" => Err(bad_url(url, "memory: takes nothing after the colon")),
        "sqlite" => open_sqlite(url, rest).await,
        "postgres" | "postgresql" => open_postgres(url).await,
        other => Err(bad_url(
            url,
            &format!("unknown scheme {other:?}; {ACCEPTED}"),
        )),
    }
}

/// [`StoreError::BadUrl`] for `url`, redacted, and `why`.
fn bad_url(url: &str, why: &str) -> StoreError {
    StoreError::BadUrl {
        url: redact_store_url(url),
        why: why.to_string(),
    }
}

/// The refusal of a URL of a store that this build left out.
#[cfg(any(not(feature = "sqlite"), not(feature = "postgres")))]
fn left_out(url: &str, store: &str, feature: &str) -> StoreError {
    bad_url(
        url,
        &format!(
            "this build has no {store} store: shardik-persistence was built without its \
             `{feature}` feature"
        ),
    )
}

/// Opens the SQLite store of `url`, `sqlite:PATH` (`rest` is what follows the colon).
#[cfg(feature = "sqlite")]
async fn open_sqlite(url: &str, rest: &str) -> Result<Arc<dyn Store>, StoreError> {
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.is_empty() {
        return Err(bad_url(url, "no file path after sqlite:"));
    }
    Ok(Arc::new(crate::sqlite::SqliteStore::open(path).await?))
}

#[cfg(not(feature = "sqlite"))]
async fn open_sqlite(url: &str, _rest: &str) -> Result<Arc<dyn Store>, StoreError> {
    Err(left_out(url, "SQLite", "sqlite"))
}

/// Opens the PostgreSQL store of `url`.
#[cfg(feature = "postgres")]
async fn open_postgres(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(
        crate::postgres::PostgresStore::connect(url).await?,
    ))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Err(left_out(url, "PostgreSQL", "postgres"))
}

/// `url` with any password in it replaced by `***`, for messages and logs: the password of
/// `scheme://user:password@…` (any scheme, so a mistyped one too) and the value of a
/// `password` parameter (`?password=…`, or `password=…` in PostgreSQL's `key=value` form).
/// [`StoreError::BadUrl`] carries the URL redacted so already.
pub fn redact_store_url(url: &str) -> String {
    crate::store_url::redact(url)
}
