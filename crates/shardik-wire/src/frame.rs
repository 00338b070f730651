//! Framing of a TCP stream.
//!
//! Every frame is a 4-byte big-endian length `N`, then `N` bytes: one kind byte and the
//! payload (so `N >= 1`, and `N` is at most the codec's maximum frame size).
//!
//! ```text
//! +----------------+------+---------------------+
//! | N: u32 BE      | kind | payload (N-1 bytes) |
//! +----------------+------+---------------------+
//! ```
//!
//! | kind | frame | payload |
//! |------|-------|---------|
//! | 1 | [`Frame::Handshake`] | `shardik.transport.v1.Handshake` protobuf |
//! | 2 | [`Frame::HandshakeAck`] | `shardik.transport.v1.HandshakeAck` protobuf |
//! | 3 | [`Frame::Membership`] | `shardik.membership.v1.MembershipMessage` protobuf ([`crate::decode_message`]) |
//! | 4 | [`Frame::User`] | opaque here; `shardik.sharding.v1.ShardingFrame` protobuf ([`crate::decode_sharding`]) |
//! | 5 | [`Frame::Close`] | UTF-8 reason |
//!
//! [`FrameCodec`] is a pure incremental decoder/encoder over [`BytesMut`], independent of any
//! runtime. Membership payloads stay undecoded bytes in the frame, so that the receiver
//! decides when (and whether) to pay for decompressing a gossip state.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use shardik_core::membership::Message;

use crate::codec::{DecodeError, encode_message};
use crate::handshake::{Handshake, HandshakeReply};

/// Bytes of the length prefix.
pub const LENGTH_PREFIX: usize = 4;

/// Default maximum frame length (`N`, kind byte included): 8 MiB.
pub const DEFAULT_MAX_FRAME_SIZE: usize = 8 * 1024 * 1024;

/// The most [`FrameCodec::decode`] reserves at once for the rest of a frame. A length prefix
/// only announces bytes; the buffer grows with the bytes that actually arrive, in steps of at
/// most this, so a peer that announces large frames and stalls costs what it sent, not what it
/// announced.
pub const RESERVE_STEP: usize = 64 * 1024;

/// The kind byte of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// A [`Handshake`].
    Handshake = 1,
    /// A [`HandshakeReply`].
    HandshakeAck = 2,
    /// A membership message.
    Membership = 3,
    /// Opaque user traffic.
    User = 4,
    /// The sender is closing the connection.
    Close = 5,
}

impl FrameKind {
    /// The kind with this byte, if any.
    pub fn from_byte(b: u8) -> Option<FrameKind> {
        Some(match b {
            1 => FrameKind::Handshake,
            2 => FrameKind::HandshakeAck,
            3 => FrameKind::Membership,
            4 => FrameKind::User,
            5 => FrameKind::Close,
            _ => return None,
        })
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// Opens a connection.
    Handshake(Handshake),
    /// Answers a handshake.
    HandshakeAck(HandshakeReply),
    /// An encoded membership message; decode it with [`crate::decode_message`].
    Membership(Bytes),
    /// User traffic, opaque to the frame layer: a sharding frame, decoded with
    /// [`crate::decode_sharding_bytes`] (or [`crate::decode_sharding`]).
    User(Bytes),
    /// The sender closes the connection, for this reason.
    Close(String),
}

impl Frame {
    /// A membership frame carrying `m`.
    pub fn membership(m: &Message) -> Frame {
        Frame::Membership(encode_message(m))
    }

    /// This frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Handshake(_) => FrameKind::Handshake,
            Frame::HandshakeAck(_) => FrameKind::HandshakeAck,
            Frame::Membership(_) => FrameKind::Membership,
            Frame::User(_) => FrameKind::User,
            Frame::Close(_) => FrameKind::Close,
        }
    }
}

/// Why a frame could not be decoded or encoded. After a decode error the stream is out of
/// step and the connection must be closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The length prefix (or the frame to encode) exceeds the maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The frame length `N`.
        len: u64,
        /// The configured maximum.
        max: usize,
    },
    /// The length prefix is 0 (a frame has at least its kind byte).
    #[error("frame length 0 (a frame has at least a kind byte)")]
    Empty,
    /// The kind byte is not one of the known kinds.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// The payload of a handshake, handshake-ack or close frame is invalid.
    #[error("invalid {kind:?} frame: {source}")]
    Payload {
        /// The frame kind.
        kind: FrameKind,
        /// What was wrong.
        source: DecodeError,
    },
}

/// Incremental frame decoder and encoder with a maximum frame size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameCodec {
    max_frame_size: usize,
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec::new(DEFAULT_MAX_FRAME_SIZE)
    }
}

impl FrameCodec {
    /// A codec accepting frames of at most `max_frame_size` bytes (length `N`, kind byte
    /// included, prefix excluded). A maximum of 0 is raised to 1.
    pub fn new(max_frame_size: usize) -> Self {
        FrameCodec {
            max_frame_size: max_frame_size.max(1),
        }
    }

    /// The maximum frame length.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Takes one frame off the front of `src`, or returns `Ok(None)` if `src` does not hold a
    /// whole frame yet (reserving room for more of it: at most [`RESERVE_STEP`] bytes, never
    /// past the announced end, so the buffer grows with what arrives rather than with what the
    /// prefix announces). A length over the maximum, a zero length or an unknown kind is
    /// rejected as soon as the prefix (and kind byte) arrive, before anything is allocated for
    /// the payload.
    pub fn decode(&self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if src.len() < LENGTH_PREFIX {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]);
        let len = usize::try_from(len).map_err(|_| FrameError::TooLarge {
            len: u64::from(len),
            max: self.max_frame_size,
        })?;
        if len == 0 {
            return Err(FrameError::Empty);
        }
        if len > self.max_frame_size {
            return Err(FrameError::TooLarge {
                len: len as u64,
                max: self.max_frame_size,
            });
        }
        if src.len() > LENGTH_PREFIX {
            let kind = src[LENGTH_PREFIX];
            if FrameKind::from_byte(kind).is_none() {
                return Err(FrameError::UnknownKind(kind));
            }
        }
        let total = LENGTH_PREFIX + len;
        if src.len() < total {
            src.reserve((total - src.len()).min(RESERVE_STEP));
            return Ok(None);
        }
        src.advance(LENGTH_PREFIX);
        let mut body = src.split_to(len);
        let kind_byte = body.get_u8();
        let kind = FrameKind::from_byte(kind_byte).ok_or(FrameError::UnknownKind(kind_byte))?;
        let payload = body.freeze();
        let bad = |source| FrameError::Payload { kind, source };
        Ok(Some(match kind {
            FrameKind::Handshake => Frame::Handshake(Handshake::decode(&payload).map_err(bad)?),
            FrameKind::HandshakeAck => {
                Frame::HandshakeAck(HandshakeReply::decode(&payload).map_err(bad)?)
            }
            FrameKind::Membership => Frame::Membership(payload),
            FrameKind::User => Frame::User(payload),
            FrameKind::Close => Frame::Close(
                String::from_utf8(payload.to_vec())
                    .map_err(|_| bad(DecodeError::InvalidUtf8("close reason")))?,
            ),
        }))
    }

    /// Appends `frame` to `dst`. Fails (writing nothing) if the frame would exceed the maximum
    /// frame size, since the peer would reject it.
    pub fn encode(&self, frame: &Frame, dst: &mut BytesMut) -> Result<(), FrameError> {
        let owned;
        let payload: &[u8] = match frame {
            Frame::Handshake(h) => {
                owned = h.encode();
                &owned
            }
            Frame::HandshakeAck(r) => {
                owned = r.encode();
                &owned
            }
            Frame::Membership(b) | Frame::User(b) => b,
            Frame::Close(reason) => reason.as_bytes(),
        };
        let len = payload.len() + 1;
        if len > self.max_frame_size || u32::try_from(len).is_err() {
            return Err(FrameError::TooLarge {
                len: len as u64,
                max: self.max_frame_size,
            });
        }
        dst.reserve(LENGTH_PREFIX + len);
        dst.put_u32(len as u32);
        dst.put_u8(frame.kind() as u8);
        dst.put_slice(payload);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user frame's bytes, prefix included, with a payload of `len` bytes.
    fn user_frame(len: usize) -> BytesMut {
        let mut out = BytesMut::new();
        let payload = Bytes::from((0..len).map(|i| i as u8).collect::<Vec<u8>>());
        FrameCodec::new(DEFAULT_MAX_FRAME_SIZE)
            .encode(&Frame::User(payload), &mut out)
            .expect("fits");
        out
    }

    #[test]
    fn a_large_announced_frame_costs_what_arrived_not_what_was_announced() {
        let codec = FrameCodec::new(DEFAULT_MAX_FRAME_SIZE);
        let announced = DEFAULT_MAX_FRAME_SIZE - 1;
        let mut buf = BytesMut::new();
        buf.put_u32(announced as u32);
        buf.put_u8(FrameKind::User as u8);
        buf.put_slice(&[7; 100]);
        assert_eq!(codec.decode(&mut buf), Ok(None));
        assert!(
            buf.capacity() <= 2 * RESERVE_STEP,
            "capacity {} after 105 bytes of a frame announcing {announced}",
            buf.capacity()
        );
        // Still bounded after several rounds of "decode, then read what the room allows".
        for _ in 0..3 {
            let room = buf.capacity() - buf.len();
            buf.put_slice(&vec![7; room]);
            assert_eq!(codec.decode(&mut buf), Ok(None));
        }
        assert!(
            buf.capacity() <= 2 * (buf.len() + RESERVE_STEP),
            "capacity {} for {} bytes received",
            buf.capacity(),
            buf.len()
        );
        assert!(buf.capacity() < announced / 4);
    }

    #[test]
    fn a_frame_fed_in_small_pieces_decodes_whole() {
        let codec = FrameCodec::new(DEFAULT_MAX_FRAME_SIZE);
        let whole = user_frame(3 * RESERVE_STEP + 17);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        for chunk in whole.chunks(1000) {
            buf.put_slice(chunk);
            while let Some(f) = codec.decode(&mut buf).expect("well-formed") {
                frames.push(f);
            }
        }
        assert_eq!(frames.len(), 1);
        let Frame::User(payload) = &frames[0] else {
            panic!("not a user frame")
        };
        assert_eq!(payload.len(), 3 * RESERVE_STEP + 17);
        assert!(payload.iter().enumerate().all(|(i, b)| *b == i as u8));
        assert!(buf.is_empty());
    }

    #[test]
    fn reserving_never_goes_past_the_announced_end() {
        let codec = FrameCodec::new(DEFAULT_MAX_FRAME_SIZE);
        let whole = user_frame(10);
        let mut buf = BytesMut::new();
        buf.put_slice(&whole[..6]);
        assert_eq!(codec.decode(&mut buf), Ok(None));
        assert!(buf.capacity() < 4096, "capacity {}", buf.capacity());
    }

    #[test]
    fn oversized_zero_and_unknown_frames_are_refused_at_the_prefix() {
        let codec = FrameCodec::new(1024);
        let mut buf = BytesMut::new();
        buf.put_u32(1025);
        assert_eq!(
            codec.decode(&mut buf),
            Err(FrameError::TooLarge {
                len: 1025,
                max: 1024
            })
        );
        let mut buf = BytesMut::new();
        buf.put_u32(0);
        assert_eq!(codec.decode(&mut buf), Err(FrameError::Empty));
        let mut buf = BytesMut::new();
        buf.put_u32(10);
        buf.put_u8(99);
        assert_eq!(codec.decode(&mut buf), Err(FrameError::UnknownKind(99)));
    }
}
