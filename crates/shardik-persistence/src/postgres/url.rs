//! The store URL's TLS parameters, spelled as libpq spells them (`sslmode`, `sslrootcert`,
//! `sslcert`, `sslkey`), taken out of the URL before the driver parses the rest: the driver
//! knows `sslmode=disable|prefer|require` only and refuses the other three names, and we want
//! users to write the URL they already know from `psql`.
//!
//! Both forms the driver reads are handled: `postgres://…?k=v&k=v` and `k=v k='v w'`. The
//! splitting follows the driver's own reading of each form, so what is left parses as before.

use std::path::PathBuf;

use crate::store_url::{key_values, percent_decode};

/// How the connection is encrypted and what is checked, as libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SslMode {
    /// Never encrypt.
    Disable,
    /// Encrypt when the server offers it; check the certificate only if `sslrootcert` is given.
    Prefer,
    /// Always encrypt; check the certificate only if `sslrootcert` is given.
    Require,
    /// Always encrypt, and check that a CA of `sslrootcert` signed the server's certificate.
    VerifyCa,
    /// As `VerifyCa`, and check that the certificate names the host connected to.
    VerifyFull,
}

/// The values `sslmode` takes, for error messages.
const MODES: &str = "disable, prefer, require, verify-ca or verify-full";

impl SslMode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` tries without TLS first, which the driver cannot do.
            other => return Err(format!("sslmode={other:?} is not one of {MODES}")),
        })
    }

    /// What the driver is told: it negotiates TLS; checking the certificate is ours.
    pub(super) fn driver(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// A client certificate to show the server (`sslcert` and `sslkey`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ClientIdentity {
    /// PEM file of the certificate, then any intermediates.
    pub(super) cert: PathBuf,
    /// PEM file of its private key (PKCS#8, PKCS#1 or SEC1).
    pub(super) key: PathBuf,
}

/// The TLS parameters of a store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TlsParams {
    /// `sslmode` (libpq's default, `prefer`, when absent).
    pub(super) mode: SslMode,
    /// `sslrootcert`: PEM file of the CA certificates trusted to sign the server's.
    pub(super) root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`.
    pub(super) client: Option<ClientIdentity>,
}

impl TlsParams {
    /// No TLS parameters: libpq's defaults.
    pub(super) fn new(mode: SslMode) -> Self {
        TlsParams {
            mode,
            root_cert: None,
            client: None,
        }
    }

    /// The CA file the server's certificate chain is checked against, if it is checked: in
    /// every mode but `disable` once `sslrootcert` is given (libpq checks the chain under
    /// `require` too when it has a root certificate file).
    pub(super) fn chain_roots(&self) -> Option<&PathBuf> {
        match self.mode {
            SslMode::Disable => None,
            _ => self.root_cert.as_ref(),
        }
    }

    /// Whether the certificate must name the host connected to.
    pub(super) fn checks_host_name(&self) -> bool {
        self.mode == SslMode::VerifyFull
    }
}

/// A store URL split in two: what the driver parses, and the TLS parameters.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SplitUrl {
    /// The URL without the TLS parameters (`sslmode` too: it is set on the parsed config).
    pub(super) driver: String,
    /// The TLS parameters.
    pub(super) tls: TlsParams,
}

/// The parameter names this module takes out of the URL.
const OURS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Splits `url` into what the driver parses and the TLS parameters. The error says what is
/// wrong, naming the parameter, without repeating the URL (the caller adds a redacted copy).
pub(super) fn split(url: &str) -> Result<SplitUrl, String> {
    let mut raw = RawParams::default();
    let driver = if let Some(rest) = strip_scheme(url) {
        split_url_form(url, rest, &mut raw)?
    } else {
        split_key_values(url, &mut raw)?
    };
    Ok(SplitUrl {
        driver,
        tls: raw.into_params()?,
    })
}

/// The TLS parameters as written, the last of each name winning (as in libpq).
#[derive(Default)]
struct RawParams {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
}

impl RawParams {
    fn set(&mut self, key: &str, value: String) {
        let slot = match key {
            "sslmode" => &mut self.sslmode,
            "sslrootcert" => &mut self.sslrootcert,
            "sslcert" => &mut self.sslcert,
            _ => &mut self.sslkey,
        };
        *slot = Some(value);
    }

    fn into_params(self) -> Result<TlsParams, String> {
        let mode = match &self.sslmode {
            Some(value) => SslMode::parse(value)?,
            None => SslMode::Prefer,
        };
        let path = |name: &str, value: Option<String>| match value {
            Some(v) if v.is_empty() => Err(format!("{name} is empty; give the path of a PEM file")),
            Some(v) => Ok(Some(PathBuf::from(v))),
            None => Ok(None),
        };
        if self.sslrootcert.as_deref() == Some("system") {
            return Err(
                "sslrootcert=system (the operating system's trust store) is not \
                        supported; give the path of a PEM file of the CA certificates to trust"
                    .to_string(),
            );
        }
        let root_cert = path("sslrootcert", self.sslrootcert)?;
        let client = match (path("sslcert", self.sslcert)?, path("sslkey", self.sslkey)?) {
            (Some(cert), Some(key)) => Some(ClientIdentity { cert, key }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(
                    "sslcert is given without sslkey; give both (PEM files of the \
                            client certificate and of its private key)"
                        .to_string(),
                );
            }
            (None, Some(_)) => {
                return Err(
                    "sslkey is given without sslcert; give both (PEM files of the \
                            client certificate and of its private key)"
                        .to_string(),
                );
            }
        };
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
            let name = if mode == SslMode::VerifyCa {
                "verify-ca"
            } else {
                "verify-full"
            };
            return Err(format!(
                "sslmode={name} needs sslrootcert=PATH, a PEM file of the CA certificates to \
                 trust (there is no default file)"
            ));
        }
        Ok(TlsParams {
            mode,
            root_cert,
            client,
        })
    }
}

/// What follows `postgres://` or `postgresql://`, if `url` is in URL form (the driver's test,
/// case and all).
fn strip_scheme(url: &str) -> Option<&str> {
    ["postgres://", "postgresql://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme))
}

/// The URL form: our parameters leave the query string, the rest stays as written.
fn split_url_form(url: &str, rest: &str, raw: &mut RawParams) -> Result<String, String> {
    // The driver reads the credentials up to the first `@` before anything else, so a `?` in
    // a password does not start the query.
    let after_credentials = rest.find('@').map_or(0, |at| at + 1);
    let Some(question) = rest[after_credentials..].find('?') else {
        return Ok(url.to_string());
    };
    let query_start = url.len() - rest.len() + after_credentials + question;
    let head = &url[..query_start];
    let query = &url[query_start + 1..];
    let mut kept = Vec::new();
    for piece in query.split('&') {
        match piece.split_once('=') {
            Some((key, value)) if OURS.contains(&percent_decode(key)?.as_str()) => {
                raw.set(&percent_decode(key)?, percent_decode(value)?);
            }
            // The driver judges everything else, malformed pieces included.
            _ => kept.push(piece),
        }
    }
    Ok(if kept.is_empty() {
        head.to_string()
    } else {
        format!("{head}?{}", kept.join("&"))
    })
}

/// The key=value form: our parameters leave the string, the others stay as written.
fn split_key_values(text: &str, raw: &mut RawParams) -> Result<String, String> {
    let mut kept = Vec::new();
    for param in key_values(text)? {
        if OURS.contains(&param.key) {
            raw.set(param.key, param.value);
        } else {
            kept.push(&text[param.span]);
        }
    }
    Ok(kept.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(url: &str) -> TlsParams {
        split(url).unwrap_or_else(|e| panic!("{url}: {e}")).tls
    }

    fn driver(url: &str) -> String {
        split(url).unwrap_or_else(|e| panic!("{url}: {e}")).driver
    }

    #[test]
    fn every_sslmode_is_read_in_both_forms() {
        for (value, mode) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("require", SslMode::Require),
            ("verify-ca", SslMode::VerifyCa),
            ("verify-full", SslMode::VerifyFull),
        ] {
            let url = format!("postgres://u@h/db?sslmode={value}&sslrootcert=/ca.pem");
            assert_eq!(tls(&url).mode, mode, "{url}");
            let kv = format!("host=h sslmode={value} sslrootcert=/ca.pem");
            assert_eq!(tls(&kv).mode, mode, "{kv}");
        }
    }

    #[test]
    fn without_sslmode_the_mode_is_prefer_as_in_libpq() {
        assert_eq!(tls("postgres://u@h/db"), TlsParams::new(SslMode::Prefer));
        assert_eq!(tls("host=h dbname=db"), TlsParams::new(SslMode::Prefer));
    }

    #[test]
    fn our_parameters_leave_the_url_and_the_others_stay_in_order() {
        let url = "postgresql://u:p@h:5433/db?connect_timeout=3&sslmode=verify-full\
                   &sslrootcert=%2Fetc%2Fca.pem&application_name=x&sslcert=/c.pem&sslkey=/k.pem";
        let split = split(url).unwrap();
        assert_eq!(
            split.driver,
            "postgresql://u:p@h:5433/db?connect_timeout=3&application_name=x"
        );
        assert_eq!(
            split.tls,
            TlsParams {
                mode: SslMode::VerifyFull,
                root_cert: Some(PathBuf::from("/etc/ca.pem")),
                client: Some(ClientIdentity {
                    cert: PathBuf::from("/c.pem"),
                    key: PathBuf::from("/k.pem"),
                }),
            }
        );
        assert_eq!(
            driver("postgres://u@h/db?sslmode=require"),
            "postgres://u@h/db"
        );
        assert_eq!(driver("postgres://u@h/db"), "postgres://u@h/db");
    }

    #[test]
    fn a_question_mark_in_the_password_does_not_start_the_query() {
        let split = split("postgres://u:p?sslmode=x@h/db?sslmode=require").unwrap();
        assert_eq!(split.driver, "postgres://u:p?sslmode=x@h/db");
        assert_eq!(split.tls.mode, SslMode::Require);
    }

    #[test]
    fn key_value_form_keeps_quotes_and_escapes_of_the_others() {
        let text = r"host=h  password='a b\'c' sslrootcert = '/my certs/ca.pem' sslmode=verify-ca";
        let split = split(text).unwrap();
        assert_eq!(split.driver, r"host=h password='a b\'c'");
        assert_eq!(split.tls.mode, SslMode::VerifyCa);
        assert_eq!(split.tls.root_cert, Some(PathBuf::from("/my certs/ca.pem")));
        // What is left parses as the driver would have parsed it.
        let config: tokio_postgres::Config = split.driver.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"a b'c"[..]));
    }

    #[test]
    fn the_last_of_a_repeated_parameter_wins() {
        assert_eq!(
            tls("postgres://h/db?sslmode=disable&sslmode=require").mode,
            SslMode::Require
        );
    }

    #[test]
    fn bad_tls_parameters_say_which_and_what_is_allowed() {
        for (url, expected) in [
            (
                "postgres://h/db?sslmode=verify_full",
                "sslmode=\"verify_full\" is not one of disable, prefer, require, verify-ca or verify-full",
            ),
            ("host=h sslmode=allow", "sslmode=\"allow\" is not one of"),
            (
                "postgres://h/db?sslmode=verify-full",
                "sslmode=verify-full needs sslrootcert=PATH",
            ),
            (
                "postgres://h/db?sslmode=verify-ca",
                "sslmode=verify-ca needs sslrootcert=PATH",
            ),
            ("postgres://h/db?sslrootcert=", "sslrootcert is empty"),
            ("postgres://h/db?sslrootcert=system", "sslrootcert=system"),
            (
                "postgres://h/db?sslcert=/c.pem",
                "sslcert is given without sslkey",
            ),
            (
                "postgres://h/db?sslkey=/k.pem",
                "sslkey is given without sslcert",
            ),
            ("host=h sslrootcert='/ca.pem", "not closed"),
        ] {
            let why = split(url).unwrap_err();
            assert!(why.contains(expected), "{url}: {why}");
        }
    }

    #[test]
    fn root_certificates_check_the_chain_in_every_mode_but_disable() {
        let with_root = |mode| TlsParams {
            root_cert: Some(PathBuf::from("/ca.pem")),
            ..TlsParams::new(mode)
        };
        assert_eq!(with_root(SslMode::Disable).chain_roots(), None);
        for mode in [
            SslMode::Prefer,
            SslMode::Require,
            SslMode::VerifyCa,
            SslMode::VerifyFull,
        ] {
            assert!(with_root(mode).chain_roots().is_some(), "{mode:?}");
            assert_eq!(
                with_root(mode).checks_host_name(),
                mode == SslMode::VerifyFull
            );
        }
        assert_eq!(TlsParams::new(SslMode::Require).chain_roots(), None);
    }
}
