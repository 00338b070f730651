//! The reply fast path: a `ShardingFrame` holding a `Reply`, written by hand like the
//! envelopes (`encode_envelope`), because every remote ask makes one.
//!
//! Through the generated types a reply cost an owned copy of the kind's name, a `Vec` grown
//! by prost and its conversion to `Bytes`, plus prost's generic field walk: about 1,400
//! instructions per reply on the handling node (callgrind, `bench sharding remote`, ask64).
//! Here it is one buffer of exactly the frame's size, each key written with its varint in one
//! append, in prost's field order so the bytes are identical (the tests compare them).

use bytes::{BufMut, Bytes, BytesMut};

use super::envelope::{
    FRAME_KIND, WIRE_LEN, WIRE_VARINT, key, len_field_len, put_key_varint, put_len_field,
    varint_len,
};
use super::message::{ReplyError, WireReply};

/// Field numbers from `proto/sharding.proto`.
const FRAME_REPLY: u8 = 3;
const REPLY_ASK_ID: u8 = 1;
const REPLY_PAYLOAD: u8 = 2;
const REPLY_ERROR: u8 = 3;
const ERROR_KIND: u8 = 1;
const ERROR_MESSAGE: u8 = 2;

/// The `ShardingFrame` encoding of `reply` to an ask made to `kind`: what
/// [`encode_sharding`](super::encode_sharding) produces for a [`ShardingBody::Reply`](super::ShardingBody).
pub(super) fn encode_reply(kind: &str, reply: &WireReply) -> Bytes {
    let body = reply_body_len(reply);
    // The reply is a oneof member: written even when its body is empty.
    let len = len_field_len(kind.len()) + 1 + varint_len(body as u64) + body;
    let mut out = BytesMut::with_capacity(len);
    put_len_field(FRAME_KIND, kind.as_bytes(), &mut out);
    put_key_varint(key(FRAME_REPLY, WIRE_LEN), body as u64, &mut out);
    if reply.ask_id != 0 {
        put_key_varint(key(REPLY_ASK_ID, WIRE_VARINT), reply.ask_id, &mut out);
    }
    match &reply.result {
        // Oneof members are written even when empty, as prost does.
        Ok(payload) => {
            put_key_varint(key(REPLY_PAYLOAD, WIRE_LEN), payload.len() as u64, &mut out);
            out.put_slice(payload);
        }
        Err(e) => {
            put_key_varint(
                key(REPLY_ERROR, WIRE_LEN),
                error_body_len(e) as u64,
                &mut out,
            );
            let kind = error_kind_number(e);
            if kind != 0 {
                put_key_varint(key(ERROR_KIND, WIRE_VARINT), kind, &mut out);
            }
            put_len_field(ERROR_MESSAGE, e.message.as_bytes(), &mut out);
        }
    }
    debug_assert_eq!(out.len(), len);
    out.freeze()
}

fn reply_body_len(reply: &WireReply) -> usize {
    let ask_id = if reply.ask_id == 0 {
        0
    } else {
        1 + varint_len(reply.ask_id)
    };
    let result = match &reply.result {
        Ok(payload) => 1 + varint_len(payload.len() as u64) + payload.len(),
        Err(e) => {
            let body = error_body_len(e);
            1 + varint_len(body as u64) + body
        }
    };
    ask_id + result
}

fn error_body_len(e: &ReplyError) -> usize {
    let kind = error_kind_number(e);
    let kind = if kind == 0 { 0 } else { 1 + varint_len(kind) };
    kind + len_field_len(e.message.len())
}

/// The error kind's enum number as protobuf writes an `int32` (sign-extended to 64 bits).
fn error_kind_number(e: &ReplyError) -> u64 {
    i64::from(e.kind.to_pb() as i32) as u64
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::super::convert::decode_sharding;
    use super::super::convert::reply_to_pb;
    use super::super::message::{ReplyErrorKind, ShardingBody, ShardingFrame, ShardingLimits};
    use super::*;
    use crate::pb::s as pb;

    /// The generated types' encoding of the same frame: what peers decode.
    fn by_prost(kind: &str, reply: &WireReply) -> Vec<u8> {
        pb::ShardingFrame {
            kind: kind.to_string(),
            body: Some(pb::sharding_frame::Body::Reply(reply_to_pb(reply))),
        }
        .encode_to_vec()
    }

    fn replies() -> Vec<WireReply> {
        let mut all = vec![
            WireReply {
                ask_id: 1,
                result: Ok(Bytes::new()),
            },
            WireReply {
                ask_id: u64::MAX,
                result: Ok(Bytes::from_static(b"answer")),
            },
            WireReply {
                ask_id: 0x4000_0000_0000_0123,
                result: Ok(Bytes::from(vec![7u8; 300])),
            },
        ];
        for kind in ReplyErrorKind::ALL {
            for message in ["", "the entity failed: \u{e9}\u{e9} (unicode)"] {
                all.push(WireReply {
                    ask_id: 42,
                    result: Err(ReplyError {
                        kind,
                        message: message.to_string(),
                    }),
                });
            }
        }
        all
    }

    #[test]
    fn replies_written_by_hand_are_byte_for_byte_what_prost_writes_and_decode_back() {
        for kind in ["counter", "k"] {
            for reply in replies() {
                let ours = encode_reply(kind, &reply);
                assert_eq!(&ours[..], &by_prost(kind, &reply)[..], "{reply:?}");
                if reply.ask_id == 0 {
                    continue;
                }
                let back = decode_sharding(&ours, &ShardingLimits::default()).expect("decodes");
                assert_eq!(
                    back,
                    ShardingFrame {
                        kind: kind.into(),
                        body: ShardingBody::Reply(reply.clone()),
                    }
                );
            }
        }
    }
}
