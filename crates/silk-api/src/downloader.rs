//! [`DownloaderConfig`]: what an `allocate` command's `config` holds — the typed form of
//! `silk_bus::Command::Allocate::config`, and the `downloader` of a run or job request. The
//! hub checks it when a run or job is submitted ([`DownloaderConfig::problems`], unknown keys
//! refused); the agent compiles it (`silk_agent`).
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

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use silk_core::{CommandSpec, SpiderSpec};

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

/// One trimming rule: exactly one of its keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrimRule {
    /// Keep the outer HTML of the elements this CSS selector matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub css: Option<String>,
    /// Keep the nodes this XPath 1.0 expression selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xpath: Option<String>,
    /// Keep the matches of this regex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
}

impl DownloaderConfig {
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

    /// What is wrong with the values that can be judged without an agent, each naming its
    /// key: limits, timeouts, statuses, the ban regex, a proxy list together with a provider.
    /// The spider, the trimming rules' selectors, the commands and the proxy URLs are
    /// judged by the agent that compiles the config (it has the engines and the commands).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
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
        if let Some(re) = &proxies.switch_on_regex
            && let Err(e) = regex::Regex::new(re)
        {
            p.push(format!(
                "proxies.switch_on_regex: invalid regex `{re}`: {e}"
            ));
        }
        if let Some(redial) = &self.redial
            && redial.timeout_ms == 0
        {
            p.push("redial.timeout_ms: must be at least 1".into());
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(v: serde_json::Value) -> Result<DownloaderConfig, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn every_bad_value_is_named_at_once() {
        let c = config(json!({
            "spider": "name: t\nstart_urls: ['http://127.0.0.1:1/']\n",
            "qps": 0,
            "max_return_body_bytes": 2,
            "proxies": {"list": ["http://127.0.0.1:3128"], "provider": {"command": "p"},
                        "provider_timeout_ms": 0, "switch_on_status": [200, 42, 700],
                        "switch_on_regex": "("},
            "redial": {"command": ["redial"], "timeout_ms": 0}
        }))
        .unwrap();
        let problems = c.problems();
        for key in [
            "qps:",
            "max_return_body_bytes:",
            "proxies: give either list or provider",
            "proxies.provider_timeout_ms:",
            "proxies.switch_on_status[1]: 42",
            "proxies.switch_on_status[2]: 700",
            "proxies.switch_on_regex: invalid regex `(`",
            "redial.timeout_ms:",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(key)),
                "{key}: {problems:?}"
            );
        }
        assert_eq!(problems.len(), 8, "{problems:?}");
        assert!(DownloaderConfig::for_spider_yaml("x").problems().is_empty());
    }

    #[test]
    fn unknown_keys_are_refused_at_every_level() {
        for (v, key) in [
            (json!({"spider": "x", "qpss": 1}), "qpss"),
            (json!({"spider": "x", "proxies": {"lisst": []}}), "lisst"),
            (
                json!({"spider": "x", "trim": {"rules": [{"csss": "a"}]}}),
                "csss",
            ),
            (
                json!({"spider": "x", "redial": {"command": "r", "timeout": 1}}),
                "timeout",
            ),
        ] {
            let err = config(v).unwrap_err();
            assert!(err.contains(&format!("unknown field `{key}`")), "{err}");
        }
    }

    #[test]
    fn the_json_form_round_trips() {
        let mut c = DownloaderConfig::for_spider_yaml("name: t\n");
        c.qps = Some(2.5);
        c.proxies.switch_on_regex = Some("captcha".into());
        assert_eq!(config(c.to_json()).unwrap(), c);
    }
}
