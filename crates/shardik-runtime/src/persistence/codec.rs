//! How events, snapshots and durable states are encoded in the store. Separate from the
//! network codec of a kind: what is stored must stay readable by later versions of the
//! program, so the choice is the user's, per kind.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The encoding of stored values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum StorageCodec {
    /// postcard: compact; a changed type needs a new event type or a migration.
    #[default]
    Postcard,
    /// JSON: larger, readable, tolerant of added optional fields.
    Json,
}

impl StorageCodec {
    pub(crate) fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, String> {
        match self {
            StorageCodec::Postcard => postcard::to_allocvec(value).map_err(|e| e.to_string()),
            StorageCodec::Json => serde_json::to_vec(value).map_err(|e| e.to_string()),
        }
    }

    pub(crate) fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, String> {
        match self {
            StorageCodec::Postcard => postcard::from_bytes(bytes).map_err(|e| e.to_string()),
            StorageCodec::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        }
    }
}
