//! How commands and replies become bytes for the network: the [`Codec`] trait, the default
//! [`Postcard`], the self-describing [`Cbor`] for types that change during a rolling update,
//! and the [`CodecError`] either fails with.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Turns commands and replies into bytes for the network. Local messages are never encoded.
pub trait Codec: Send + Sync + 'static {
    /// Encodes a value.
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, CodecError>;
    /// Decodes a value.
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, CodecError>;
    /// Encodes a value at the end of `out`. Commands for other nodes are encoded this way,
    /// into a buffer the region reuses; the default calls [`encode`](Self::encode) and
    /// copies, and a codec that can write into a `Vec` should do so instead.
    fn encode_into<T: Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(&self.encode(value)?);
        Ok(())
    }
}

/// The default codec: postcard, a compact, stable serde format.
#[derive(Copy, Clone, Debug, Default)]
pub struct Postcard;

impl Codec for Postcard {
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        postcard::to_allocvec(value).map_err(|e| CodecError(e.to_string()))
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, CodecError> {
        postcard::from_bytes(bytes).map_err(|e| CodecError(e.to_string()))
    }

    fn encode_into<T: Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let written = postcard::to_extend(value, std::mem::take(out));
        *out = written.map_err(|e| CodecError(e.to_string()))?;
        Ok(())
    }
}

/// CBOR (RFC 8949) through serde: a self-describing codec for commands and replies whose types
/// change while a cluster runs two versions of a program (a rolling update). Fields travel by
/// name, so a reader ignores fields it does not know and fills missing ones marked
/// `#[serde(default)]`; enum variants travel by name. Larger and slower to decode than
/// [`Postcard`] (docs/PERFORMANCE.md, "Codecs"), which stays the default for types that never
/// change while messages are in flight. Which changes are safe: docs/EVOLUTION.md.
///
/// ```
/// # use shardik_runtime::facade as shardik;
/// use shardik::{Cbor, Codec};
///
/// #[derive(serde::Serialize)]
/// struct SetV1 { name: String }
/// #[derive(serde::Deserialize, Debug, PartialEq)]
/// struct SetV2 { name: String, #[serde(default)] note: Option<String> }
///
/// let bytes = Cbor.encode(&SetV1 { name: "a".into() }).unwrap();
/// let read: SetV2 = Cbor.decode(&bytes).unwrap();
/// assert_eq!(read, SetV2 { name: "a".into(), note: None });
/// ```
#[derive(Copy, Clone, Debug, Default)]
pub struct Cbor;

impl Codec for Cbor {
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        crate::cbor::encode(value).map_err(CodecError)
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, CodecError> {
        crate::cbor::decode(bytes).map_err(CodecError)
    }

    fn encode_into<T: Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        crate::cbor::encode_into(value, out).map_err(CodecError)
    }
}

/// A value could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("codec error: {0}")]
pub struct CodecError(pub String);
