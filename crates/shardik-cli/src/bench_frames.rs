//! The bytes cluster sharding puts on the wire for the operations `bench sharding remote`
//! measures, so that its raw TCP baselines send frames of exactly the same sizes.
//!
//! A remote tell is one user frame carrying a `ShardingFrame` with an envelope (kind, entity
//! id, shard id, the command encoded by the kind's codec, no ask id); a remote ask is the same
//! envelope with an ask id, answered by a `ShardingFrame` with a reply (kind, ask id, the
//! encoded reply). The sizes here come from [`encode_sharding`] of those very frames, built as
//! `crates/shardik-runtime/src/sharding/kind.rs` builds them, with the default codec
//! ([`Postcard`]) the benchmark kind uses. They are payload sizes: the frame adds its 4-byte
//! length and kind byte on top, in the baseline as on the transport.

use std::num::NonZeroU64;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use shardik_runtime::sharding::{Codec, Postcard};
use shardik_wire::{ShardingBody, ShardingFrame, WireEnvelope, WireReply, encode_sharding};

/// The ask id the sizes are computed with. A node's ask ids count up from a random point in
/// the lower half of the u64 range (`sharding/pending/asks.rs`), so they are at least 2^56, and
/// take the 9 bytes of varint this one takes, with probability 127/128.
pub(crate) const TYPICAL_ASK_ID: u64 = 1 << 62;

/// Payload bytes of one entity's frames.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct OpSizes {
    /// A tell of the benchmark's command (`1`: add one).
    pub(crate) tell: usize,
    /// An ask of the benchmark's read (`0`).
    pub(crate) ask: usize,
    /// The reply to that ask, when the entity holds the value it was computed for.
    pub(crate) reply: usize,
}

/// The sizes for entity `entity` (in shard `shard`) of kind `kind` whose asks answer `value`.
pub(crate) fn op_sizes(
    kind: &str,
    entity: &str,
    shard: &str,
    value: u64,
) -> anyhow::Result<OpSizes> {
    let kind: Arc<str> = Arc::from(kind);
    let envelope = |cmd: u64, ask_id: Option<NonZeroU64>| -> anyhow::Result<usize> {
        let payload = Postcard.encode(&cmd).context("cannot encode the command")?;
        let frame = ShardingFrame {
            kind: Arc::clone(&kind),
            body: ShardingBody::Envelope(WireEnvelope {
                entity_id: entity.into(),
                shard: Arc::from(shard),
                payload: Bytes::from(payload),
                ask_id,
            }),
        };
        Ok(encode_sharding(&frame).len())
    };
    let reply = ShardingFrame {
        kind: Arc::clone(&kind),
        body: ShardingBody::Reply(WireReply {
            ask_id: TYPICAL_ASK_ID,
            result: Ok(Bytes::from(
                Postcard.encode(&value).context("cannot encode the reply")?,
            )),
        }),
    };
    Ok(OpSizes {
        tell: envelope(1, None)?,
        ask: envelope(0, NonZeroU64::new(TYPICAL_ASK_ID))?,
        reply: encode_sharding(&reply).len(),
    })
}

/// The mean of `sizes` picked by `pick`, for reports.
pub(crate) fn mean(sizes: &[OpSizes], pick: impl Fn(&OpSizes) -> usize) -> f64 {
    if sizes.is_empty() {
        return f64::NAN;
    }
    sizes.iter().map(pick).sum::<usize>() as f64 / sizes.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_wire::{ShardingLimits, decode_sharding};

    /// Counted by hand from `proto/sharding.proto`: a tell to `e7` in shard `7` of kind
    /// `bench-remote` is the kind field (1 key + 1 length + 12), the envelope's key and length
    /// (2), entity id (1 + 1 + 2), shard id (1 + 1 + 1) and payload (1 + 1 + 1: postcard of 1).
    #[test]
    fn a_tell_is_the_size_counted_by_hand() {
        let s = op_sizes("bench-remote", "e7", "7", 0).unwrap();
        assert_eq!(s.tell, 14 + 2 + 4 + 3 + 3);
        // The ask adds the ask id's key and its 9-byte varint.
        assert_eq!(s.ask, s.tell + 1 + 9);
        // The reply: kind (14), reply key and length (2), ask id (1 + 9), payload (1 + 1 + 1).
        assert_eq!(s.reply, 14 + 2 + 10 + 3);
    }

    #[test]
    fn longer_ids_and_larger_values_cost_their_bytes() {
        let short = op_sizes("bench-remote", "e7", "7", 0).unwrap();
        let long = op_sizes("bench-remote", "e999", "999", 1000).unwrap();
        assert_eq!(long.tell, short.tell + 4);
        assert_eq!(long.ask, short.ask + 4);
        // 1000 takes two bytes of varint in postcard.
        assert_eq!(long.reply, short.reply + 1);
    }

    /// The frames measured are frames the runtime accepts: they decode to what was encoded.
    #[test]
    fn the_sized_frames_decode_as_sharding_traffic() {
        let kind: Arc<str> = Arc::from("bench-remote");
        let frame = ShardingFrame {
            kind,
            body: ShardingBody::Envelope(WireEnvelope {
                entity_id: "e42".into(),
                shard: Arc::from("42"),
                payload: Bytes::from(Postcard.encode(&0u64).unwrap()),
                ask_id: NonZeroU64::new(TYPICAL_ASK_ID),
            }),
        };
        let bytes = encode_sharding(&frame);
        assert_eq!(
            bytes.len(),
            op_sizes("bench-remote", "e42", "42", 0).unwrap().ask
        );
        assert_eq!(
            decode_sharding(&bytes, &ShardingLimits::default()).unwrap(),
            frame
        );
    }

    #[test]
    fn the_mean_of_no_sizes_is_nan() {
        assert!(mean(&[], |s| s.tell).is_nan());
        let a = op_sizes("k", "a", "1", 0).unwrap();
        let b = op_sizes("k", "abc", "1", 0).unwrap();
        assert_eq!(mean(&[a, b], |s| s.tell), (a.tell + b.tell) as f64 / 2.0);
    }
}
