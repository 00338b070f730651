//! Reading events written by other versions of a program (Akka's read-side `EventAdapter`):
//! each event carries a manifest, `"{codec}/{version}"`, that says how it was encoded and
//! which version of the event type wrote it; an event of another version goes through the
//! kind's adapter, which turns it into zero or more events of the current type.

use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::codec::StorageCodec;

/// The version an event type has until the kind says otherwise, and the version events
/// written before manifests were stored are read as.
pub const FIRST_EVENT_VERSION: u32 = 1;

/// What an event's manifest says: the codec and the version of the event type that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EventManifest {
    pub(crate) codec: StorageCodec,
    pub(crate) version: u32,
}

impl EventManifest {
    /// The manifest as stored: `"cbor/2"`.
    pub(crate) fn render(self) -> Arc<str> {
        format!("{}/{}", self.codec.name(), self.version).into()
    }

    /// Reads a stored manifest. An empty one (an event written before the store kept
    /// manifests) is `default`'s codec at [`FIRST_EVENT_VERSION`].
    pub(crate) fn parse(manifest: &str, default: StorageCodec) -> Result<Self, String> {
        if manifest.is_empty() {
            return Ok(EventManifest {
                codec: default,
                version: FIRST_EVENT_VERSION,
            });
        }
        let bad = || format!("manifest {manifest:?} is not \"CODEC/VERSION\" (\"cbor/2\")");
        let (codec, version) = manifest.split_once('/').ok_or_else(bad)?;
        Ok(EventManifest {
            codec: StorageCodec::from_name(codec).ok_or_else(bad)?,
            version: version.parse().map_err(|_| bad())?,
        })
    }
}

/// An event as the journal holds it, handed to an event adapter: its bytes, the codec and
/// version it was written with, and where it is.
#[derive(Clone, Copy, Debug)]
pub struct JournalEvent<'a> {
    pub(crate) persistence_id: &'a str,
    pub(crate) seq: u64,
    pub(crate) manifest: EventManifest,
    pub(crate) payload: &'a [u8],
}

impl JournalEvent<'_> {
    /// Whose journal (`"{kind}|{entity id}"`).
    pub fn persistence_id(&self) -> &str {
        self.persistence_id
    }

    /// The event's sequence number in its journal.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The version of the event type that wrote it (`with_event_version` of the writer; 1 for
    /// events written before versions were stored).
    pub fn version(&self) -> u32 {
        self.manifest.version
    }

    /// The codec it was written with.
    pub fn codec(&self) -> StorageCodec {
        self.manifest.codec
    }

    /// The encoded event.
    pub fn payload(&self) -> &[u8] {
        self.payload
    }

    /// Decodes the event as `T` (typically the old version of the event type, kept for this)
    /// with the codec it was written with.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, EventAdapterError> {
        self.manifest.codec.decode(self.payload).map_err(|e| {
            EventAdapterError(format!(
                "version {} ({}) does not decode as {}: {e}",
                self.manifest.version,
                self.manifest.codec.name(),
                std::any::type_name::<T>()
            ))
        })
    }
}

/// Why an adapter could not turn a stored event into current ones: recovery of the entity
/// fails with this text (its asker gets `EntityFailed`), and nothing of the journal is lost.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EventAdapterError(pub String);

/// A kind's adapter: a stored event of another version into events of the current type.
pub(crate) type EventAdapterFn<E> =
    Arc<dyn Fn(&JournalEvent<'_>) -> Result<Vec<E>, EventAdapterError> + Send + Sync>;

/// How one kind reads its journal: the version it writes, the codec of events without a
/// manifest, and its adapter, if any.
pub(crate) struct EventReader<E> {
    pub(crate) current: EventManifest,
    pub(crate) written_manifest: Arc<str>,
    pub(crate) adapter: Option<EventAdapterFn<E>>,
}

impl<E: DeserializeOwned> EventReader<E> {
    pub(crate) fn new(current: EventManifest, adapter: Option<EventAdapterFn<E>>) -> Self {
        EventReader {
            written_manifest: current.render(),
            current,
            adapter,
        }
    }

    /// The current events `stored` stands for: itself decoded, when it is of the current
    /// version or the kind has no adapter; what the adapter makes of it otherwise.
    pub(crate) fn read(
        &self,
        pid: &str,
        stored: &shardik_persistence::StoredEvent,
    ) -> Result<Vec<E>, String> {
        let at = |e: &dyn std::fmt::Display| format!("{pid}: event {}: {e}", stored.seq);
        let manifest =
            EventManifest::parse(&stored.manifest, self.current.codec).map_err(|e| at(&e))?;
        let event = JournalEvent {
            persistence_id: pid,
            seq: stored.seq,
            manifest,
            payload: &stored.payload,
        };
        match &self.adapter {
            Some(adapter) if manifest.version != self.current.version => {
                adapter(&event).map_err(|e| at(&e))
            }
            _ => event.decode::<E>().map(|e| vec![e]).map_err(|e| at(&e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_render_and_parse_back() {
        for codec in [
            StorageCodec::Postcard,
            StorageCodec::Json,
            StorageCodec::Cbor,
        ] {
            let manifest = EventManifest { codec, version: 7 };
            let parsed = EventManifest::parse(&manifest.render(), StorageCodec::Json);
            assert_eq!(parsed, Ok(manifest));
        }
        assert_eq!(
            &*EventManifest {
                codec: StorageCodec::Cbor,
                version: 2
            }
            .render(),
            "cbor/2"
        );
    }

    #[test]
    fn an_empty_manifest_is_the_kinds_codec_at_the_first_version() {
        let parsed = EventManifest::parse("", StorageCodec::Json).unwrap();
        assert_eq!(
            parsed,
            EventManifest {
                codec: StorageCodec::Json,
                version: FIRST_EVENT_VERSION
            }
        );
    }

    #[test]
    fn a_manifest_of_another_shape_is_an_error_naming_it() {
        for bad in ["cbor", "xml/1", "cbor/", "cbor/two", "cbor/-1", "/1"] {
            let error = EventManifest::parse(bad, StorageCodec::Cbor).unwrap_err();
            assert!(error.contains(bad), "{error}");
        }
    }
}
