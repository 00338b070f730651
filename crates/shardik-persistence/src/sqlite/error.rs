//! SQLite's errors as the store's, naming the file and what was being done.

use std::path::Path;

use rusqlite::ErrorCode;

use crate::error::StoreError;

/// Maps a SQLite error to the store's errors, naming the file and what was being done.
pub(super) fn map_error(path: &Path, doing: &str, e: rusqlite::Error) -> StoreError {
    let why = format!("{}: {doing}: {e}", path.display());
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt(why),
        Some(
            ErrorCode::CannotOpen
            | ErrorCode::PermissionDenied
            | ErrorCode::ReadOnly
            | ErrorCode::NoLargeFileSupport,
        ) => StoreError::Unavailable(why),
        _ => StoreError::Failed(why),
    }
}

/// Attaches the file and the step to a SQLite error.
pub(super) trait Ctx<T> {
    fn ctx(self, path: &Path, doing: &str) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for rusqlite::Result<T> {
    fn ctx(self, path: &Path, doing: &str) -> Result<T, StoreError> {
        self.map_err(|e| map_error(path, doing, e))
    }
}
