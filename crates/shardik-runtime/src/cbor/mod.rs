//! CBOR through serde (minicbor-serde): the self-describing encoding for commands, replies and
//! stored events whose types change between versions of a program (docs/EVOLUTION.md).
//!
//! Structs are maps keyed by field name and enum variants are named, so a reader ignores
//! fields it does not know, fills fields it misses from `#[serde(default)]`, and finds variants
//! by name, whatever order the writer's version declared them in.
//!
//! Bytes from the network or a store are checked before serde sees them
//! ([`nesting::check`]): minicbor-serde has no recursion limit of its own, and a recursive
//! type (a tree, a `serde_json::Value`) fed deeply nested input would overflow the stack.

mod nesting;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// How deeply CBOR containers (arrays, maps, tags, indefinite strings) may nest in input we
/// decode: serde_json's limit, deeper than any sane command or event.
pub(crate) const MAX_NESTING: usize = 128;

/// Encodes `value` at the end of `out`.
pub(crate) fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), String> {
    let mut serializer = minicbor_serde::Serializer::new(out);
    value
        .serialize(&mut serializer)
        .map_err(|e| format!("CBOR encoding failed: {e}"))
}

/// Encodes `value`.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    encode_into(value, &mut out)?;
    Ok(out)
}

/// Decodes one value that must fill `bytes` exactly, after checking its nesting.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    nesting::check(bytes, MAX_NESTING)?;
    let mut deserializer = minicbor_serde::Deserializer::new(bytes);
    let value = T::deserialize(&mut deserializer).map_err(|e| format!("CBOR: {e}"))?;
    let used = deserializer.decoder().position();
    if used != bytes.len() {
        return Err(format!(
            "CBOR: {} bytes after the value's {used}",
            bytes.len() - used
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    /// Version 1 of a command.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    enum CommandV1 {
        Set { name: String, value: u64 },
        Clear,
    }

    /// Version 2: a field added with a default, a variant added, the variants reordered.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    enum CommandV2 {
        Reset,
        Clear,
        Set {
            name: String,
            value: u64,
            #[serde(default)]
            note: Option<String>,
        },
    }

    #[test]
    fn an_older_value_reads_as_the_newer_type_with_defaults() {
        let old = encode(&CommandV1::Set {
            name: "a".into(),
            value: 3,
        })
        .unwrap();
        let read: CommandV2 = decode(&old).unwrap();
        let expected = CommandV2::Set {
            name: "a".into(),
            value: 3,
            note: None,
        };
        assert_eq!(read, expected);
        assert_eq!(
            decode::<CommandV2>(&encode(&CommandV1::Clear).unwrap()),
            Ok(CommandV2::Clear)
        );
    }

    #[test]
    fn a_newer_value_reads_as_the_older_type_without_its_new_field() {
        let new = encode(&CommandV2::Set {
            name: "a".into(),
            value: 3,
            note: Some("ignored by v1".into()),
        })
        .unwrap();
        let read: CommandV1 = decode(&new).unwrap();
        assert_eq!(
            read,
            CommandV1::Set {
                name: "a".into(),
                value: 3
            }
        );
    }

    #[test]
    fn an_unknown_variant_is_an_error_naming_it() {
        let new = encode(&CommandV2::Reset).unwrap();
        let error = decode::<CommandV1>(&new).unwrap_err();
        assert!(error.contains("Reset"), "{error}");
    }

    #[test]
    fn trailing_bytes_and_truncation_are_errors() {
        let mut bytes = encode(&CommandV1::Clear).unwrap();
        bytes.push(0);
        assert!(decode::<CommandV1>(&bytes).unwrap_err().contains("after"));
        let set = encode(&CommandV1::Set {
            name: "abc".into(),
            value: 1,
        })
        .unwrap();
        for cut in 0..set.len() {
            assert!(decode::<CommandV1>(&set[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_length_far_beyond_the_input_fails_without_allocating_it() {
        // A text string and an array each announcing 2^63 elements, in ten bytes.
        let huge_text = [0x7b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, b'a'];
        assert!(decode::<String>(&huge_text).is_err());
        let huge_array = [0x9b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert!(decode::<Vec<u64>>(&huge_array).is_err());
    }

    /// A recursive type, which deeply nested input would otherwise take down the stack.
    #[derive(Serialize, Deserialize, Debug)]
    enum Tree {
        Leaf,
        Node(Vec<Tree>),
    }

    #[test]
    fn nesting_deeper_than_the_limit_is_refused_before_serde_sees_it() {
        let mut deep = Tree::Leaf;
        for _ in 0..40 {
            deep = Tree::Node(vec![deep]);
        }
        let fine = encode(&deep).unwrap();
        assert!(decode::<Tree>(&fine).is_ok());
        // A million nested one-element arrays: a stack overflow without the check.
        let mut hostile = vec![0x81u8; 1_000_000];
        hostile.push(0xf6);
        let error = decode::<Tree>(&hostile).unwrap_err();
        assert!(error.contains("nest"), "{error}");
    }
}
