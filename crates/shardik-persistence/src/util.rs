//! Small helpers the SQL stores share: number conversions (SQL integers are signed 64-bit, the
//! trait's numbers are `u64`) and error descriptions that keep their causes.

use crate::delivery::{MarkChange, QueuedMessage};
use crate::error::{StoreError, WriteRefused, WriteResult};

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

/// Refuses delivery marks whose numbers SQL cannot store, as a malformed write of
/// `persistence_id` (no producer hands out such numbers, so only a broken writer sends them).
pub(crate) fn check_mark_numbers(persistence_id: &str, marks: &[MarkChange]) -> WriteResult {
    for change in marks {
        let MarkChange::Set(mark) = change else {
            continue;
        };
        let numbers = [
            ("epoch", mark.epoch),
            ("stream", mark.stream),
            ("sequence number", mark.seq),
            ("time", mark.written_at_ms),
        ];
        if let Some((what, value)) = numbers.iter().find(|(_, v)| i64::try_from(*v).is_err()) {
            return Err(WriteRefused::Malformed {
                persistence_id: persistence_id.into(),
                why: format!(
                    "the delivery mark of producer {:?} has {what} {value}, above 2^63-1",
                    mark.producer
                ),
            });
        }
    }
    Ok(())
}

/// Refuses queue messages whose numbers SQL cannot store, before anything is written.
pub(crate) fn check_queued_numbers(
    producer: &str,
    messages: &[QueuedMessage],
) -> Result<(), StoreError> {
    for m in messages {
        for (what, value) in [
            ("epoch", m.epoch),
            ("stream", m.stream),
            ("sequence number", m.seq),
        ] {
            if i64::try_from(value).is_err() {
                return Err(StoreError::InvalidArgument(format!(
                    "producer {producer:?}: a queued message has {what} {value}, above 2^63-1"
                )));
            }
        }
    }
    Ok(())
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

/// One row of a producer queue, as the SQL stores read it back, appended to `messages`
/// (ordered by stream), sharing the kind's name with the message before it when they agree:
/// a queue's messages mostly go to one kind.
pub(crate) struct QueueRow<'a> {
    pub(crate) kind: &'a str,
    pub(crate) entity: &'a str,
    pub(crate) epoch: i64,
    pub(crate) stream: i64,
    pub(crate) seq: i64,
    pub(crate) payload: Vec<u8>,
}

impl QueueRow<'_> {
    /// Appends the row to `messages`.
    pub(crate) fn push_to(self, messages: &mut Vec<QueuedMessage>) -> Result<(), StoreError> {
        let kind = match messages.last() {
            Some(last) if &*last.kind == self.kind => std::sync::Arc::clone(&last.kind),
            _ => std::sync::Arc::from(self.kind),
        };
        messages.push(QueuedMessage {
            kind,
            entity: std::sync::Arc::from(self.entity),
            epoch: from_sql(self.epoch, "queued epoch")?,
            stream: from_sql(self.stream, "queued stream")?,
            seq: from_sql(self.seq, "queued sequence number")?,
            payload: bytes::Bytes::from(self.payload),
        });
        Ok(())
    }
}
