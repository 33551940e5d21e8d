//! The one error type of `silk-fetch`, with its retry semantics in the type (apalis style):
//! every [`FetchError`] says whether trying again can help ([`Retry`]), and HTTP statuses are
//! classified the same way by [`Retry::for_status`], so that the frontier never has to guess
//! from a message.
//!
//! This module only describes failures; it must not log, retry or sleep: deciding what to do
//! with a [`Retry`] is the caller's job (the frontier's back-off, the agent's proxy switching).

use std::fmt;
use std::time::Duration;
use thiserror::Error;

/// What the caller should do about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Trying again later (with the usual back-off) may succeed.
    Retryable,
    /// Trying again will fail the same way.
    Permanent,
    /// The server said when to come back.
    After(Duration),
}

impl Retry {
    /// Classifies an HTTP status: `None` for an answer that is not a failure (1xx–3xx, and
    /// 2xx in particular), else whether to retry. `retry_statuses` is the spider's list
    /// (`408, 429, 500, 502, 503, 504` by default); a listed status with a `Retry-After` (the
    /// usual 429 and 503) becomes [`Retry::After`], an unlisted 4xx/5xx is permanent.
    pub fn for_status(
        status: u16,
        retry_after: Option<Duration>,
        retry_statuses: &[u16],
    ) -> Option<Retry> {
        if status < 400 {
            return None;
        }
        if retry_statuses.contains(&status) {
            return Some(match retry_after {
                Some(d) => Retry::After(d),
                None => Retry::Retryable,
            });
        }
        Some(Retry::Permanent)
    }
}

/// The cause of a [`FetchError`], as a short stable name for stats and results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request did not finish within its time budget (connect to last byte).
    Timeout,
    /// The TCP connection could not be made (refused, reset, unreachable).
    Connect,
    /// The host name did not resolve.
    Dns,
    /// The TLS handshake failed (certificate, protocol).
    Tls,
    /// The body is larger than `max_body_bytes`.
    BodyTooLarge,
    /// The connection ended before the body was complete (or a compressed body is cut).
    Truncated,
    /// The server did not speak HTTP correctly (garbage, bad headers, corrupt encoding).
    Protocol,
    /// The proxy refused or failed the request.
    Proxy,
    /// The URL cannot be fetched (does not parse, not http/https).
    InvalidUrl,
    /// A configuration value or a parsing/extraction rule is invalid.
    InvalidConfig,
    /// The host is (or resolves only to) an address the run may not reach (loopback,
    /// link-local, private ranges; see `silk_core::net`).
    PrivateAddress,
}

impl ErrorKind {
    /// The kind as a snake_case name (`body_too_large`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connect => "connect",
            ErrorKind::Dns => "dns",
            ErrorKind::Tls => "tls",
            ErrorKind::BodyTooLarge => "body_too_large",
            ErrorKind::Truncated => "truncated",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Proxy => "proxy",
            ErrorKind::InvalidUrl => "invalid_url",
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::PrivateAddress => "private_address",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that can go wrong while fetching or parsing a page.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum FetchError {
    /// See [`ErrorKind::Timeout`].
    #[error("{url}: timed out after {after_ms} ms")]
    Timeout { url: String, after_ms: u64 },
    /// See [`ErrorKind::Connect`].
    #[error("{url}: connection failed: {reason}")]
    Connect { url: String, reason: String },
    /// See [`ErrorKind::Dns`].
    #[error("{url}: dns lookup failed: {reason}")]
    Dns { url: String, reason: String },
    /// See [`ErrorKind::Tls`].
    #[error("{url}: tls failed: {reason}")]
    Tls { url: String, reason: String },
    /// See [`ErrorKind::BodyTooLarge`]; `announced` is the Content-Length when the server
    /// sent one that was already too large (then nothing of the body was read).
    #[error("{url}: body larger than max_body_bytes ({limit} bytes){}", announced.map(|n| format!(", content-length {n}")).unwrap_or_default())]
    BodyTooLarge {
        url: String,
        limit: u64,
        announced: Option<u64>,
    },
    /// See [`ErrorKind::Truncated`].
    #[error("{url}: body truncated after {received} bytes: {reason}")]
    Truncated {
        url: String,
        received: u64,
        reason: String,
    },
    /// See [`ErrorKind::Protocol`].
    #[error("{url}: protocol error: {reason}")]
    Protocol { url: String, reason: String },
    /// See [`ErrorKind::Proxy`]; `proxy` is the proxy URL without credentials.
    #[error("{url}: proxy {proxy} failed: {reason}")]
    Proxy {
        url: String,
        proxy: String,
        reason: String,
    },
    /// See [`ErrorKind::InvalidUrl`].
    #[error("invalid url `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// See [`ErrorKind::InvalidConfig`]: every bad value or rule at once, each naming its
    /// key (`extract.price.css: invalid selector …`, `proxy[1]: …`).
    #[error("{}", problems.join("; "))]
    InvalidConfig { problems: Vec<String> },
    /// See [`ErrorKind::PrivateAddress`]; `reason` names the host and the address.
    #[error("{url}: {reason} (not allowed for this run)")]
    PrivateAddress { url: String, reason: String },
}

impl FetchError {
    /// The cause, as a stable name.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FetchError::Timeout { .. } => ErrorKind::Timeout,
            FetchError::Connect { .. } => ErrorKind::Connect,
            FetchError::Dns { .. } => ErrorKind::Dns,
            FetchError::Tls { .. } => ErrorKind::Tls,
            FetchError::BodyTooLarge { .. } => ErrorKind::BodyTooLarge,
            FetchError::Truncated { .. } => ErrorKind::Truncated,
            FetchError::Protocol { .. } => ErrorKind::Protocol,
            FetchError::Proxy { .. } => ErrorKind::Proxy,
            FetchError::InvalidUrl { .. } => ErrorKind::InvalidUrl,
            FetchError::InvalidConfig { .. } => ErrorKind::InvalidConfig,
            FetchError::PrivateAddress { .. } => ErrorKind::PrivateAddress,
        }
    }

    /// Whether trying again can help. Network-level failures (timeout, connect, dns, a cut
    /// body, a failing proxy) are retryable; what the same server will answer the same way
    /// (a certificate, an oversized body, broken HTTP, a bad URL or rule) is permanent.
    pub fn retry(&self) -> Retry {
        match self.kind() {
            ErrorKind::Timeout
            | ErrorKind::Connect
            | ErrorKind::Dns
            | ErrorKind::Truncated
            | ErrorKind::Proxy => Retry::Retryable,
            ErrorKind::Tls
            | ErrorKind::BodyTooLarge
            | ErrorKind::Protocol
            | ErrorKind::InvalidUrl
            | ErrorKind::InvalidConfig
            | ErrorKind::PrivateAddress => Retry::Permanent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT_RETRY: &[u16] = &[408, 429, 500, 502, 503, 504];

    #[test]
    fn status_classes() {
        let cases: &[(u16, Option<u64>, Option<Retry>)] = &[
            (200, None, None),
            (301, None, None),
            (304, Some(5), None),
            (404, None, Some(Retry::Permanent)),
            (403, Some(5), Some(Retry::Permanent)),
            (408, None, Some(Retry::Retryable)),
            (429, None, Some(Retry::Retryable)),
            (429, Some(7), Some(Retry::After(Duration::from_secs(7)))),
            (503, Some(2), Some(Retry::After(Duration::from_secs(2)))),
            (500, None, Some(Retry::Retryable)),
            (501, None, Some(Retry::Permanent)),
        ];
        for &(status, after, want) in cases {
            let got = Retry::for_status(status, after.map(Duration::from_secs), DEFAULT_RETRY);
            assert_eq!(got, want, "status {status}");
        }
    }

    #[test]
    fn kinds_and_retry() {
        let e = FetchError::BodyTooLarge {
            url: "http://h/".into(),
            limit: 10,
            announced: Some(99),
        };
        assert_eq!(e.kind().as_str(), "body_too_large");
        assert_eq!(e.retry(), Retry::Permanent);
        assert_eq!(
            e.to_string(),
            "http://h/: body larger than max_body_bytes (10 bytes), content-length 99"
        );
        let e = FetchError::Timeout {
            url: "http://h/".into(),
            after_ms: 5,
        };
        assert_eq!(e.retry(), Retry::Retryable);
        assert_eq!(e.to_string(), "http://h/: timed out after 5 ms");
    }
}
