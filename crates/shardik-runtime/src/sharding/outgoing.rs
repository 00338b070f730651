//! What a kind's task sends to other nodes during one turn, in order, and how it leaves:
//! consecutive envelopes to the same node travel as one batch frame (the kind written once,
//! one step for the receiver), everything else as frames of their own.
//!
//! Envelopes are encoded straight into their batch frame ([`BatchFrameBuilder`]): one copy of
//! each, from the sender into the frame that leaves, and no allocation of its own.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use shardik_core::membership::UniqueAddress;
use shardik_wire::BatchFrameBuilder;

/// The most envelopes in one batch frame.
const MAX_BATCH_ENVELOPES: usize = 256;
/// The most bytes of envelopes in one batch frame: far below any sensible
/// `maximum-frame-size`, so that a batch never becomes too large to send. An envelope larger
/// than this travels in a batch of its own.
const MAX_BATCH_BYTES: usize = 64 * 1024;
/// The buffer batches are written into grows by at least this much at a time, so that the
/// frames of a busy turn share few allocations.
const BUFFER_CHUNK: usize = 16 * 1024;

/// The batch frame being written, for the node of the last run.
struct OpenBatch {
    builder: BatchFrameBuilder,
    envelopes: usize,
}

/// The messages a kind's task has yet to send, in the order it produced them.
pub(super) struct Outgoing {
    /// The kind every batch frame names.
    kind: Arc<str>,
    /// Runs of frames to one node, in order; envelopes of the last run may still be in `open`.
    runs: Vec<(UniqueAddress, Vec<Bytes>)>,
    open: Option<OpenBatch>,
    /// Holds the open batch (and nothing else); each finished frame is split off it.
    buf: BytesMut,
}

impl Outgoing {
    /// Nothing to send yet, for the kind `kind`.
    pub fn new(kind: Arc<str>) -> Self {
        Outgoing {
            kind,
            runs: Vec::new(),
            open: None,
            buf: BytesMut::new(),
        }
    }

    /// A complete frame for `to`.
    pub fn frame(&mut self, to: &UniqueAddress, frame: Bytes) {
        self.close_batch();
        self.run_for(to).push(frame);
    }

    /// An envelope for `to` of `len` bytes, which `encode` appends as a batch item
    /// (`encode_batch_item`) to the buffer it is given.
    pub fn envelope(&mut self, to: &UniqueAddress, len: usize, encode: impl FnOnce(&mut BytesMut)) {
        self.run_for(to);
        if let Some(open) = &self.open {
            let body = open.builder.body_len(&self.buf);
            if open.envelopes >= MAX_BATCH_ENVELOPES
                || (open.envelopes > 0 && body + len > MAX_BATCH_BYTES)
            {
                self.close_batch();
            }
        }
        let mut open = match self.open.take() {
            Some(open) => open,
            None => {
                let room = len + 64 + self.kind.len();
                if self.buf.capacity() < room {
                    self.buf.reserve(room.max(BUFFER_CHUNK));
                }
                OpenBatch {
                    builder: BatchFrameBuilder::begin(&self.kind, &mut self.buf),
                    envelopes: 0,
                }
            }
        };
        self.buf.reserve(len);
        let before = self.buf.len();
        encode(&mut self.buf);
        debug_assert_eq!(
            self.buf.len() - before,
            len,
            "the envelope's announced length"
        );
        open.envelopes += 1;
        self.open = Some(open);
    }

    /// How many envelopes the open batch holds (0 if none is open): more envelopes for its
    /// node would join it rather than go out in a frame of their own.
    pub fn open_batch_len(&self) -> usize {
        self.open.as_ref().map_or(0, |open| open.envelopes)
    }

    /// Whether nothing waits to be sent.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Takes everything, as runs of frames to the same node in the order they were produced.
    pub fn take_runs(&mut self) -> Vec<(UniqueAddress, Vec<Bytes>)> {
        self.close_batch();
        std::mem::take(&mut self.runs)
    }

    /// The last run's frames, or those of a new run (the open batch finished first) when the
    /// last is for another node.
    fn run_for(&mut self, to: &UniqueAddress) -> &mut Vec<Bytes> {
        if self.runs.last().is_none_or(|(last, _)| last != to) {
            self.close_batch();
            self.runs.push((to.clone(), Vec::new()));
        }
        &mut self.runs.last_mut().expect("pushed above").1
    }

    /// Finishes the open batch, if any, as the last frame of the last run.
    fn close_batch(&mut self) {
        if let Some(open) = self.open.take() {
            let frame = open.builder.finish(&self.kind, self.buf.split());
            self.runs
                .last_mut()
                .expect("a batch is open only within a run")
                .1
                .push(frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_core::membership::Address;
    use shardik_wire::{
        ShardingBody, ShardingLimits, batch_item_len, decode_sharding_bytes, encode_batch_item,
    };

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("10.0.0.1", port), 7)
    }

    fn envelope(out: &mut Outgoing, to: u16, entity: &str, payload_len: usize) {
        let len = batch_item_len(entity, "1", payload_len, None);
        out.envelope(&node(to), len, |buf| {
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
        let mut out = Outgoing::new("k".into());
        envelope(&mut out, 1, "a", 1);
        envelope(&mut out, 1, "b", 1);
        let protocol = shardik_wire::encode_sharding(&shardik_wire::ShardingFrame {
            kind: "k".into(),
            body: ShardingBody::Protocol(shardik_core::sharding::Protocol::RegisterAck),
        });
        out.frame(&node(1), protocol);
        envelope(&mut out, 1, "c", 1);
        envelope(&mut out, 2, "d", 1);
        envelope(&mut out, 1, "e", 1);
        let runs = out.take_runs();
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
        let mut out = Outgoing::new("k".into());
        for i in 0..MAX_BATCH_ENVELOPES + 1 {
            envelope(&mut out, 1, &format!("e{i}"), 1);
        }
        let runs = out.take_runs();
        let sizes: Vec<usize> = contents(&runs[0].1).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![MAX_BATCH_ENVELOPES, 1]);

        for i in 0..3 {
            envelope(&mut out, 1, &format!("big{i}"), MAX_BATCH_BYTES / 2);
        }
        envelope(&mut out, 1, "huge", MAX_BATCH_BYTES * 2);
        let runs = out.take_runs();
        let sizes: Vec<usize> = contents(&runs[0].1).iter().map(Vec::len).collect();
        assert_eq!(
            sizes,
            vec![1, 1, 1, 1],
            "two halves plus headers exceed the bound"
        );
    }
}
