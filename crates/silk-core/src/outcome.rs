//! [`OutcomeCode`]: why a request did not produce a page, one enum for every part that decides
//! or reads it (the local engine, the agent's downloader, the hub's runs, the run logs).
//!
//! On the wire (the agent's results, the frontier's reasons, the run logs) a code is its
//! snake_case string, as before this enum existed; a code this build does not know (from a
//! newer agent) decodes to [`OutcomeCode::Other`] and keeps its text. What a code means for the
//! request is [`OutcomeCode::disposition`]: a `match` over every variant, so a new code does not
//! compile until somebody has said what it does.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;

/// Why a request did not produce a page.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OutcomeCode {
    /// The request did not finish within its time budget.
    Timeout,
    /// The TCP connection could not be made.
    Connect,
    /// The host name did not resolve.
    Dns,
    /// The TLS handshake failed.
    Tls,
    /// The body is larger than the run's limit.
    BodyTooLarge,
    /// The connection ended before the body was complete.
    Truncated,
    /// The server did not speak HTTP correctly.
    Protocol,
    /// The proxy refused or failed the request.
    Proxy,
    /// The URL cannot be fetched (does not parse, not http/https).
    InvalidUrl,
    /// The run's configuration cannot be used for the request (the agent refused it).
    InvalidConfig,
    /// The server answered with this status, and it is not a page (`http_503`).
    Http(u16),
    /// A redirect status without a `Location` header (`http_301_without_location`).
    RedirectWithoutLocation(u16),
    /// The answer says the proxy is banned (status or body rule).
    ProxyBanned,
    /// More redirects than the spider allows.
    TooManyRedirects,
    /// A redirect whose target is no URL that can be fetched.
    InvalidRedirect,
    /// A redirect whose target is outside the spider's allowed domains.
    RedirectOffDomain,
    /// robots.txt disallows the URL for the run's user agent.
    RobotsDisallowed,
    /// robots.txt could not be read (a 5xx or a network error): try later.
    RobotsUnavailable,
    /// robots.txt was just fetched for this request's host; the request goes back unharmed.
    RobotsFetched,
    /// The page is over the spider's parse budget (depth, elements or time).
    ParseBudget,
    /// The page could not be parsed.
    ParseFailed,
    /// The agent has no downloader for the run (yet, or any more).
    NoDownloader,
    /// The agent is stopping and gave the request back.
    AgentStopping,
    /// The agent holding the request died.
    AgentLost,
    /// The host is (or resolves only to) an address the run may not reach.
    PrivateAddress,
    /// A code this build does not know (from a newer agent): its text, as sent.
    Other(String),
}

/// What a frontier does with a request that ended with a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Try again later, consuming one of the request's retries.
    Retry,
    /// Give up: the request failed.
    Failed,
    /// Drop it: not an error, the spider's rules say not to fetch it.
    Dropped,
    /// Give it back without consuming a retry: not the request's fault.
    Released,
}

impl OutcomeCode {
    /// The code as it is written on the wire (`body_too_large`, `http_503`).
    pub fn as_str(&self) -> Cow<'_, str> {
        let name = match self {
            OutcomeCode::Timeout => "timeout",
            OutcomeCode::Connect => "connect",
            OutcomeCode::Dns => "dns",
            OutcomeCode::Tls => "tls",
            OutcomeCode::BodyTooLarge => "body_too_large",
            OutcomeCode::Truncated => "truncated",
            OutcomeCode::Protocol => "protocol",
            OutcomeCode::Proxy => "proxy",
            OutcomeCode::InvalidUrl => "invalid_url",
            OutcomeCode::InvalidConfig => "invalid_config",
            OutcomeCode::Http(status) => return Cow::Owned(format!("http_{status}")),
            OutcomeCode::RedirectWithoutLocation(status) => {
                return Cow::Owned(format!("http_{status}_without_location"));
            }
            OutcomeCode::ProxyBanned => "proxy_banned",
            OutcomeCode::TooManyRedirects => "too_many_redirects",
            OutcomeCode::InvalidRedirect => "invalid_redirect",
            OutcomeCode::RedirectOffDomain => "redirect_off_domain",
            OutcomeCode::RobotsDisallowed => "robots_disallowed",
            OutcomeCode::RobotsUnavailable => "robots_unavailable",
            OutcomeCode::RobotsFetched => "robots_fetched",
            OutcomeCode::ParseBudget => "parse_budget",
            OutcomeCode::ParseFailed => "parse_failed",
            OutcomeCode::NoDownloader => "no_downloader",
            OutcomeCode::AgentStopping => "agent_stopping",
            OutcomeCode::AgentLost => "agent_lost",
            OutcomeCode::PrivateAddress => "private_address",
            OutcomeCode::Other(text) => text,
        };
        Cow::Borrowed(name)
    }

    /// Reads a code from its wire text; never fails (an unknown text is [`OutcomeCode::Other`]).
    pub fn parse(text: &str) -> OutcomeCode {
        match text {
            "timeout" => OutcomeCode::Timeout,
            "connect" => OutcomeCode::Connect,
            "dns" => OutcomeCode::Dns,
            "tls" => OutcomeCode::Tls,
            "body_too_large" => OutcomeCode::BodyTooLarge,
            "truncated" => OutcomeCode::Truncated,
            "protocol" => OutcomeCode::Protocol,
            "proxy" => OutcomeCode::Proxy,
            "invalid_url" => OutcomeCode::InvalidUrl,
            "invalid_config" => OutcomeCode::InvalidConfig,
            "proxy_banned" => OutcomeCode::ProxyBanned,
            "too_many_redirects" => OutcomeCode::TooManyRedirects,
            "invalid_redirect" => OutcomeCode::InvalidRedirect,
            "redirect_off_domain" => OutcomeCode::RedirectOffDomain,
            "robots_disallowed" => OutcomeCode::RobotsDisallowed,
            "robots_unavailable" => OutcomeCode::RobotsUnavailable,
            "robots_fetched" => OutcomeCode::RobotsFetched,
            "parse_budget" => OutcomeCode::ParseBudget,
            "parse_failed" => OutcomeCode::ParseFailed,
            "no_downloader" => OutcomeCode::NoDownloader,
            "agent_stopping" => OutcomeCode::AgentStopping,
            "agent_lost" => OutcomeCode::AgentLost,
            "private_address" => OutcomeCode::PrivateAddress,
            other => {
                let status = |digits: &str| {
                    (digits.len() == 3 && digits.bytes().all(|b| b.is_ascii_digit()))
                        .then(|| digits.parse::<u16>().ok())
                        .flatten()
                };
                if let Some(s) = other
                    .strip_prefix("http_")
                    .and_then(|r| r.strip_suffix("_without_location"))
                    .and_then(status)
                {
                    OutcomeCode::RedirectWithoutLocation(s)
                } else if let Some(s) = other.strip_prefix("http_").and_then(status) {
                    OutcomeCode::Http(s)
                } else {
                    OutcomeCode::Other(other.to_owned())
                }
            }
        }
    }

    /// What a frontier does with a request that ended with this code. `retryable` is what the
    /// part that saw the failure said (a status is retryable when the spider lists it in
    /// `retry_statuses`; a network error when it is transient); the code decides first where
    /// the answer does not depend on it.
    pub fn disposition(&self, retryable: bool) -> Disposition {
        let by_flag = if retryable {
            Disposition::Retry
        } else {
            Disposition::Failed
        };
        match self {
            // The spider's rules say not to fetch it: not an error.
            OutcomeCode::RobotsDisallowed | OutcomeCode::RedirectOffDomain => Disposition::Dropped,
            // Not the request's fault: try again without consuming a retry.
            OutcomeCode::NoDownloader | OutcomeCode::AgentStopping | OutcomeCode::RobotsFetched => {
                Disposition::Released
            }
            // Transient, whatever the sender thought.
            OutcomeCode::RobotsUnavailable | OutcomeCode::ProxyBanned => Disposition::Retry,
            // The page itself, or the request, is wrong: trying again gives the same answer.
            OutcomeCode::InvalidUrl
            | OutcomeCode::InvalidRedirect
            | OutcomeCode::TooManyRedirects
            | OutcomeCode::RedirectWithoutLocation(_)
            | OutcomeCode::ParseBudget
            | OutcomeCode::PrivateAddress => Disposition::Failed,
            // The sender knows (a status in `retry_statuses`, a transient network error).
            OutcomeCode::Timeout
            | OutcomeCode::Connect
            | OutcomeCode::Dns
            | OutcomeCode::Tls
            | OutcomeCode::BodyTooLarge
            | OutcomeCode::Truncated
            | OutcomeCode::Protocol
            | OutcomeCode::Proxy
            | OutcomeCode::InvalidConfig
            | OutcomeCode::Http(_)
            | OutcomeCode::ParseFailed
            | OutcomeCode::AgentLost
            | OutcomeCode::Other(_) => by_flag,
        }
    }
}

impl fmt::Display for OutcomeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

impl From<&str> for OutcomeCode {
    fn from(text: &str) -> Self {
        OutcomeCode::parse(text)
    }
}

impl From<String> for OutcomeCode {
    fn from(text: String) -> Self {
        match OutcomeCode::parse(&text) {
            OutcomeCode::Other(_) => OutcomeCode::Other(text),
            known => known,
        }
    }
}

impl From<OutcomeCode> for String {
    fn from(code: OutcomeCode) -> Self {
        match code {
            OutcomeCode::Other(text) => text,
            known => known.as_str().into_owned(),
        }
    }
}

impl PartialEq<str> for OutcomeCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for OutcomeCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for OutcomeCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_str())
    }
}

impl<'de> Deserialize<'de> for OutcomeCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(OutcomeCode::from(String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &[
        "timeout",
        "connect",
        "dns",
        "tls",
        "body_too_large",
        "truncated",
        "protocol",
        "proxy",
        "invalid_url",
        "invalid_config",
        "http_503",
        "http_301_without_location",
        "proxy_banned",
        "too_many_redirects",
        "invalid_redirect",
        "redirect_off_domain",
        "robots_disallowed",
        "robots_unavailable",
        "robots_fetched",
        "parse_budget",
        "parse_failed",
        "no_downloader",
        "agent_stopping",
        "agent_lost",
        "private_address",
    ];

    #[test]
    fn every_known_code_round_trips_and_none_is_other() {
        for text in KNOWN {
            let code = OutcomeCode::parse(text);
            assert!(!matches!(code, OutcomeCode::Other(_)), "{text}");
            assert_eq!(code.as_str(), *text);
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<OutcomeCode>(&json).unwrap(), code);
        }
    }

    #[test]
    fn unknown_codes_keep_their_text() {
        for text in [
            "from_a_newer_agent",
            "http_5",
            "http_5031",
            "http_abc",
            "",
            "Timeout",
        ] {
            let code = OutcomeCode::parse(text);
            assert_eq!(code, OutcomeCode::Other(text.to_owned()), "{text}");
            assert_eq!(code.as_str(), text);
            assert_eq!(String::from(code), text);
        }
    }

    #[test]
    fn dispositions() {
        use Disposition::*;
        let cases: &[(&str, bool, Disposition)] = &[
            ("robots_disallowed", true, Dropped),
            ("redirect_off_domain", false, Dropped),
            ("no_downloader", false, Released),
            ("agent_stopping", true, Released),
            ("robots_fetched", false, Released),
            ("robots_unavailable", false, Retry),
            ("proxy_banned", false, Retry),
            ("too_many_redirects", true, Failed),
            ("parse_budget", true, Failed),
            ("http_503", true, Retry),
            ("http_404", false, Failed),
            ("timeout", true, Retry),
            ("tls", false, Failed),
            ("from_a_newer_agent", true, Retry),
            ("from_a_newer_agent", false, Failed),
        ];
        for (text, retryable, want) in cases {
            assert_eq!(
                OutcomeCode::parse(text).disposition(*retryable),
                *want,
                "{text} retryable={retryable}"
            );
        }
    }
}
