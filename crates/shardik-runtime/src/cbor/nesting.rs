//! A walk over CBOR items that checks how deeply containers nest, without recursion and
//! without allocating more than the depth allowed: what lets us hand untrusted bytes to a
//! serde deserializer that recurses once per level.

/// How many items remain in a container being walked.
#[derive(Clone, Copy)]
enum Remaining {
    /// A definite-length container: this many items (a map counts keys and values).
    Items(u64),
    /// An indefinite-length container (or string), closed by a break byte.
    UntilBreak,
}

/// Checks that `bytes` is at least one well-framed CBOR item whose containers nest at most
/// `max_depth` deep. Item contents are not judged (serde does that next); framing faults met
/// on the way (a length past the end, a reserved header) are reported.
pub(super) fn check(bytes: &[u8], max_depth: usize) -> Result<(), String> {
    // The root is a container of one item; the stack holds the containers we are inside.
    let mut stack = vec![Remaining::Items(1)];
    let mut at = 0usize;
    while let Some(top) = stack.last_mut() {
        match top {
            Remaining::Items(0) => {
                stack.pop();
                continue;
            }
            Remaining::Items(n) => *n -= 1,
            Remaining::UntilBreak => {
                if bytes.get(at) == Some(&0xff) {
                    at += 1;
                    stack.pop();
                    continue;
                }
            }
        }
        let (opened, next) = item(bytes, at)?;
        at = next;
        if let Some(opened) = opened {
            if stack.len() > max_depth {
                return Err(format!(
                    "CBOR input nests deeper than {max_depth} levels; refused"
                ));
            }
            stack.push(opened);
        }
    }
    Ok(())
}

/// Reads the item header at `at`: what it opens (if it is a non-empty container) and where the
/// next header starts.
fn item(bytes: &[u8], at: usize) -> Result<(Option<Remaining>, usize), String> {
    let truncated = || "CBOR input ends inside an item".to_string();
    let initial = *bytes.get(at).ok_or_else(truncated)?;
    let (major, info) = (initial >> 5, initial & 0x1f);
    let width = match info {
        0..=23 => 0,
        24 => 1,
        25 => 2,
        26 => 4,
        27 => 8,
        31 => {
            return match major {
                2..=5 => Ok((Some(Remaining::UntilBreak), at + 1)),
                7 => Err(format!("CBOR break byte outside a container at {at}")),
                _ => Err(format!("CBOR header {initial:#04x} at {at} is malformed")),
            };
        }
        _ => return Err(format!("CBOR header {initial:#04x} at {at} is reserved")),
    };
    let start = at + 1;
    let argument = if width == 0 {
        u64::from(info)
    } else {
        let field = bytes.get(start..start + width).ok_or_else(truncated)?;
        field.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b))
    };
    let next = start + width;
    match major {
        // Integers, and simple values and floats (whose argument is their value).
        0 | 1 | 7 => Ok((None, next)),
        // Byte and text strings: skip the content, which must be there.
        2 | 3 => {
            let end = usize::try_from(argument)
                .ok()
                .and_then(|len| next.checked_add(len))
                .filter(|&end| end <= bytes.len())
                .ok_or_else(truncated)?;
            Ok((None, end))
        }
        4 | 5 => {
            let items = if major == 5 {
                argument.saturating_mul(2)
            } else {
                argument
            };
            Ok(((items > 0).then_some(Remaining::Items(items)), next))
        }
        // A tag wraps the one item after it.
        _ => Ok((Some(Remaining::Items(1)), next)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested_arrays(depth: usize) -> Vec<u8> {
        let mut bytes = vec![0x81u8; depth];
        bytes.push(0x00);
        bytes
    }

    #[test]
    fn depth_is_counted_per_container_up_to_the_limit() {
        assert_eq!(check(&nested_arrays(8), 8), Ok(()));
        assert!(check(&nested_arrays(9), 8).is_err());
        // Indefinite arrays (0x9f ... 0xff) and tags (0xc1) count as levels too.
        assert_eq!(check(&[0x9f, 0x9f, 0x01, 0xff, 0xff], 2), Ok(()));
        assert!(check(&[0x9f, 0x9f, 0x9f, 0xff, 0xff, 0xff], 2).is_err());
        assert!(check(&[0xc1, 0xc1, 0xc1, 0x00], 2).is_err());
    }

    #[test]
    fn siblings_do_not_add_depth() {
        // A map of two entries whose values are one-level arrays: depth 2.
        let bytes = [0xa2, 0x61, b'a', 0x81, 0x01, 0x61, b'b', 0x82, 0x01, 0x02];
        assert_eq!(check(&bytes, 2), Ok(()));
    }

    #[test]
    fn framing_faults_are_errors_not_panics() {
        for bytes in [
            &[][..],
            &[0x18],       // a one-byte argument that is missing
            &[0x62, b'a'], // a text of two bytes with one
            &[0x82, 0x01], // an array of two with one
            &[0xff],       // a break at the top
            &[0x1c],       // a reserved argument width
            &[0x1f],       // an indefinite integer
            &[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // 2^64-1 bytes announced
        ] {
            assert!(check(bytes, 8).is_err(), "{bytes:02x?}");
        }
    }
}
