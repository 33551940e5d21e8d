//! The declarative spider (design §5): what to crawl, what to follow, what to extract, and how
//! politely. [`SpiderSpec`] is the file's serde form, parsed from YAML with unknown keys
//! rejected (serde names the key, line and column); [`SpiderSpec::parse`] also validates every
//! value it can without I/O and reports all problems at once. [`Spider`] is the compiled form
//! (regexes, canonicalisation rules, start URLs) with the pure decisions: is a host allowed,
//! is a link followed, does a page produce an item.
//!
//! CSS, XPath and JSON-path rules are compiled by `silk-fetch`, which owns the parsers; this
//! module only checks that exactly one of them is given. Every key is documented in
//! `docs/spider.md`: keep the two in step.

use crate::canon::{CanonRules, host_key, host_key_str, split_host_key};
use crate::error::CoreError;
use regex::Regex;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use url::Url;

/// A spider file as written (defaults filled in).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpiderSpec {
    /// Name of the spider (used in logs and file names).
    pub name: String,
    /// Where the crawl starts (may be empty when `expand` gives the start requests).
    #[serde(default)]
    pub start_urls: Vec<String>,
    /// Start requests expanded from URL templates and their parameters, fed to the frontier
    /// in batches (see [`crate::expand`]): one `{template, params}` or a list of them.
    #[serde(
        default,
        deserialize_with = "crate::expand::one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub expand: Vec<crate::expand::ExpandSpec>,
    /// Host names whose pages are fetched (subdomains included); empty = any host.
    #[serde(default)]
    pub allowed_domains: Vec<String>,
    /// Links deeper than this many hops from a start URL are not followed.
    #[serde(default)]
    pub max_depth: Option<u32>,
    /// Stop after this many pages fetched successfully.
    #[serde(default)]
    pub max_pages: Option<u64>,
    /// Stop once this many items are written (distinct on the item key; counts across
    /// resumes). An item past it is not written.
    #[serde(default)]
    pub max_items: Option<u64>,
    /// Stop after this long (ms); the run can be resumed later.
    #[serde(default)]
    pub max_duration_ms: Option<u64>,
    /// Which links to follow; absent = every `a[href]` on an allowed host; `[]` = none.
    #[serde(default)]
    pub follow: Option<Vec<FollowRule>>,
    /// Fields to extract: field name → rule.
    #[serde(default)]
    pub extract: BTreeMap<String, ExtractRule>,
    /// Pages whose canonical URL matches this regex produce an item (default: every page).
    #[serde(default)]
    pub item_when: Option<String>,
    /// The field that identifies an item (default `url`); no two items share a key.
    #[serde(default = "default_item_key")]
    pub item_key: String,
    /// Parameters removed from URLs, added to the defaults (`utm_*`, `callback`, `_`,
    /// `jsessionid`, `fbclid`, `gclid`); `name*` is a prefix.
    #[serde(default)]
    pub ignore_params: Vec<String>,
    /// Regex → replacement rewrites applied, in order, to canonical URLs.
    #[serde(default, deserialize_with = "ordered_pairs")]
    pub canonical_rewrites: Vec<(String, String)>,
    /// Requests in flight at once, all hosts together.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// Requests in flight at once to one host.
    #[serde(default = "default_per_host_concurrency")]
    pub per_host_concurrency: u32,
    /// Minimum gap between the starts of two requests to one host, ms.
    #[serde(default = "default_per_host_delay_ms")]
    pub per_host_delay_ms: u64,
    /// Honour robots.txt (allow/deny and crawl-delay).
    #[serde(default = "default_true")]
    pub robots: bool,
    /// The User-Agent header (also the robots.txt agent name).
    #[serde(default = "default_user_agent")]
    pub user_agent: String,
    /// Extra request headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Keep cookies across the crawl's requests (one jar per crawl).
    #[serde(default = "default_true")]
    pub cookies: bool,
    /// Time allowed for one request, connect to last byte, ms.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Retries of a request after a retryable failure (network error, 5xx, 429, 408).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Base of the exponential retry back-off, ms (`base * 2^retries`, capped at 5 min).
    #[serde(default = "default_retry_backoff_ms")]
    pub retry_backoff_ms: u64,
    /// HTTP statuses that are retried.
    #[serde(default = "default_retry_statuses")]
    pub retry_statuses: Vec<u16>,
    /// Bodies larger than this fail the request (`body_too_large`).
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
    /// Redirects followed from one start of a chain; then the request fails.
    #[serde(default = "default_max_redirects")]
    pub max_redirects: u32,
    /// The parse budget: an HTML page whose elements nest deeper than this is not parsed
    /// (the request fails with `parse_budget`).
    #[serde(default = "default_max_html_depth")]
    pub max_html_depth: u32,
    /// The parse budget: an HTML page with more elements than this is not parsed.
    #[serde(default = "default_max_html_elements")]
    pub max_html_elements: u64,
    /// The parse budget: a page whose parsing and extraction take longer than this fails
    /// (`parse_budget`); the thread that parses it is abandoned, the crawl goes on.
    #[serde(default = "default_parse_timeout_ms")]
    pub parse_timeout_ms: u64,
    /// Proxy URL (http, https, socks5) or a list of them used in turn.
    #[serde(default, deserialize_with = "one_or_many")]
    pub proxy: Vec<String>,
    /// `none` (dedup forever) or a duration (`1d`, `7d`, `12h`): a URL is fetched again in
    /// the next time segment.
    #[serde(default = "default_segment")]
    pub recrawl_segment: String,
    /// How long the seen URLs of a past segment are kept before they are deleted (a
    /// duration; `0s` deletes them as soon as their segment is over).
    #[serde(default = "default_segment")]
    pub segment_retention: String,
    /// How many URLs the dedup Bloom filter is sized for (it grows past it, less efficiently).
    #[serde(default = "default_expected_urls")]
    pub expected_urls: u64,
    /// Target false-positive rate of the Bloom filter (false positives are confirmed exactly,
    /// unless `exact_dedup` is false).
    #[serde(default = "default_bloom_fp_rate")]
    pub bloom_fp_rate: f64,
    /// Confirm the Bloom filter's "maybe seen" against the store (no URL is ever taken for
    /// one it is not). `false`: the Bloom filter decides alone, as in seed 002 — no store
    /// read per duplicate, and about `bloom_fp_rate` of new URLs are taken for seen ones.
    #[serde(default = "default_true")]
    pub exact_dedup: bool,
    /// The frontier's scheduler window: about this many pending requests are held in memory
    /// (twice as many while politeness holds the ones in it); the others wait in the store
    /// and are loaded in batches, in the order they were enqueued. Memory depends on this,
    /// not on how many URLs are pending.
    #[serde(default = "default_memory_window")]
    pub memory_window: u64,
    /// Priority aging threshold `beta` (design §3).
    #[serde(default = "default_aging_beta")]
    pub aging_beta: f64,
    /// A leased request not acked within this time is dispatched again, ms.
    #[serde(default = "default_lease_timeout_ms")]
    pub lease_timeout_ms: u64,
}

/// Which links to follow.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FollowRule {
    /// Regexes on the canonical URL; empty = any.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Regexes on the canonical URL; a match is never followed.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Where to look for links (CSS); default every `a[href]`.
    #[serde(default)]
    pub css: Option<String>,
}

/// How to extract one field.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExtractRule {
    /// CSS selector; the text of the first match (or `attr`).
    #[serde(default)]
    pub css: Option<String>,
    /// XPath 1.0 expression.
    #[serde(default)]
    pub xpath: Option<String>,
    /// Regex on the decoded body; capture group 1 if it has one, else the whole match.
    #[serde(default)]
    pub regex: Option<String>,
    /// JSON path (RFC 9535) on a JSON body, or else on the page's JSON-LD scripts.
    #[serde(default)]
    pub json: Option<String>,
    /// With `css`/`xpath`: take this attribute instead of the text.
    #[serde(default)]
    pub attr: Option<String>,
    /// Take every match as a list instead of the first.
    #[serde(default)]
    pub all: bool,
}

/// The one source kind of an [`ExtractRule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtractKind {
    /// CSS selector.
    Css,
    /// XPath.
    Xpath,
    /// Regex.
    Regex,
    /// JSON path.
    Json,
}

impl ExtractRule {
    /// The rule's kind and expression, or `None` when zero or several are given.
    pub fn source(&self) -> Option<(ExtractKind, &str)> {
        let all = [
            (ExtractKind::Css, &self.css),
            (ExtractKind::Xpath, &self.xpath),
            (ExtractKind::Regex, &self.regex),
            (ExtractKind::Json, &self.json),
        ];
        let mut given = all
            .iter()
            .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)));
        let first = given.next()?;
        given.next().is_none().then_some(first)
    }
}

fn default_item_key() -> String {
    "url".into()
}
fn default_concurrency() -> u32 {
    16
}
fn default_per_host_concurrency() -> u32 {
    2
}
fn default_per_host_delay_ms() -> u64 {
    250
}
fn default_true() -> bool {
    true
}
fn default_user_agent() -> String {
    format!("silk/{}", env!("CARGO_PKG_VERSION"))
}
fn default_timeout_ms() -> u64 {
    30_000
}
/// Retries of a request when the spider does not say (`max_retries`).
pub const DEFAULT_MAX_RETRIES: u32 = 3;

fn default_max_retries() -> u32 {
    DEFAULT_MAX_RETRIES
}
fn default_retry_backoff_ms() -> u64 {
    1_000
}
fn default_retry_statuses() -> Vec<u16> {
    vec![408, 429, 500, 502, 503, 504]
}
fn default_max_body_bytes() -> u64 {
    16 * 1024 * 1024
}
fn default_max_redirects() -> u32 {
    10
}
fn default_max_html_depth() -> u32 {
    1_024
}
fn default_max_html_elements() -> u64 {
    1_000_000
}
fn default_parse_timeout_ms() -> u64 {
    10_000
}
fn default_segment() -> String {
    "1d".into()
}
fn default_expected_urls() -> u64 {
    1_000_000
}
/// The scheduler window when the spider does not say (`memory_window`): half a million
/// pending requests, about 30 MB of scheduler.
pub const DEFAULT_MEMORY_WINDOW: u64 = 500_000;

fn default_memory_window() -> u64 {
    DEFAULT_MEMORY_WINDOW
}
fn default_bloom_fp_rate() -> f64 {
    0.01
}
fn default_aging_beta() -> f64 {
    0.5
}
/// The lease timeout when the spider does not say (`lease_timeout_ms`).
pub const DEFAULT_LEASE_TIMEOUT_MS: u64 = 120_000;

fn default_lease_timeout_ms() -> u64 {
    DEFAULT_LEASE_TIMEOUT_MS
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
    })
}

fn ordered_pairs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<(String, String)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of regex: replacement (or a list of [regex, replacement] pairs)")
        }
        // Written back (and sent on the bus) as a list of pairs: a JSON object would lose the
        // order, and the order of rewrites matters.
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut q: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(pair) = q.next_element::<(String, String)>()? {
                out.push(pair);
            }
            Ok(out)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((k, v)) = m.next_entry::<String, String>()? {
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

impl SpiderSpec {
    /// Parses and validates a spider file; `file` names it in errors. Start URLs are
    /// checked when it is compiled ([`Spider::new`]; a program's settings need none).
    pub fn parse(yaml: &str, file: &str) -> Result<Self, CoreError> {
        let spec: SpiderSpec =
            serde_yaml_ng::from_str(yaml).map_err(|e| CoreError::SpiderSyntax {
                file: file.to_owned(),
                message: e.to_string(),
            })?;
        let mut problems = spec.problems();
        problems.retain(|p| p != NO_SEEDS);
        if problems.is_empty() {
            Ok(spec)
        } else {
            Err(CoreError::SpiderInvalid {
                file: file.to_owned(),
                problems,
            })
        }
    }

    /// Whether the spider file sets the top-level `key` itself (rather than leaving it to
    /// the default). False for a text that is not a YAML mapping.
    pub fn sets(yaml: &str, key: &str) -> bool {
        match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(yaml) {
            Ok(serde_yaml_ng::Value::Mapping(map)) => map.contains_key(key),
            _ => false,
        }
    }

    /// Every invalid value, as `key: reason` lines (empty when the spec is valid).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.name.trim().is_empty() {
            p.push("name: must not be empty".into());
        }
        if self.start_urls.is_empty() && self.expand.is_empty() {
            p.push(NO_SEEDS.into());
        }
        for (i, e) in self.expand.iter().enumerate() {
            p.extend(e.problems(&crate::expand::at_of(self.expand.len(), i)));
        }
        if self.max_html_depth == 0 {
            p.push("max_html_depth: must be at least 1".into());
        }
        if self.max_html_elements == 0 {
            p.push("max_html_elements: must be at least 1".into());
        }
        if self.parse_timeout_ms == 0 {
            p.push("parse_timeout_ms: must be at least 1".into());
        }
        let rules = CanonRules::new(&self.ignore_params, &self.canonical_rewrites);
        match &rules {
            Err(e) => p.push(e.to_string()),
            Ok(rules) => {
                for (i, u) in self.start_urls.iter().enumerate() {
                    if let Err(e) = crate::canon::canonicalize_str(u, None, rules) {
                        p.push(format!("start_urls[{i}]: {e}"));
                    }
                }
            }
        }
        for (i, rule) in self.follow.iter().flatten().enumerate() {
            for (j, re) in rule.allow.iter().enumerate() {
                if let Err(e) = Regex::new(re) {
                    p.push(format!("follow[{i}].allow[{j}]: invalid regex `{re}`: {e}"));
                }
            }
            for (j, re) in rule.deny.iter().enumerate() {
                if let Err(e) = Regex::new(re) {
                    p.push(format!("follow[{i}].deny[{j}]: invalid regex `{re}`: {e}"));
                }
            }
        }
        for (name, rule) in &self.extract {
            match rule.source() {
                None => p.push(format!(
                    "extract.{name}: give exactly one of css, xpath, regex, json"
                )),
                Some((ExtractKind::Regex, re)) => {
                    if let Err(e) = Regex::new(re) {
                        p.push(format!("extract.{name}.regex: invalid regex `{re}`: {e}"));
                    }
                }
                Some(_) => {}
            }
            if rule.attr.is_some()
                && !matches!(
                    rule.source(),
                    Some((ExtractKind::Css | ExtractKind::Xpath, _))
                )
            {
                p.push(format!("extract.{name}.attr: only with css or xpath"));
            }
        }
        if let Some(re) = &self.item_when
            && let Err(e) = Regex::new(re)
        {
            p.push(format!("item_when: invalid regex `{re}`: {e}"));
        }
        if self.item_key != "url" && !self.extract.contains_key(&self.item_key) {
            p.push(format!(
                "item_key: `{}` is neither `url` nor a field of extract",
                self.item_key
            ));
        }
        if self.concurrency == 0 {
            p.push("concurrency: must be at least 1".into());
        }
        if self.per_host_concurrency == 0 {
            p.push("per_host_concurrency: must be at least 1".into());
        }
        if self.timeout_ms == 0 {
            p.push("timeout_ms: must be at least 1".into());
        }
        if !(self.bloom_fp_rate > 0.0 && self.bloom_fp_rate < 1.0) {
            p.push("bloom_fp_rate: must be between 0 and 1 (exclusive)".into());
        }
        if self.memory_window == 0 {
            p.push("memory_window: must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.aging_beta) {
            p.push("aging_beta: must be between 0 and 1".into());
        }
        if let Err(e) = parse_segment(&self.recrawl_segment) {
            p.push(e.to_string());
        }
        if let Err(e) = parse_retention(&self.segment_retention) {
            p.push(e.to_string());
        }
        for (i, proxy) in self.proxy.iter().enumerate() {
            match Url::parse(proxy) {
                Ok(u) if matches!(u.scheme(), "http" | "https" | "socks5" | "socks5h") => {}
                Ok(u) => p.push(format!(
                    "proxy[{i}]: unsupported scheme `{}` (http, https, socks5)",
                    u.scheme()
                )),
                Err(e) => p.push(format!("proxy[{i}]: invalid url `{proxy}`: {e}")),
            }
        }
        for (i, (k, _)) in self.headers.iter().enumerate() {
            if k.is_empty() || !k.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                p.push(format!("headers[{i}]: invalid header name `{k}`"));
            }
        }
        p
    }

    /// The recrawl segment length; `None` = dedup forever.
    pub fn segment(&self) -> Option<Duration> {
        parse_segment(&self.recrawl_segment).ok().flatten()
    }

    /// How long a past segment's seen URLs are kept (a day when the value is invalid, which
    /// `problems` reports).
    pub fn segment_retention(&self) -> Duration {
        parse_retention(&self.segment_retention).unwrap_or(Duration::from_secs(86_400))
    }
}

/// Parses a `segment_retention` value: a duration such as `1d`, `12h` or `0s`.
pub fn parse_retention(s: &str) -> Result<Duration, CoreError> {
    humantime::parse_duration(s.trim()).map_err(|e| CoreError::InvalidDuration {
        at: "segment_retention".into(),
        value: s.into(),
        reason: e.to_string(),
    })
}

/// Parses a `recrawl_segment` value: `none`, or a duration such as `1d`, `7d`, `12h`.
pub fn parse_segment(s: &str) -> Result<Option<Duration>, CoreError> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let err = |reason: String| CoreError::InvalidDuration {
        at: "recrawl_segment".into(),
        value: s.into(),
        reason,
    };
    let d = humantime::parse_duration(s.trim()).map_err(|e| err(e.to_string()))?;
    if d.as_millis() == 0 {
        return Err(err("must be longer than zero (or `none`)".into()));
    }
    Ok(Some(d))
}

/// A compiled follow rule.
#[derive(Debug, Clone)]
pub struct CompiledFollow {
    allow: Vec<Regex>,
    deny: Vec<Regex>,
    /// The CSS selector that finds links (`None` = every `a[href]`).
    pub css: Option<String>,
}

impl CompiledFollow {
    /// Whether a canonical URL passes this rule's allow/deny regexes.
    pub fn accepts(&self, url: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|r| r.is_match(url)))
            && !self.deny.iter().any(|r| r.is_match(url))
    }
}

/// A validated spider with its regexes compiled: the pure decisions of a crawl.
#[derive(Debug, Clone)]
pub struct Spider {
    /// The spec it was built from.
    pub spec: SpiderSpec,
    /// Canonicalisation rules.
    pub canon: CanonRules,
    /// Follow rules (`None` = follow every link on allowed hosts).
    pub follow: Option<Vec<CompiledFollow>>,
    item_when: Option<Regex>,
    allowed: Allowed,
}

/// `allowed_domains`, compiled for lookups: a host is checked with one hash lookup per label,
/// whatever the number of domains (a crawl of 200 hosts checks each of ~35 links per page).
#[derive(Debug, Clone, Default)]
struct Allowed {
    /// Domains (lower case, no trailing dot): the host or one of its parent domains must be
    /// one of them.
    domains: std::collections::HashSet<String>,
    /// Entries with a port (`127.0.0.2:9000`, lower case): the host key must be one of them.
    keys: std::collections::HashSet<String>,
}

impl Allowed {
    fn new(entries: &[String]) -> Allowed {
        let mut allowed = Allowed::default();
        for d in entries {
            let d = d.trim().trim_end_matches('.').to_ascii_lowercase();
            if d.contains(':') && !d.starts_with('[') {
                allowed.keys.insert(d);
            } else {
                allowed.domains.insert(d);
            }
        }
        allowed
    }

    fn is_empty(&self) -> bool {
        self.domains.is_empty() && self.keys.is_empty()
    }

    /// Whether the host key `key` (`host` or `host:port`) is allowed.
    fn allows(&self, key: &str) -> bool {
        let lower;
        let key = if key.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = key.to_ascii_lowercase();
            lower.as_str()
        } else {
            key
        };
        if self.keys.contains(key) {
            return true;
        }
        let (host, _) = split_host_key(key);
        if self.domains.contains(host) {
            return true;
        }
        host.match_indices('.')
            .any(|(i, _)| self.domains.contains(&host[i + 1..]))
    }
}

/// The problem of a spider without start URLs.
const NO_SEEDS: &str = "start_urls: at least one URL is needed (or an `expand` template)";

impl Spider {
    /// Compiles a spec (which must have passed [`SpiderSpec::parse`]).
    pub fn new(spec: SpiderSpec) -> Result<Self, CoreError> {
        Self::compile(spec, true)
    }

    /// Compiles a spec that may have no start URLs: the settings of a program run (whose
    /// program enqueues its own requests) and of an agent's downloader (which never seeds).
    pub fn new_seedless(spec: SpiderSpec) -> Result<Self, CoreError> {
        Self::compile(spec, false)
    }

    /// Parses, validates and compiles a spider file that may have no start URLs (see
    /// [`Spider::new_seedless`]).
    pub fn from_yaml_seedless(yaml: &str, file: &str) -> Result<Self, CoreError> {
        Self::new_seedless(SpiderSpec::parse(yaml, file)?)
    }

    fn compile(spec: SpiderSpec, seeds_needed: bool) -> Result<Self, CoreError> {
        let mut problems = spec.problems();
        if !seeds_needed {
            problems.retain(|p| p != NO_SEEDS);
        }
        if !problems.is_empty() {
            return Err(CoreError::SpiderInvalid {
                file: spec.name.clone(),
                problems,
            });
        }
        let canon = CanonRules::new(&spec.ignore_params, &spec.canonical_rewrites)?;
        let compile = |at: String, v: &[String]| {
            v.iter()
                .enumerate()
                .map(|(j, r)| {
                    Regex::new(r).map_err(|e| CoreError::InvalidRegex {
                        at: format!("{at}[{j}]"),
                        pattern: r.clone(),
                        reason: e.to_string(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let follow = match &spec.follow {
            None => None,
            Some(rules) => Some(
                rules
                    .iter()
                    .enumerate()
                    .map(|(i, r)| {
                        Ok(CompiledFollow {
                            allow: compile(format!("follow[{i}].allow"), &r.allow)?,
                            deny: compile(format!("follow[{i}].deny"), &r.deny)?,
                            css: r.css.clone(),
                        })
                    })
                    .collect::<Result<Vec<_>, CoreError>>()?,
            ),
        };
        let item_when = spec
            .item_when
            .as_deref()
            .map(Regex::new)
            .transpose()
            .map_err(|e| CoreError::InvalidRegex {
                at: "item_when".into(),
                pattern: spec.item_when.clone().unwrap_or_default(),
                reason: e.to_string(),
            })?;
        let allowed = Allowed::new(&spec.allowed_domains);
        Ok(Self {
            spec,
            canon,
            follow,
            item_when,
            allowed,
        })
    }

    /// Parses, validates and compiles a spider file.
    pub fn from_yaml(yaml: &str, file: &str) -> Result<Self, CoreError> {
        Self::new(SpiderSpec::parse(yaml, file)?)
    }

    /// Whether pages of `url`'s host may be fetched (`allowed_domains`, subdomains included;
    /// an entry with a port must match host and port).
    pub fn host_allowed(&self, url: &Url) -> bool {
        if self.allowed.is_empty() {
            return true;
        }
        self.allowed.allows(&host_key(url))
    }

    /// [`Spider::host_allowed`] for a URL that is already canonical, without parsing it.
    pub fn canonical_host_allowed(&self, canonical: &str) -> bool {
        if self.allowed.is_empty() {
            return true;
        }
        host_key_str(canonical).is_some_and(|key| self.allowed.allows(key))
    }

    /// Whether a page at `url` produces an item.
    pub fn wants_item(&self, url: &str) -> bool {
        self.item_when.as_ref().is_none_or(|r| r.is_match(url))
    }

    /// Whether a link found at `depth` (the depth of the link's target) may be followed at all.
    pub fn depth_allowed(&self, depth: u32) -> bool {
        self.spec.max_depth.is_none_or(|m| depth <= m)
    }

    /// The canonical start URLs.
    pub fn start_urls(&self) -> Vec<Url> {
        self.spec
            .start_urls
            .iter()
            .filter_map(|u| crate::canon::canonicalize_str(u, None, &self.canon).ok())
            .collect()
    }

    /// Resolves the spider's `expand` with the run's `args` and a reader of its files
    /// (`None`: it has none). The first request of each template must be a URL Silk can
    /// fetch.
    pub fn expansion(
        &self,
        args: &BTreeMap<String, String>,
        read: &mut dyn FnMut(&str) -> Result<String, String>,
    ) -> Result<Option<crate::expand::Expansion>, CoreError> {
        if self.spec.expand.is_empty() {
            return Ok(None);
        }
        let expansion = crate::expand::Expansion::compile(&self.spec.expand, args, read)?;
        let mut problems = Vec::new();
        for (i, first) in expansion.firsts().enumerate() {
            if let Some(e) = expansion.get(first)
                && let Err(err) = crate::canon::canonicalize_str(&e.url, None, &self.canon)
            {
                problems.push(format!(
                    "{}.template: its first request `{}` is not a URL Silk fetches: {err}",
                    crate::expand::at_of(self.spec.expand.len(), i),
                    e.url
                ));
            }
        }
        if !problems.is_empty() {
            return Err(CoreError::ExpandInvalid { problems });
        }
        Ok(Some(expansion))
    }

    /// Requests `from..from + n` of `expansion` (fewer past its end), as start requests
    /// (depth 0, their parameters in `meta.params`); those that are not fetchable URLs or
    /// are outside the allowed domains are left out.
    pub fn expanded_requests(
        &self,
        expansion: &crate::expand::Expansion,
        from: u64,
        n: u64,
    ) -> Vec<crate::Request> {
        let end = from.saturating_add(n).min(expansion.total());
        (from..end)
            .filter_map(|i| expansion.get(i))
            .filter_map(|e| {
                let url = crate::canon::canonicalize_str(&e.url, None, &self.canon).ok()?;
                if !self.host_allowed(&url) {
                    return None;
                }
                let mut r = crate::Request::from_canonical(url.into());
                r.meta
                    .insert("params".into(), serde_json::Value::Object(e.params));
                Some(r)
            })
            .collect()
    }

    /// The requests the spider starts from: its start URLs within its allowed domains (one
    /// mapping for the local engine and the hub's runs).
    pub fn seed_requests(&self) -> Vec<crate::Request> {
        self.start_urls()
            .into_iter()
            .filter(|u| self.host_allowed(u))
            .map(|u| crate::Request::from_canonical(u.into()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "name: t\nstart_urls: [\"http://127.0.0.1:8000/\"]\n";

    #[test]
    fn defaults_fill_in() {
        let s = SpiderSpec::parse(MINIMAL, "t.yaml").unwrap();
        assert_eq!(s.concurrency, 16);
        assert_eq!(s.item_key, "url");
        assert!(s.robots);
        assert_eq!(s.segment(), Some(Duration::from_secs(86_400)));
        assert_eq!(s.segment_retention(), Duration::from_secs(86_400));
        let s = SpiderSpec::parse(&format!("{MINIMAL}segment_retention: 0s\n"), "t.yaml").unwrap();
        assert_eq!(s.segment_retention(), Duration::ZERO);
        let err = SpiderSpec::parse(&format!("{MINIMAL}segment_retention: later\n"), "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("segment_retention"), "{err}");
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = SpiderSpec::parse("name: t\nstart_urls: []\nfollw: []\n", "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("follw"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(err.starts_with("t.yaml:"), "{err}");
    }

    #[test]
    fn all_problems_at_once() {
        let yaml = "name: t\nstart_urls: [\"ftp://x/\"]\nfollow: [{allow: [\"(\"]}]\nitem_when: \"[\"\nrecrawl_segment: soon\nextract: {a: {css: x, regex: y}}\n";
        let err = SpiderSpec::parse(yaml, "t.yaml").unwrap_err();
        let CoreError::SpiderInvalid { problems, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(problems.len(), 5, "{problems:?}");
        let msg = err.to_string();
        for needle in [
            "start_urls[0]",
            "follow[0].allow[0]",
            "item_when",
            "recrawl_segment",
            "extract.a",
        ] {
            assert!(msg.contains(needle), "{needle} missing in {msg}");
        }
    }

    #[test]
    fn malformed_yaml_is_an_error() {
        assert!(SpiderSpec::parse("name: [unclosed\n", "t.yaml").is_err());
        assert!(SpiderSpec::parse("", "t.yaml").is_err());
        assert!(SpiderSpec::parse("- a\n- b\n", "t.yaml").is_err());
    }

    #[test]
    fn proxy_one_or_many_and_rewrites_in_order() {
        let yaml = format!(
            "{MINIMAL}proxy: socks5://127.0.0.1:1080\ncanonical_rewrites:\n  'b$': c\n  'a': b\n"
        );
        let s = SpiderSpec::parse(&yaml, "t.yaml").unwrap();
        assert_eq!(s.proxy, vec!["socks5://127.0.0.1:1080"]);
        assert_eq!(
            s.canonical_rewrites,
            vec![("b$".into(), "c".into()), ("a".into(), "b".into())]
        );
    }

    #[test]
    fn spec_round_trips_through_yaml() {
        let yaml = format!(
            "{MINIMAL}canonical_rewrites:\n  'b$': c\n  'a': b\nproxy: [http://127.0.0.1:1]\n"
        );
        let spec = SpiderSpec::parse(&yaml, "t.yaml").unwrap();
        let text = serde_yaml_ng::to_string(&spec).unwrap();
        assert_eq!(SpiderSpec::parse(&text, "again.yaml").unwrap(), spec);
    }

    #[test]
    fn an_expanding_spider_needs_no_start_urls_and_makes_start_requests_by_index() {
        let yaml = "name: t\nallowed_domains: [a.example]\nexpand:\n  template: 'http://{+host}/s?q={kw}&utm_source=x'\n  params: {host: [a.example, b.example], kw: {arg: kw}}\n";
        let spider = Spider::from_yaml(yaml, "t.yaml").unwrap();
        assert!(spider.seed_requests().is_empty());
        let args = BTreeMap::from([("kw".to_string(), "red hats,shoes".to_string())]);
        let expansion = spider
            .expansion(&args, &mut |_| Err("no files".into()))
            .unwrap()
            .unwrap();
        assert_eq!(expansion.total(), 4);
        // b.example is not an allowed domain; the canonical form drops utm_*.
        let requests = spider.expanded_requests(&expansion, 0, 10);
        let urls: Vec<&str> = requests.iter().map(|r| r.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "http://a.example/s?q=red%20hats",
                "http://a.example/s?q=shoes"
            ]
        );
        assert_eq!(requests[1].meta["params"]["kw"], "shoes");
        assert_eq!(requests[1].depth, 0);
        assert_eq!(spider.expanded_requests(&expansion, 1, 1).len(), 1);
        // Neither start URLs nor a template: the spider has nowhere to start.
        let err = Spider::from_yaml("name: t\n", "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("an `expand` template"), "{err}");
        // A template that makes no fetchable URL is named when the run starts.
        let bad = Spider::from_yaml(
            "name: t\nexpand: {template: 'ftp://{h}/', params: {h: [x]}}\n",
            "t.yaml",
        )
        .unwrap();
        let err = bad
            .expansion(&BTreeMap::new(), &mut |_| Err("none".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("expand.template: its first request `ftp://x/`"),
            "{err}"
        );
    }

    #[test]
    fn host_allowed_with_subdomains_and_ports() {
        let yaml = format!("{MINIMAL}allowed_domains: [example.com, \"127.0.0.2:9000\"]\n");
        let s = Spider::from_yaml(&yaml, "t.yaml").unwrap();
        let ok = |u: &str| s.host_allowed(&Url::parse(u).unwrap());
        assert!(ok("http://example.com/"));
        assert!(ok("http://www.example.com/"));
        assert!(!ok("http://badexample.com/"));
        assert!(ok("http://127.0.0.2:9000/"));
        assert!(!ok("http://127.0.0.2:9001/"));
        assert!(ok("http://A.B.Example.COM/"));
        assert!(!ok("http://example.co/"));
        assert!(!ok("http://com/"));
        for u in [
            "http://www.example.com/x",
            "http://badexample.com/",
            "http://127.0.0.2:9000/",
            "http://127.0.0.2:9001/",
        ] {
            assert_eq!(s.canonical_host_allowed(u), ok(u), "{u}");
        }
    }
}
