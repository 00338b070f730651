//! Small helpers the SQL stores share: number conversions (SQL integers are signed 64-bit, the
//! trait's numbers are `u64`) and error descriptions that keep their causes.

use crate::error::StoreError;

/// A bound of a range query as a SQL integer: numbers past `i64::MAX` can never be stored, so a
/// bound beyond them means "everything".
pub(crate) fn bound(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A count limit (`LIMIT`) as a SQL integer.
pub(crate) fn limit(max: usize) -> i64 {
    i64::try_from(max).unwrap_or(i64::MAX)
}

/// A number to store: refused when SQL cannot hold it, naming `what` it is.
pub(crate) fn to_sql(value: u64, what: &str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| {
        StoreError::Failed(format!(
            "{what} {value} is above 2^63-1, which SQL cannot store"
        ))
    })
}

/// A stored number read back: negative ones were never written by shardik.
pub(crate) fn from_sql(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value)
        .map_err(|_| StoreError::Corrupt(format!("stored {what} {value} is negative")))
}

/// An error with its chain of causes, as one line (drivers often put the useful part, such as
/// "connection refused", in a source rather than in the error's own message). Only the
/// PostgreSQL driver's errors need it.
#[cfg(feature = "postgres")]
pub(crate) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}
