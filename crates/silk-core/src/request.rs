//! The [`Request`]: one URL to fetch, with what the frontier and the downloaders need to know
//! about it. It is stored in the frontier and travels on the bus, so its serde form is a wire
//! format: add fields with `#[serde(default)]`, never rename or remove one.

use crate::canon::{self, CanonRules, Fingerprint};
use crate::error::CoreError;
use crate::ids::AgentId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use url::Url;

/// HTTP method of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// GET
    #[default]
    Get,
    /// HEAD
    Head,
    /// POST
    Post,
}

impl Method {
    /// The method as sent on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
        }
    }
}

/// One URL to fetch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The URL that is fetched: the canonical URL (fetching the canonical form is what makes
    /// tracking variants and fragments cost nothing).
    pub url: String,
    /// HTTP method.
    #[serde(default)]
    pub method: Method,
    /// Request body (POST).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Vec<u8>>,
    /// Request headers of its own (a program's request, e.g. Scrapy's), beside the spider's;
    /// not part of the dedup fingerprint.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Link distance from a start URL (start URLs are 0).
    #[serde(default)]
    pub depth: u32,
    /// Base priority; higher is fetched first. Aging raises it while the request waits.
    #[serde(default)]
    pub priority: i32,
    /// When the request was first enqueued, ms since the epoch (aging reads it).
    #[serde(default)]
    pub created_ms: u64,
    /// How many times it was tried and failed with a retryable error.
    #[serde(default)]
    pub retries: u32,
    /// How many redirects led to it (bounded by the spider's `max_redirects`).
    #[serde(default)]
    pub redirects: u32,
    /// The agent that must fetch it (chained allocation), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
    /// Free-form metadata carried to results (router task params, referer, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, serde_json::Value>,
    /// Extra text mixed into the dedup fingerprint: requests that differ only in it are not
    /// duplicates. The router's job outbound sets it to the delivery id
    /// (`task_uuid:routed_count`), so that a task routed again (a retry) is fetched again
    /// while the same delivery pushed twice is fetched once. `None` for crawled links.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_salt: Option<String>,
}

impl Request {
    /// A GET request for `raw` (absolute, or relative to `base`), canonicalised by `rules`.
    pub fn get(raw: &str, base: Option<&Url>, rules: &CanonRules) -> Result<Self, CoreError> {
        let url = canon::canonicalize_str(raw, base, rules)?;
        Ok(Self::from_canonical(url.into()))
    }

    /// A GET request for a URL that is already canonical.
    pub fn from_canonical(url: String) -> Self {
        Self {
            url,
            method: Method::Get,
            body: None,
            headers: BTreeMap::new(),
            depth: 0,
            priority: 0,
            created_ms: 0,
            retries: 0,
            redirects: 0,
            agent: None,
            meta: BTreeMap::new(),
            dedup_salt: None,
        }
    }

    /// A link found on this request's page, to the canonical `url`: one level deeper, the
    /// same priority. (The engine, and the hub for its agents' results, both make links so.)
    pub fn link(&self, url: String) -> Request {
        let mut r = Request::from_canonical(url);
        r.depth = self.depth.saturating_add(1);
        r.priority = self.priority;
        r
    }

    /// The target of this request's redirect, to the canonical `url`: the same depth,
    /// priority and meta, one more hop, and a salted request's salt with the hop number —
    /// per hop, so that a redirect back to a URL seen before (A → A, A → B → A) is fetched
    /// and ends in `too_many_redirects` rather than as a duplicate, while a routed task's
    /// redirect is fetched even if the URL was seen before. (The engine, the agent and the
    /// hub all make redirect targets so.)
    pub fn redirect_target(&self, url: String) -> Request {
        let mut r = Request::from_canonical(url);
        r.depth = self.depth;
        r.priority = self.priority;
        r.redirects = self.redirects + 1;
        r.meta = self.meta.clone();
        r.dedup_salt = self
            .dedup_salt
            .as_ref()
            .map(|s| format!("{s}#r{}", r.redirects));
        r
    }

    /// The dedup key of this request: method, URL, body and [`dedup_salt`](Self::dedup_salt).
    pub fn fingerprint(&self) -> Fingerprint {
        match &self.dedup_salt {
            None => canon::fingerprint(self.method.as_str(), &self.url, self.body.as_deref()),
            Some(salt) => canon::fingerprint_salted(
                self.method.as_str(),
                &self.url,
                self.body.as_deref(),
                salt,
            ),
        }
    }

    /// The politeness key (host and explicit port) of this request's URL.
    pub fn host_key(&self) -> String {
        Url::parse(&self.url)
            .map(|u| canon::host_key(&u))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_redirect_targets_inherit_what_they_should() {
        let mut req = Request::from_canonical("http://a.test/x".into());
        req.depth = 2;
        req.priority = 5;
        req.redirects = 1;
        req.meta.insert("task".into(), serde_json::json!({"id": 1}));
        req.dedup_salt = Some("t1:0".into());
        let link = req.link("http://a.test/y".into());
        assert_eq!((link.depth, link.priority, link.redirects), (3, 5, 0));
        assert!(link.meta.is_empty() && link.dedup_salt.is_none());
        let target = req.redirect_target("http://a.test/x".into());
        assert_eq!((target.depth, target.priority, target.redirects), (2, 5, 2));
        assert_eq!(target.meta, req.meta);
        assert_eq!(target.dedup_salt.as_deref(), Some("t1:0#r2"));
        // A redirect back to the same URL is another request for dedup (per hop).
        assert_ne!(target.fingerprint(), req.fingerprint());
        let unsalted = Request::from_canonical("http://a.test/x".into());
        assert!(
            unsalted
                .redirect_target("http://a.test/z".into())
                .dedup_salt
                .is_none()
        );
    }
}
