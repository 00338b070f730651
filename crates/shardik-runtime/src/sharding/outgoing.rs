//! What a kind's task sends to other nodes during one turn, in order, and how it leaves:
//! consecutive envelopes to the same node travel as one batch frame (the kind written once,
//! one step for the receiver), everything else as frames of their own.

use bytes::{Bytes, BytesMut};
use shardik_core::membership::UniqueAddress;
use shardik_wire::encode_batch_frame;

/// The most envelopes in one batch frame.
const MAX_BATCH_ENVELOPES: usize = 256;
/// The most bytes of envelopes in one batch frame: far below any sensible
/// `maximum-frame-size`, so that a batch never becomes too large to send. An envelope larger
/// than this travels in a batch of its own.
const MAX_BATCH_BYTES: usize = 64 * 1024;

enum Item {
    /// A complete sharding frame.
    Frame(Bytes),
    /// One envelope encoded as a batch item (`encode_batch_item`).
    Envelope(Bytes),
}

/// The messages a kind's task has yet to send, in the order it produced them.
#[derive(Default)]
pub(super) struct Outgoing {
    items: Vec<(UniqueAddress, Item)>,
    /// Envelopes are encoded into this buffer and split off it, so that most of them share an
    /// allocation.
    scratch: BytesMut,
}

impl Outgoing {
    /// A complete frame for `to`.
    pub fn frame(&mut self, to: UniqueAddress, frame: Bytes) {
        self.items.push((to, Item::Frame(frame)));
    }

    /// An envelope for `to`, which `encode` appends as a batch item to the buffer it is given.
    pub fn envelope(&mut self, to: UniqueAddress, encode: impl FnOnce(&mut BytesMut)) {
        if self.scratch.capacity() - self.scratch.len() < 512 {
            self.scratch.reserve(16 * 1024);
        }
        encode(&mut self.scratch);
        let item = self.scratch.split().freeze();
        self.items.push((to, Item::Envelope(item)));
    }

    /// Whether nothing waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Takes everything, as runs of frames to the same node in the order they were produced:
    /// consecutive envelopes of a run joined into batch frames of kind `kind`.
    pub fn take_runs(&mut self, kind: &str) -> Vec<(UniqueAddress, Vec<Bytes>)> {
        let mut runs: Vec<(UniqueAddress, Vec<Bytes>)> = Vec::new();
        let mut batch: Vec<Bytes> = Vec::new();
        let mut batch_bytes = 0;
        let flush = |batch: &mut Vec<Bytes>, frames: &mut Vec<Bytes>| {
            if !batch.is_empty() {
                frames.push(encode_batch_frame(kind, batch.iter().map(|b| &b[..])));
                batch.clear();
            }
        };
        for (to, item) in self.items.drain(..) {
            if runs.last().is_none_or(|(last, _)| *last != to) {
                if let Some((_, frames)) = runs.last_mut() {
                    flush(&mut batch, frames);
                }
                batch_bytes = 0;
                runs.push((to, Vec::new()));
            }
            let frames = &mut runs.last_mut().expect("pushed above").1;
            match item {
                Item::Frame(f) => {
                    flush(&mut batch, frames);
                    batch_bytes = 0;
                    frames.push(f);
                }
                Item::Envelope(e) => {
                    if batch.len() >= MAX_BATCH_ENVELOPES
                        || (!batch.is_empty() && batch_bytes + e.len() > MAX_BATCH_BYTES)
                    {
                        flush(&mut batch, frames);
                        batch_bytes = 0;
                    }
                    batch_bytes += e.len();
                    batch.push(e);
                }
            }
        }
        if let Some((_, frames)) = runs.last_mut() {
            flush(&mut batch, frames);
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_core::membership::Address;
    use shardik_wire::{ShardingBody, ShardingLimits, decode_sharding_bytes, encode_batch_item};

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("10.0.0.1", port), 7)
    }

    fn envelope(out: &mut Outgoing, to: u16, entity: &str, payload_len: usize) {
        out.envelope(node(to), |buf| {
            encode_batch_item(entity, "1", &vec![0u8; payload_len], None, buf)
        });
    }

    /// The entity ids each frame carries (`frame` for a frame that is not a batch).
    fn contents(frames: &[Bytes]) -> Vec<Vec<String>> {
        frames
            .iter()
            .map(|f| {
                match decode_sharding_bytes(f.clone(), &ShardingLimits::default())
                    .unwrap()
                    .body
                {
                    ShardingBody::Envelopes(envs) => {
                        envs.iter().map(|e| e.entity_id.to_string()).collect()
                    }
                    _ => vec!["frame".to_string()],
                }
            })
            .collect()
    }

    #[test]
    fn envelopes_in_a_row_to_one_node_share_a_frame_and_order_is_kept() {
        let mut out = Outgoing::default();
        envelope(&mut out, 1, "a", 1);
        envelope(&mut out, 1, "b", 1);
        let protocol = shardik_wire::encode_sharding(&shardik_wire::ShardingFrame {
            kind: "k".into(),
            body: ShardingBody::Protocol(shardik_core::sharding::Protocol::RegisterAck),
        });
        out.frame(node(1), protocol);
        envelope(&mut out, 1, "c", 1);
        envelope(&mut out, 2, "d", 1);
        envelope(&mut out, 1, "e", 1);
        let runs = out.take_runs("k");
        assert!(out.is_empty());
        let shape: Vec<(u16, Vec<Vec<String>>)> = runs
            .iter()
            .map(|(to, frames)| (to.address.port, contents(frames)))
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            shape,
            vec![
                (1, vec![s(&["a", "b"]), s(&["frame"]), s(&["c"])]),
                (2, vec![s(&["d"])]),
                (1, vec![s(&["e"])]),
            ]
        );
    }

    #[test]
    fn batches_are_bounded_in_envelopes_and_bytes() {
        let mut out = Outgoing::default();
        for i in 0..MAX_BATCH_ENVELOPES + 1 {
            envelope(&mut out, 1, &format!("e{i}"), 1);
        }
        let runs = out.take_runs("k");
        let sizes: Vec<usize> = contents(&runs[0].1).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![MAX_BATCH_ENVELOPES, 1]);

        for i in 0..3 {
            envelope(&mut out, 1, &format!("big{i}"), MAX_BATCH_BYTES / 2);
        }
        envelope(&mut out, 1, "huge", MAX_BATCH_BYTES * 2);
        let runs = out.take_runs("k");
        let sizes: Vec<usize> = contents(&runs[0].1).iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            vec![1, 1, 1, 1],
            "two halves plus headers exceed the bound"
        );
    }
}
