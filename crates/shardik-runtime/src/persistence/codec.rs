//! How events, snapshots and durable states are encoded in the store. Separate from the
//! network codec of a kind: what is stored must stay readable by later versions of the
//! program, so the choice is the user's, per kind.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The encoding of stored values, chosen per kind (`EventSourcedKind::with_storage_codec`).
/// Each event records the codec it was written with (its manifest), so a kind may change
/// codec and still read its older events; snapshots are read with the kind's current codec.
/// Which changes each codec tolerates: docs/EVOLUTION.md.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageCodec {
    /// postcard: the most compact and fastest; fields by position, so a changed type needs
    /// an event adapter for its old events.
    #[default]
    Postcard,
    /// JSON: larger and slower, readable, tolerant of added fields (with `#[serde(default)]`)
    /// and unknown ones.
    Json,
    /// CBOR: self-describing like JSON (fields and variants by name), smaller and faster to
    /// decode.
    Cbor,
}

impl StorageCodec {
    /// The codec's name in event manifests (`"postcard"`, `"json"`, `"cbor"`).
    pub fn name(self) -> &'static str {
        match self {
            StorageCodec::Postcard => "postcard",
            StorageCodec::Json => "json",
            StorageCodec::Cbor => "cbor",
        }
    }

    /// The codec called `name` in a manifest.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "postcard" => Some(StorageCodec::Postcard),
            "json" => Some(StorageCodec::Json),
            "cbor" => Some(StorageCodec::Cbor),
            _ => None,
        }
    }

    /// Encodes `value`.
    pub fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, String> {
        match self {
            StorageCodec::Postcard => postcard::to_allocvec(value).map_err(|e| e.to_string()),
            StorageCodec::Json => serde_json::to_vec(value).map_err(|e| e.to_string()),
            StorageCodec::Cbor => crate::cbor::encode(value),
        }
    }

    /// Decodes a value of type `T`.
    pub fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, String> {
        match self {
            StorageCodec::Postcard => postcard::from_bytes(bytes).map_err(|e| e.to_string()),
            StorageCodec::Json => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
            StorageCodec::Cbor => crate::cbor::decode(bytes),
        }
    }
}
