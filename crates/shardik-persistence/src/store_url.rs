//! Reading store URLs whatever the store: the password hidden for messages and logs
//! ([`redact`], for every scheme, a mistyped one included), and the two pieces of libpq's
//! syntax that takes (the `key=value` form, `%XX` escapes). Kept out of the PostgreSQL store,
//! which uses them too, so that a build without it still redacts what it refuses.

use std::ops::Range;

/// One `key = value` of the key=value form.
pub(crate) struct KeyValue<'a> {
    pub(crate) key: &'a str,
    /// The value with quotes and escapes removed (read by the PostgreSQL store only).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) value: String,
    /// Where the whole parameter is in the text (read by the PostgreSQL store only).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) span: Range<usize>,
    /// Where its value (quotes included) is in the text.
    pub(crate) value_span: Range<usize>,
}

/// Reads the key=value form as the driver (and libpq) does: whitespace between parameters and
/// around `=`, a value either single-quoted or running to the next whitespace, `\` escaping the
/// character after it in both.
pub(crate) fn key_values(text: &str) -> Result<Vec<KeyValue<'_>>, String> {
    let bytes = text.as_bytes();
    let mut at = 0;
    let skip_ws = |mut at: usize| {
        while let Some(c) = text[at..].chars().next().filter(|c| c.is_whitespace()) {
            at += c.len_utf8();
        }
        at
    };
    let mut found = Vec::new();
    loop {
        at = skip_ws(at);
        if at == text.len() {
            return Ok(found);
        }
        let start = at;
        let key_end = text[at..]
            .find(|c: char| c.is_whitespace() || c == '=')
            .map_or(text.len(), |i| at + i);
        let key = &text[at..key_end];
        if key.is_empty() {
            return Err(format!("a parameter has no name (byte {at})"));
        }
        at = skip_ws(key_end);
        if bytes.get(at) != Some(&b'=') {
            return Err(format!("parameter {key:?} has no `=`"));
        }
        at = skip_ws(at + 1);
        let value_start = at;
        let quoted = bytes.get(at) == Some(&b'\'');
        if quoted {
            at += 1;
        }
        let mut value = String::new();
        let mut closed = false;
        let mut chars = text[at..].char_indices();
        while let Some((i, c)) = chars.next() {
            if quoted && c == '\'' {
                at += i + 1;
                closed = true;
                break;
            }
            if !quoted && c.is_whitespace() {
                at += i;
                closed = true;
                break;
            }
            if c == '\\' {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            } else {
                value.push(c);
            }
        }
        if !closed {
            if quoted {
                return Err(format!("the quoted value of {key:?} is not closed"));
            }
            at = text.len();
        }
        if !quoted && value.is_empty() {
            return Err(format!("parameter {key:?} has no value"));
        }
        found.push(KeyValue {
            key,
            value,
            span: start..at,
            value_span: value_start..at,
        });
    }
}

/// `%XX` sequences decoded as bytes, anything else kept (as the driver decodes).
pub(crate) fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once %-decoded"))
}

/// `url` with any password replaced by `***`, for error messages and logs: the password of
/// `user:password@`, and the value of a `password` parameter in either form.
pub(crate) fn redact(url: &str) -> String {
    const HIDDEN: &str = "***";
    // Any scheme, not only PostgreSQL's: a mistyped one must not show the password either.
    let url_form = url.split_once("://").filter(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    if let Some((_, rest)) = url_form {
        let scheme = &url[..url.len() - rest.len()];
        let (credentials, after) = match rest.find('@') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => ("", rest),
        };
        let credentials = match credentials.split_once(':') {
            Some((user, _)) => format!("{user}:{HIDDEN}"),
            None => credentials.to_string(),
        };
        let after = match after.split_once('?') {
            Some((path, query)) => {
                let params: Vec<String> = query
                    .split('&')
                    .map(|piece| match piece.split_once('=') {
                        Some((key, _)) if percent_decode(key).as_deref() == Ok("password") => {
                            format!("{key}={HIDDEN}")
                        }
                        _ => piece.to_string(),
                    })
                    .collect();
                format!("{path}?{}", params.join("&"))
            }
            None => after.to_string(),
        };
        return format!("{scheme}{credentials}{after}");
    }
    match key_values(url) {
        Ok(params) => {
            let mut out = url.to_string();
            // From the end, so earlier spans stay where they are.
            for param in params.iter().rev().filter(|p| p.key == "password") {
                out.replace_range(param.value_span.clone(), HIDDEN);
            }
            out
        }
        // Unreadable: keep what comes before any password, and nothing after it.
        Err(_) => match url.find("password") {
            Some(at) => format!("{}password={HIDDEN}…", &url[..at]),
            None => url.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_in_both_forms() {
        for (url, shown) in [
            (
                "postgres://user:s3cret@h:5432/db?sslmode=require",
                "postgres://user:***@h:5432/db?sslmode=require",
            ),
            (
                "postgresql://h/db?password=s3cret&sslmode=x",
                "postgresql://h/db?password=***&sslmode=x",
            ),
            ("postgres://user@h/db", "postgres://user@h/db"),
            (
                "host=h password='s3 cret' user=u",
                "host=h password=*** user=u",
            ),
            ("host=h password=s3cret", "host=h password=***"),
            ("host=h password='s3cret", "host=h password=***…"),
            ("postgre://u:s3cret@h/db", "postgre://u:***@h/db"),
        ] {
            let redacted = redact(url);
            assert_eq!(redacted, shown, "{url}");
            assert!(!redacted.contains("s3"), "{redacted}");
        }
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decode("%2Fa%20b").unwrap(), "/a b");
        assert_eq!(percent_decode("100%").unwrap(), "100%");
        assert_eq!(percent_decode("%zz%4").unwrap(), "%zz%4");
        assert!(percent_decode("%ff").is_err());
    }
}
