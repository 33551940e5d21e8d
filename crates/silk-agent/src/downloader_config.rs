//! [`DownloaderConfig`]: what an `allocate` command's `config` holds — the typed form of
//! `silk_bus::Command::Allocate::config` — and its compiled form.
//!
//! # Format
//!
//! JSON (the hub builds it from the job); unknown keys are refused, every invalid value is
//! reported at once, each naming its key. Durations are in ms.
//!
//! ```json
//! {
//!   "spider": "name: shop\nstart_urls: [\"http://127.0.0.1:8000/\"]\n…",
//!   "qps": 5.0,
//!   "trim": {"rules": [{"css": "div.main"}, {"xpath": "//h1"}, {"regex": "price: \\d+"}],
//!            "parse_trimmed": false},
//!   "return_body": true,
//!   "max_return_body_bytes": 524288,
//!   "proxies": {"list": ["http://127.0.0.1:3128", "socks5://u:p@127.0.0.1:1080"],
//!               "provider": {"command": "proxies-cn"},
//!               "provider_timeout_ms": 10000,
//!               "switch_on_status": [403, 429],
//!               "switch_on_regex": "captcha|verify you are human",
//!               "switch_after_failures": 3,
//!               "cooldown_ms": 60000},
//!   "redial": {"command": {"command": "redial-adsl"}, "timeout_ms": 60000}
//! }
//! ```
//!
//! | key | meaning |
//! |-----|---------|
//! | `spider` | **required.** The spider: its YAML text (a string) or its `SpiderSpec` as a JSON object. The downloader takes from it the user agent, headers, cookies on/off, timeout, body limit, redirects limit, retry statuses, robots.txt on/off, the proxy list (unless `proxies` gives one), the follow rules (links) and the extract rules (item fields; every item also gets `url`). |
//! | `qps` | Most requests per second this run makes *on this agent*; absent = no cap (the hub's per-host politeness still applies). |
//! | `trim.rules` | Trimming rules, each exactly one of `css`, `xpath`, `regex` (see `trim`). |
//! | `trim.parse_trimmed` | `false` (default): links and fields come from the whole page and trimming shapes only the returned body. `true`: they come from the trimmed page. |
//! | `return_body` | Send the page body back with the result (trimmed when there are rules): UTF-8 text for text pages, base64 otherwise. Default `false`. |
//! | `max_return_body_bytes` | A returned body (as sent: text, or base64) is cut to this and marked `truncated`. Default 524288 (the bus's messages are at most 1 MiB). |
//! | `proxies.list` | Proxy URLs (`http`, `https`, `socks5`, `socks5h`), used in turn; replaces the spider's `proxy`. |
//! | `proxies.provider` | A command whose stdout lines are proxy URLs (blank lines and `#` comments skipped). `{"command": NAME}` names a command defined on the agent; a raw command — a list (program and arguments) or a string (run with `sh -c`) — runs only on an agent that allows raw commands (see `command`). Run when the downloader is created, and again when every proxy is out of rotation. Not with `list`. |
//! | `proxies.provider_timeout_ms` | How long the provider may run. Default 10000. |
//! | `proxies.switch_on_status` | Response statuses that mean "this proxy (or address) is banned". Default `[403, 429]`. |
//! | `proxies.switch_on_regex` | A regex on the page text that means the same (a captcha marker). |
//! | `proxies.switch_after_failures` | Consecutive proxy-level failures (refused, unreachable, tunnel or SOCKS errors) of one proxy that take it out of rotation; 0 = never. Default 3. |
//! | `proxies.cooldown_ms` | How long a switched-away proxy stays out of rotation. Default 60000. |
//! | `redial.command` | A command run after a ban is detected (ADSL re-dial), before the run's requests continue: requests wait while it runs. Same forms as `proxies.provider`. |
//! | `redial.timeout_ms` | How long it may run (then it is killed). Default 60000. A named command's own `timeout_ms` wins. |
//!
//! Ban detection (`switch_on_*`) is active only when the run has proxies (a list or a
//! provider) or a `redial` command; without either there is nothing to switch, and a 403 is
//! an ordinary `http_403` result. A banned request is reported as the retryable error
//! `proxy_banned`; the proxy is taken out of rotation for `cooldown_ms`, and `redial` runs
//! once per ban (bans seen by requests that started before the last redial do not redial
//! again).

use crate::command::{CommandPolicy, ResolvedCommand};
use crate::error::AgentError;
pub use crate::trim::TrimRule;
use crate::trim::Trimmer;
use regex::Regex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use silk_core::spider::Spider;
use silk_core::{CommandSpec, RunId, SpiderSpec};
use silk_fetch::{Extractor, FetchConfig, FetchError, Fetcher, ProxyPool};

/// The configuration of one run's downloader (see the module doc for the format).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DownloaderConfig {
    /// The spider: YAML text or a spec.
    pub spider: SpiderSource,
    /// Requests per second cap of this run on this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps: Option<f64>,
    /// Trimming rules.
    #[serde(default)]
    pub trim: TrimConfig,
    /// Send the (trimmed) body back with each result.
    #[serde(default)]
    pub return_body: bool,
    /// Longest returned body, as sent.
    #[serde(default = "default_max_return_body_bytes")]
    pub max_return_body_bytes: u64,
    /// Proxies and when to switch them.
    #[serde(default)]
    pub proxies: ProxyConfig,
    /// The re-dial command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redial: Option<RedialConfig>,
}

/// The spider of a downloader: YAML text (a JSON string) or a spec (a JSON object).
#[derive(Debug, Clone, PartialEq)]
pub enum SpiderSource {
    /// A spider file's text.
    Yaml(String),
    /// A spider spec.
    Spec(Box<SpiderSpec>),
}

impl Serialize for SpiderSource {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SpiderSource::Yaml(text) => s.serialize_str(text),
            SpiderSource::Spec(spec) => spec.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for SpiderSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(text) => Ok(SpiderSource::Yaml(text)),
            serde_json::Value::Object(mut fields) => {
                // `canonical_rewrites` is ordered: a JSON object cannot keep its order through
                // `serde_json::Value`, so a list of `[regex, replacement]` pairs (what
                // `SpiderSpec` serializes to) is read here; an object is still accepted.
                let rewrites = fields.remove("canonical_rewrites");
                let mut spec = serde_json::from_value::<SpiderSpec>(fields.into())
                    .map_err(|e| D::Error::custom(format!("spider: {e}")))?;
                if let Some(r) = rewrites {
                    spec.canonical_rewrites = rewrite_pairs(r)
                        .map_err(|e| D::Error::custom(format!("spider.canonical_rewrites: {e}")))?;
                }
                Ok(SpiderSource::Spec(Box::new(spec)))
            }
            other => Err(D::Error::custom(format!(
                "spider: expected the spider's YAML text or its spec as an object, found {}",
                json_type(&other)
            ))),
        }
    }
}

/// `[[regex, replacement], …]`, `{regex: replacement, …}` or `null`.
fn rewrite_pairs(v: serde_json::Value) -> Result<Vec<(String, String)>, String> {
    use serde_json::Value;
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(r) => Ok((k, r)),
                other => Err(format!(
                    "`{k}`: expected a string, found {}",
                    json_type(&other)
                )),
            })
            .collect(),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Array(pair) => match pair.as_slice() {
                    [Value::String(a), Value::String(b)] => Ok((a.clone(), b.clone())),
                    _ => Err(format!("[{i}]: expected [regex, replacement]")),
                },
                other => Err(format!(
                    "[{i}]: expected [regex, replacement], found {}",
                    json_type(&other)
                )),
            })
            .collect(),
        other => Err(format!(
            "expected a list of [regex, replacement] pairs, found {}",
            json_type(&other)
        )),
    }
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Trimming rules of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrimConfig {
    /// The rules, applied in order.
    #[serde(default)]
    pub rules: Vec<TrimRule>,
    /// Parse links and fields from the trimmed page instead of the whole page.
    #[serde(default)]
    pub parse_trimmed: bool,
}

/// Proxies of a run and when to switch them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Proxy URLs; replaces the spider's `proxy` when not empty.
    #[serde(default)]
    pub list: Vec<String>,
    /// A command printing proxy URLs, one per line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<CommandSpec>,
    /// How long the provider may run.
    #[serde(default = "default_provider_timeout_ms")]
    pub provider_timeout_ms: u64,
    /// Statuses that mean "banned".
    #[serde(default = "default_switch_on_status")]
    pub switch_on_status: Vec<u16>,
    /// A regex on the page text that means "banned".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_on_regex: Option<String>,
    /// Consecutive proxy-level failures that take a proxy out of rotation; 0 = never.
    #[serde(default = "default_switch_after_failures")]
    pub switch_after_failures: u32,
    /// How long a proxy stays out of rotation.
    #[serde(default = "default_cooldown_ms")]
    pub cooldown_ms: u64,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            list: Vec::new(),
            provider: None,
            provider_timeout_ms: default_provider_timeout_ms(),
            switch_on_status: default_switch_on_status(),
            switch_on_regex: None,
            switch_after_failures: default_switch_after_failures(),
            cooldown_ms: default_cooldown_ms(),
        }
    }
}

/// The re-dial command of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedialConfig {
    /// What to run.
    pub command: CommandSpec,
    /// How long it may run.
    #[serde(default = "default_redial_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_max_return_body_bytes() -> u64 {
    512 * 1024
}
fn default_provider_timeout_ms() -> u64 {
    10_000
}
fn default_switch_on_status() -> Vec<u16> {
    vec![403, 429]
}
fn default_switch_after_failures() -> u32 {
    3
}
fn default_cooldown_ms() -> u64 {
    60_000
}
fn default_redial_timeout_ms() -> u64 {
    60_000
}

/// Ban detection of a run.
#[derive(Debug, Clone)]
pub(crate) struct BanRules {
    /// Whether detection runs at all (the run has proxies or a redial command).
    pub(crate) active: bool,
    pub(crate) statuses: Vec<u16>,
    pub(crate) regex: Option<Regex>,
}

/// A downloader config checked and compiled: everything a downloader needs that does not
/// take I/O to build.
pub(crate) struct CompiledConfig {
    pub(crate) spider: Spider,
    pub(crate) extractor: Extractor,
    pub(crate) trimmer: Option<Trimmer>,
    pub(crate) parse_trimmed: bool,
    pub(crate) return_body: bool,
    pub(crate) max_return_body_bytes: usize,
    pub(crate) qps: Option<f64>,
    pub(crate) ban: BanRules,
    /// The fetch settings; `proxies` is the static list (empty with a provider).
    pub(crate) fetch: FetchConfig,
    /// A fetcher built from `fetch` while checking it (used as is unless a provider gives
    /// the proxies).
    pub(crate) fetcher: Option<Fetcher>,
    pub(crate) provider: Option<ResolvedCommand>,
    pub(crate) redial: Option<ResolvedCommand>,
}

impl std::fmt::Debug for CompiledConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledConfig")
            .field("spider", &self.spider.spec.name)
            .field("fetch", &self.fetch)
            .field("qps", &self.qps)
            .finish_non_exhaustive()
    }
}

impl DownloaderConfig {
    /// Reads the `config` of an allocate command for `run`.
    pub fn from_json(run: &RunId, config: serde_json::Value) -> Result<Self, AgentError> {
        serde_json::from_value(config).map_err(|e| AgentError::InvalidConfig {
            run: run.clone(),
            problems: vec![e.to_string()],
        })
    }

    /// A config for a spider's YAML text, everything else default.
    pub fn for_spider_yaml(yaml: impl Into<String>) -> Self {
        Self {
            spider: SpiderSource::Yaml(yaml.into()),
            qps: None,
            trim: TrimConfig::default(),
            return_body: false,
            max_return_body_bytes: default_max_return_body_bytes(),
            proxies: ProxyConfig::default(),
            redial: None,
        }
    }

    /// The config as the JSON an allocate command carries.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// Checks every value and compiles the rules; all problems are reported at once.
    /// Commands are resolved against `commands`: a raw one the agent does not allow, or a
    /// name it does not define, is a problem like any other (the allocation is refused).
    pub(crate) fn compile(
        &self,
        run: &RunId,
        commands: &CommandPolicy,
    ) -> Result<CompiledConfig, AgentError> {
        let mut p: Vec<String> = Vec::new();
        let spec = match &self.spider {
            SpiderSource::Yaml(text) => match SpiderSpec::parse(text, "spider") {
                Ok(spec) => Some(spec),
                Err(e) => {
                    p.push(e.to_string());
                    None
                }
            },
            SpiderSource::Spec(spec) => {
                let problems = spec.problems();
                p.extend(problems.iter().map(|m| format!("spider: {m}")));
                problems.is_empty().then(|| (**spec).clone())
            }
        };
        let spider = spec.and_then(|spec| match Spider::new(spec) {
            Ok(s) => Some(s),
            Err(e) => {
                p.push(format!("spider: {e}"));
                None
            }
        });
        let extractor = spider.as_ref().and_then(|s| match Extractor::compile(s) {
            Ok(x) => Some(x),
            Err(e) => {
                p.push(format!("spider: {e}"));
                None
            }
        });
        let trimmer = match Trimmer::compile(&self.trim.rules) {
            Ok(t) => t,
            Err(problems) => {
                p.extend(problems);
                None
            }
        };
        if let Some(qps) = self.qps
            && !(qps.is_finite() && qps >= 0.001)
        {
            p.push(format!("qps: must be at least 0.001, not {qps}"));
        }
        if self.max_return_body_bytes < 4 {
            p.push("max_return_body_bytes: must be at least 4".into());
        }
        let proxies = &self.proxies;
        if proxies.provider.is_some() && !proxies.list.is_empty() {
            p.push("proxies: give either list or provider, not both".into());
        }
        let provider = proxies.provider.as_ref().and_then(|c| {
            commands
                .resolve("proxies.provider", c, proxies.provider_timeout_ms)
                .map_err(|e| p.push(e))
                .ok()
        });
        if proxies.provider_timeout_ms == 0 {
            p.push("proxies.provider_timeout_ms: must be at least 1".into());
        }
        for (i, status) in proxies.switch_on_status.iter().enumerate() {
            if !(100..=599).contains(status) {
                p.push(format!(
                    "proxies.switch_on_status[{i}]: {status} is not an HTTP status"
                ));
            }
        }
        let ban_regex = match proxies.switch_on_regex.as_deref().map(Regex::new) {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                p.push(format!(
                    "proxies.switch_on_regex: invalid regex `{}`: {e}",
                    proxies.switch_on_regex.as_deref().unwrap_or_default()
                ));
                None
            }
            None => None,
        };
        let mut redial = None;
        if let Some(config) = &self.redial {
            redial = commands
                .resolve("redial.command", &config.command, config.timeout_ms)
                .map_err(|e| p.push(e))
                .ok();
            if config.timeout_ms == 0 {
                p.push("redial.timeout_ms: must be at least 1".into());
            }
        }
        let (Some(spider), Some(extractor)) = (spider, extractor) else {
            return Err(invalid(run, p));
        };
        let mut fetch = FetchConfig::from_spider(&spider.spec);
        if !proxies.list.is_empty() {
            fetch.proxies = proxies.list.clone();
        }
        if proxies.provider.is_some() {
            fetch.proxies.clear();
        }
        fetch.proxy_max_failures = proxies.switch_after_failures;
        fetch.proxy_cooldown_ms = proxies.cooldown_ms;
        let fetcher = match Fetcher::new(fetch.clone()) {
            Ok(f) => Some(f),
            Err(FetchError::InvalidConfig { problems }) => {
                let key = if proxies.list.is_empty() {
                    "spider"
                } else {
                    "proxies.list"
                };
                p.extend(problems.into_iter().map(|m| format!("{key}: {m}")));
                None
            }
            Err(e) => {
                p.push(format!("spider: {e}"));
                None
            }
        };
        if !p.is_empty() {
            return Err(invalid(run, p));
        }
        let has_proxies = !fetch.proxies.is_empty() || proxies.provider.is_some();
        Ok(CompiledConfig {
            spider,
            extractor,
            trimmer,
            parse_trimmed: self.trim.parse_trimmed,
            return_body: self.return_body,
            max_return_body_bytes: usize::try_from(self.max_return_body_bytes)
                .unwrap_or(usize::MAX),
            qps: self.qps,
            ban: BanRules {
                active: has_proxies || self.redial.is_some(),
                statuses: proxies.switch_on_status.clone(),
                regex: ban_regex,
            },
            fetch,
            fetcher,
            provider,
            redial,
        })
    }
}

fn invalid(run: &RunId, problems: Vec<String>) -> AgentError {
    AgentError::InvalidConfig {
        run: run.clone(),
        problems,
    }
}

/// Checks a provider's output: proxy URLs, one per line; blank lines and `#` comments are
/// skipped. Every bad line is reported.
pub(crate) fn parse_proxy_lines(stdout: &str) -> Result<Vec<String>, String> {
    let lines: Vec<String> = stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if lines.is_empty() {
        return Err("printed no proxy".into());
    }
    match ProxyPool::new(&lines, 0, 0) {
        Ok(_) => Ok(lines),
        Err(e) => Err(format!("printed unusable proxies: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const YAML: &str = "name: t\nstart_urls: [\"http://127.0.0.1:1/\"]\n";

    fn compile(v: serde_json::Value) -> Result<CompiledConfig, String> {
        let raw = CommandPolicy {
            allow_raw: true,
            ..CommandPolicy::default()
        };
        let run = RunId::new("r1");
        DownloaderConfig::from_json(&run, v)
            .and_then(|c| c.compile(&run, &raw))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn commands_follow_the_agents_policy() {
        let run = RunId::new("r1");
        let config = |v: serde_json::Value| DownloaderConfig::from_json(&run, v).unwrap();
        let raw = config(
            json!({"spider": YAML, "proxies": {"provider": "touch pwned"},
            "redial": {"command": ["pppoe-start"]}}),
        );
        let err = raw
            .compile(&run, &CommandPolicy::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("proxies.provider: raw commands are not allowed")
                && err.contains("redial.command: raw commands are not allowed"),
            "{err}"
        );
        let named = config(json!({"spider": YAML, "proxies": {"provider": {"command": "p"}}}));
        let err = named
            .compile(&run, &CommandPolicy::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("no command `p` is defined"), "{err}");
        let mut policy = CommandPolicy::default();
        policy.defined.insert(
            "p".into(),
            crate::command::CommandDef {
                argv: Some(vec!["echo".into()]),
                ..Default::default()
            },
        );
        let compiled = named.compile(&run, &policy).unwrap();
        assert_eq!(compiled.provider.unwrap().timeout_ms, 10_000);
    }

    #[test]
    fn minimal_yaml_and_spec_forms() {
        let c = compile(json!({"spider": YAML})).unwrap();
        assert!(!c.ban.active);
        assert!(c.fetcher.is_some());
        let spec = SpiderSpec::parse(YAML, "t").unwrap();
        let c = compile(json!({"spider": spec, "proxies": {"list": ["http://127.0.0.1:3128"]}}))
            .unwrap();
        assert!(c.ban.active);
        assert_eq!(c.ban.statuses, vec![403, 429]);
        assert_eq!(c.fetch.proxies, vec!["http://127.0.0.1:3128".to_owned()]);
    }

    #[test]
    fn spec_rewrites_keep_their_order() {
        let yaml = format!("{YAML}canonical_rewrites:\n  'z$': a\n  'a': b\n");
        let spec = SpiderSpec::parse(&yaml, "t").unwrap();
        let c = DownloaderConfig {
            spider: SpiderSource::Spec(Box::new(spec.clone())),
            ..DownloaderConfig::for_spider_yaml("")
        };
        let back = DownloaderConfig::from_json(&RunId::new("r"), c.to_json()).unwrap();
        assert_eq!(back.spider, SpiderSource::Spec(Box::new(spec)));
        let err = compile(
            json!({"spider": {"name": "t", "start_urls": ["http://127.0.0.1:1/"],
            "canonical_rewrites": [["a"]]}}),
        )
        .unwrap_err();
        assert!(err.contains("spider.canonical_rewrites: [0]"), "{err}");
    }

    #[test]
    fn round_trips_through_json() {
        let mut c = DownloaderConfig::for_spider_yaml(YAML);
        c.qps = Some(2.5);
        c.redial = Some(RedialConfig {
            command: CommandSpec::Argv(vec!["true".into()]),
            timeout_ms: 5,
        });
        let back = DownloaderConfig::from_json(&RunId::new("r"), c.to_json()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn every_problem_is_named() {
        let err = compile(json!({
            "spider": "name: t\nstart_urls: [\"http://127.0.0.1:1/\"]\nextract: {a: {css: \"[[\"}}\n",
            "qps": 0,
            "trim": {"rules": [{"css": "p", "regex": "x"}]},
            "proxies": {"list": ["ftp://x"], "provider": "", "switch_on_status": [42],
                        "switch_on_regex": "("},
            "redial": {"command": [], "timeout_ms": 0}
        }))
        .unwrap_err();
        for needle in [
            "run `r1`",
            "extract.a.css",
            "qps",
            "trim.rules[0]",
            "either list or provider",
            "proxies.provider: empty command",
            "switch_on_status[0]",
            "switch_on_regex",
            "redial.command",
            "redial.timeout_ms",
        ] {
            assert!(err.contains(needle), "{needle} missing in {err}");
        }
    }

    #[test]
    fn bad_shapes_are_errors_not_panics() {
        for (v, needle) in [
            (json!({}), "missing field `spider`"),
            (json!({"spider": 3}), "spider: expected"),
            (
                json!({"spider": {"name": "t"}}),
                "spider: missing field `start_urls`",
            ),
            (json!({"spider": YAML, "qsp": 1}), "unknown field `qsp`"),
            (json!(null), "invalid type"),
            (json!({"spider": "name: [unclosed"}), "spider"),
            (
                json!({"spider": YAML, "proxies": {"list": ["http://127.0.0.1:1"]}, "return_body": "yes"}),
                "invalid type",
            ),
        ] {
            let err = compile(v.clone()).unwrap_err();
            assert!(err.contains(needle), "{v}: {err}");
        }
    }

    #[test]
    fn provider_lines() {
        assert_eq!(
            parse_proxy_lines("# list\nhttp://127.0.0.1:1\n\n  socks5://127.0.0.1:2  \n").unwrap(),
            vec!["http://127.0.0.1:1", "socks5://127.0.0.1:2"]
        );
        assert!(parse_proxy_lines("\n# nothing\n").is_err());
        assert!(
            parse_proxy_lines("not a url\n")
                .unwrap_err()
                .contains("proxy[0]")
        );
    }
}
