//! The write guard: who may use the state-changing routes. Refused by default
//! (`management.http.route-providers-read-only = true`, 403). When enabled:
//!
//! - with `management.http.tls.enabled`, a request on a connection that presented a verified
//!   client certificate ([`ClientCertificate`]: from the cluster's CA, naming this cluster)
//!   passes;
//! - otherwise the bearer token of `management.http.auth-token-file` is required if one is
//!   configured (401 with `WWW-Authenticate: Bearer` when it is missing or wrong);
//! - with TLS on and no token configured, a request without a client certificate is refused
//!   (403);
//! - with neither, the request passes; configuration refuses that beyond loopback.
//!
//! The guard wraps the write handlers only ([`WriteGuard::protect`]), so the read-only routes
//! never see it, and it runs before the handler reads the path or the body.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use shardik_config::{ConfigError, ManagementHttpSettings};

use super::answer::message;
use super::client_certificate::ClientCertificate;
use super::observe::{Refusal, refused};

/// The key naming the token file, for error messages.
const TOKEN_KEY: &str = "management.http.auth-token-file";

/// The shortest token accepted: a guessable token guards nothing.
pub const MIN_TOKEN_LENGTH: usize = 16;

/// Who may use the state-changing routes. Cheap to clone.
#[derive(Clone)]
pub struct WriteGuard {
    inner: Arc<Inner>,
}

struct Inner {
    enabled: bool,
    token: Option<Vec<u8>>,
    /// A verified client certificate authorises a request (and, without a token, is the only
    /// thing that does).
    client_certificates: bool,
}

impl fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the token itself.
        f.debug_struct("WriteGuard")
            .field("enabled", &self.inner.enabled)
            .field("token", &self.inner.token.as_ref().map(|_| "<set>"))
            .field("client_certificates", &self.inner.client_certificates)
            .finish()
    }
}

impl WriteGuard {
    /// Refuses every state-changing request with 403 (Akka Management's default).
    pub fn read_only() -> Self {
        Self::new(false, None)
    }

    /// Allows every state-changing request without a token (for tests and embedding on
    /// loopback; configuration never builds this beyond loopback).
    pub fn open() -> Self {
        Self::new(true, None)
    }

    /// Allows state-changing requests that carry `Authorization: Bearer {token}`.
    pub fn with_token(token: impl Into<Vec<u8>>) -> Self {
        Self::new(true, Some(token.into()))
    }

    fn new(enabled: bool, token: Option<Vec<u8>>) -> Self {
        WriteGuard {
            inner: Arc::new(Inner {
                enabled,
                token,
                client_certificates: false,
            }),
        }
    }

    /// This guard, also letting through requests on connections with a verified client
    /// certificate ([`ClientCertificate`], which only [`serve_https`](super::serve_https)
    /// hands out). Without a token, a request must then present such a certificate: the
    /// guard of `management.http.tls.enabled`.
    pub fn accepting_client_certificates(&self) -> Self {
        WriteGuard {
            inner: Arc::new(Inner {
                enabled: self.inner.enabled,
                token: self.inner.token.clone(),
                client_certificates: true,
            }),
        }
    }

    /// The guard `settings` ask for: read-only unless `route-providers-read-only = false`,
    /// with the token of `auth-token-file` if set (read now, once), accepting client
    /// certificates if `tls.enabled`. A token file that cannot be read, or holds no usable
    /// token, is an error naming the key.
    pub fn from_settings(settings: &ManagementHttpSettings) -> Result<Self, ConfigError> {
        let token = match settings.auth_token_path() {
            Some(path) => Some(read_token(path)?),
            None => None,
        };
        let guard = Self::new(!settings.route_providers_read_only, token);
        Ok(if settings.tls.enabled {
            guard.accepting_client_certificates()
        } else {
            guard
        })
    }

    /// This guard with writes enabled, keeping its credentials (the demo's own routes on
    /// loopback).
    pub fn enable_writes(&self) -> Self {
        WriteGuard {
            inner: Arc::new(Inner {
                enabled: true,
                token: self.inner.token.clone(),
                client_certificates: self.inner.client_certificates,
            }),
        }
    }

    /// Whether state-changing requests can pass at all.
    pub fn writes_enabled(&self) -> bool {
        self.inner.enabled
    }

    /// Whether a bearer token is required (or, if
    /// [`accepts_client_certificates`](Self::accepts_client_certificates), a token or a
    /// client certificate).
    pub fn requires_token(&self) -> bool {
        self.inner.token.is_some()
    }

    /// Whether a verified client certificate authorises a request.
    pub fn accepts_client_certificates(&self) -> bool {
        self.inner.client_certificates
    }

    /// `route` with every method behind this guard.
    pub fn protect<S>(&self, route: MethodRouter<S>) -> MethodRouter<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        route.route_layer(middleware::from_fn_with_state(self.clone(), guard_writes))
    }

    /// Lets a request with `headers`, on a connection whose verified client certificate is
    /// `client` (if any), through, or says why not (answer with it: it is a response). The
    /// refusal is counted and logged here.
    pub fn check(
        &self,
        headers: &HeaderMap,
        client: Option<&ClientCertificate>,
    ) -> Result<(), GuardRefusal> {
        let inner = &*self.inner;
        if !inner.enabled {
            refused(Refusal::ReadOnly);
            return Err(GuardRefusal::ReadOnly);
        }
        if inner.client_certificates && client.is_some() {
            return Ok(());
        }
        let Some(expected) = &inner.token else {
            if inner.client_certificates {
                refused(Refusal::NoClientCertificate);
                return Err(GuardRefusal::NoClientCertificate);
            }
            return Ok(());
        };
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| bearer_token(v.as_bytes()));
        match presented {
            Some(token) if constant_time_eq(token, expected) => Ok(()),
            found => {
                refused(Refusal::Unauthorized);
                Err(GuardRefusal::Unauthorized {
                    wrong_token: found.is_some(),
                    certificate_would_do: inner.client_certificates,
                })
            }
        }
    }
}

/// Why the guard refused a state-changing request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuardRefusal {
    /// Writes are disabled (403).
    ReadOnly,
    /// The bearer token is missing (`wrong_token` false) or wrong (401).
    Unauthorized {
        /// Whether a token was presented.
        wrong_token: bool,
        /// Whether a client certificate would have done instead (the port serves TLS).
        certificate_would_do: bool,
    },
    /// The port serves TLS, no token is configured, and the connection presented no client
    /// certificate (403).
    NoClientCertificate,
}

impl IntoResponse for GuardRefusal {
    fn into_response(self) -> Response {
        match self {
            GuardRefusal::ReadOnly => message(
                StatusCode::FORBIDDEN,
                "state-changing routes are disabled by \
                 `management.http.route-providers-read-only = true` (the default); set it to \
                 false to join, leave or down members through this API (beyond 127.0.0.1 \
                 also set `management.http.auth-token-file`)",
            ),
            GuardRefusal::NoClientCertificate => message(
                StatusCode::FORBIDDEN,
                "state-changing routes need a client certificate from the cluster's CA \
                 (`management.http.tls.enabled` is on and no `management.http.auth-token-file` \
                 is set): connect with one (with the shardik CLI: `--management-cert FILE \
                 --management-key FILE`)",
            ),
            GuardRefusal::Unauthorized {
                wrong_token,
                certificate_would_do,
            } => {
                let text = match (wrong_token, certificate_would_do) {
                    (true, _) => "wrong bearer token",
                    (false, false) => {
                        "state-changing routes need `Authorization: Bearer TOKEN` with the \
                         token of `management.http.auth-token-file`"
                    }
                    (false, true) => {
                        "state-changing routes need a client certificate from the cluster's CA, \
                         or `Authorization: Bearer TOKEN` with the token of \
                         `management.http.auth-token-file`"
                    }
                };
                let mut response = message(StatusCode::UNAUTHORIZED, text);
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"shardik\""),
                );
                response
            }
        }
    }
}

async fn guard_writes(State(guard): State<WriteGuard>, request: Request, next: Next) -> Response {
    let client = request.extensions().get::<ClientCertificate>();
    match guard.check(request.headers(), client) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// The token of an `Authorization: Bearer TOKEN` value (the scheme in any case).
fn bearer_token(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// Compares in time that depends on the expected token's length only, never on where the
/// first difference is or on the presented token's length.
fn constant_time_eq(presented: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(presented.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        diff |= presented.get(i).copied().unwrap_or(0) ^ e;
    }
    std::hint::black_box(diff) == 0
}

/// Reads and checks the token file.
fn read_token(path: &str) -> Result<Vec<u8>, ConfigError> {
    let refuse = |reason: String| ConfigError::Refused {
        key: TOKEN_KEY.to_string(),
        value: path.to_string(),
        reason,
        origin: None,
    };
    let text = std::fs::read(path).map_err(|e| {
        refuse(format!(
            "cannot read the token file: {e}; write a token into it (e.g. `head -c 32 \
             /dev/urandom | base64 > {path}`) or unset the key"
        ))
    })?;
    let token = text.trim_ascii();
    if token.is_empty() {
        return Err(refuse(
            "the token file is empty; write a token of at least 16 characters into it".into(),
        ));
    }
    if !token.iter().all(|b| b.is_ascii_graphic()) {
        return Err(refuse(
            "the token holds characters other than visible ASCII (spaces, line breaks or \
             control characters inside it); an HTTP header could not carry it"
                .into(),
        ));
    }
    if token.len() < MIN_TOKEN_LENGTH {
        return Err(refuse(format!(
            "the token is {} characters long; use at least {MIN_TOKEN_LENGTH} (e.g. `head -c \
             32 /dev/urandom | base64`)",
            token.len()
        )));
    }
    Ok(token.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_values_parse_in_any_case() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"BEARER abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
        assert_eq!(bearer_token(b"Bear"), None);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"secret-tokeN", b"secret-token"));
        assert!(!constant_time_eq(b"secret-token-and-more", b"secret-token"));
        assert!(!constant_time_eq(b"secret", b"secret-token"));
        assert!(!constant_time_eq(b"", b"secret-token"));
        // A presented token padded with zero bytes is not the expected one.
        assert!(!constant_time_eq(b"ab\0", b"ab"));
    }

    #[test]
    fn token_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        };
        let good = write("good", "  0123456789abcdefXYZ\n");
        assert_eq!(read_token(&good).unwrap(), b"0123456789abcdefXYZ");
        for (path, expected) in [
            (write("empty", "\n"), "empty"),
            (write("short", "abc"), "at least 16"),
            (write("spaces", "0123456789 abcdefghij"), "visible ASCII"),
            (
                dir.path().join("missing").display().to_string(),
                "cannot read",
            ),
        ] {
            let text = read_token(&path).unwrap_err().to_string();
            assert!(text.contains(TOKEN_KEY), "{text}");
            assert!(text.contains(&path), "{text}");
            assert!(text.contains(expected), "{text}");
        }
    }
}
