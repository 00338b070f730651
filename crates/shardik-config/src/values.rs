//! Values that TOML has no type for: sizes, switches, durations that may also be a switch,
//! strings that an environment variable typed as a number, lists written as one string,
//! addresses. Plain durations are read by `humantime_serde` directly on the fields.
//!
//! Each deserializer refuses a value with serde's `invalid_value`, so that the error
//! conversion can print the value as written next to the key and what is allowed.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use bytesize::ByteSize;
use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use shardik_core::membership::Address;

/// What a duration looks like, for error messages.
pub(super) const DURATION_EXPECTED: &str = "a duration like `1s` or `250ms`";

/// What `allow-weakly-up-members = "on"` means (Akka's default).
const WEAKLY_UP_ON: Duration = Duration::from_secs(7);

/// A key that takes a duration or a switch.
pub(super) enum DurationOrSwitch {
    /// "on", `true` and the like, as written (for an error where "on" means nothing).
    On(String),
    Off,
    After(Duration),
}

/// Reads a duration or `on`/`off` (or a boolean), refusing anything else with `expected`.
pub(super) fn de_duration_or_switch<'de, D: Deserializer<'de>>(
    d: D,
    expected: &'static str,
) -> Result<DurationOrSwitch, D::Error> {
    struct V(&'static str);
    impl Visitor<'_> for V {
        type Value = DurationOrSwitch;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(self.0)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            match s.trim().to_ascii_lowercase().as_str() {
                "on" | "true" => Ok(DurationOrSwitch::On(s.to_string())),
                "off" | "false" => Ok(DurationOrSwitch::Off),
                _ => humantime::parse_duration(s.trim())
                    .map(DurationOrSwitch::After)
                    .map_err(|_| E::invalid_value(Unexpected::Str(s), &self.0)),
            }
        }
        fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
            Ok(if b {
                DurationOrSwitch::On(b.to_string())
            } else {
                DurationOrSwitch::Off
            })
        }
        // A bare number has no unit and Akka users mean different things by it; the default
        // `visit_u64` and friends refuse it, naming the number.
    }
    d.deserialize_any(V(expected))
}

/// `cluster.allow-weakly-up-members`: `None` when "off", 7 s when "on".
pub(super) fn de_weakly_up<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Ok(
        match de_duration_or_switch(d, "a duration like `7s`, \"on\" (= 7s) or \"off\"")? {
            DurationOrSwitch::On(_) => Some(WEAKLY_UP_ON),
            DurationOrSwitch::After(d) => Some(d),
            DurationOrSwitch::Off => None,
        },
    )
}

/// What `cluster.down-removal-margin` accepts.
pub(super) const DOWN_REMOVAL_MARGIN_EXPECTED: &str =
    "a duration greater than zero like `20s`, or \"off\" (derived from the downing provider)";

/// `cluster.down-removal-margin`: a duration or "off" (`None`); "on" has no meaning here.
pub(super) fn de_down_removal_margin<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    match de_duration_or_switch(d, DOWN_REMOVAL_MARGIN_EXPECTED)? {
        DurationOrSwitch::After(d) => Ok(Some(d)),
        DurationOrSwitch::Off => Ok(None),
        DurationOrSwitch::On(written) => Err(de::Error::invalid_value(
            Unexpected::Str(&written),
            &DOWN_REMOVAL_MARGIN_EXPECTED,
        )),
    }
}

const SWITCH_EXPECTED: &str = "true/false or \"on\"/\"off\"";

/// A switch: a boolean, or Akka's "on"/"off" (and "yes"/"no").
pub(super) fn de_switch<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(SWITCH_EXPECTED)
        }
        fn visit_bool<E: de::Error>(self, b: bool) -> Result<bool, E> {
            Ok(b)
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<bool, E> {
            match s.trim().to_ascii_lowercase().as_str() {
                "on" | "true" | "yes" => Ok(true),
                "off" | "false" | "no" => Ok(false),
                _ => Err(E::invalid_value(Unexpected::Str(s), &SWITCH_EXPECTED)),
            }
        }
    }
    d.deserialize_any(V)
}

const BYTES_EXPECTED: &str = "a size in bytes or with a unit, like `262144`, `256KiB` or `4MiB`";

/// A size in bytes: a number, or a number and a unit (`256KiB`, `256 KiB`, `64kB`, `1.5MiB`).
///
/// `bytesize` does the parsing. Two things are ours: a bare `k`/`m`/`g` is binary (1024-based)
/// as in Akka's HOCON (`256k` = 262144), where `bytesize` would read it as decimal; and a size
/// too large for the machine is refused, where `bytesize` saturates at `u64::MAX`.
pub(super) fn parse_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    let unit = match unit.trim() {
        u if u.eq_ignore_ascii_case("k") => "KiB",
        u if u.eq_ignore_ascii_case("m") => "MiB",
        u if u.eq_ignore_ascii_case("g") => "GiB",
        u => u,
    };
    let ByteSize(n) = format!("{number}{unit}").parse().ok()?;
    if n == u64::MAX {
        return None;
    }
    usize::try_from(n).ok()
}

/// `transport.maximum-frame-size` and other sizes.
pub(super) fn de_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(BYTES_EXPECTED)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<usize, E> {
            usize::try_from(v)
                .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &BYTES_EXPECTED))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<usize, E> {
            usize::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &BYTES_EXPECTED))
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<usize, E> {
            parse_bytes(s).ok_or_else(|| E::invalid_value(Unexpected::Str(s), &BYTES_EXPECTED))
        }
    }
    d.deserialize_any(V)
}

/// A string; numbers and booleans (which an environment value like `1` parses into) are
/// taken as written.
pub(super) fn de_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<String, E> {
            Ok(s.to_string())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(V)
}

/// A list of strings: a TOML array, or (handy in environment variables) one string with
/// comma-separated items. Empty items are skipped.
pub(super) fn de_string_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of strings, like [\"a\", \"b\"] or \"a,b\"")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Vec<String>, E> {
            Ok(s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect())
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            #[derive(Deserialize)]
            struct Item(#[serde(deserialize_with = "de_string")] String);
            let mut out = Vec::new();
            while let Some(Item(s)) = seq.next_element()? {
                out.push(s);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

/// A set of strings, written as a list.
pub(super) fn de_string_set<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
    Ok(de_string_list(d)?.into_iter().collect())
}

/// A list of `host:port` addresses.
pub(super) fn de_addresses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Address>, D::Error> {
    de_string_list(d)?
        .into_iter()
        .map(|s| {
            s.parse::<Address>().map_err(|_| {
                de::Error::invalid_value(Unexpected::Str(&s), &"addresses written as \"host:port\"")
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("256KiB"), Some(262_144));
        assert_eq!(parse_bytes("256 KiB"), Some(262_144));
        assert_eq!(parse_bytes("4 MiB"), Some(4 << 20));
        assert_eq!(parse_bytes("8MiB"), Some(8 << 20));
        assert_eq!(parse_bytes("1GiB"), Some(1 << 30));
        assert_eq!(parse_bytes("1000"), Some(1000));
        assert_eq!(parse_bytes("64kB"), Some(64_000));
        assert_eq!(parse_bytes("1MB"), Some(1_000_000));
        assert_eq!(parse_bytes("1.5KiB"), Some(1536));
        // HOCON's single letters are binary, as before.
        assert_eq!(parse_bytes("256k"), Some(262_144));
        assert_eq!(parse_bytes("4M"), Some(4 << 20));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("12 parsecs"), None);
        assert_eq!(parse_bytes(""), None);
        assert_eq!(parse_bytes("-5KiB"), None);
        // Too large: refused rather than saturated.
        assert_eq!(parse_bytes("99999999999999999999EiB"), None);
        assert_eq!(parse_bytes("20000000000GiB"), None);
    }
}
