//! Compiling a run's [`DownloaderConfig`] (what an `allocate` command's `config` holds; its
//! schema and format are `silk_api::downloader`, which the hub checks at submit): the values
//! any hub can judge ([`DownloaderConfig::problems`]), then the spider, the extractor, the
//! trimming rules, the commands (against the agent's `CommandPolicy`) and the fetcher — every
//! problem reported at once, each naming its key.
//!
//! Ban detection (`switch_on_*`) is active only when the run has proxies (a list or a
//! provider) or a `redial` command; without either there is nothing to switch, and a 403 is
//! an ordinary `http_403` result. A banned request is reported as the retryable error
//! `proxy_banned`; the proxy is taken out of rotation for `cooldown_ms`, and `redial` runs
//! once per ban (bans seen by requests that started before the last redial do not redial
//! again).

use crate::command::{CommandPolicy, ResolvedCommand};
use crate::error::AgentError;
use crate::trim::Trimmer;
use regex::Regex;
pub use silk_api::downloader::{
    DownloaderConfig, ProxyConfig, RedialConfig, SpiderSource, TrimConfig, TrimRule,
};
use silk_core::spider::Spider;
use silk_core::{RunId, SpiderSpec};
use silk_fetch::{AddressPolicy, Extractor, FetchConfig, FetchError, Fetcher, ProxyPool};

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

/// Reads the `config` of an allocate command for `run`.
pub(crate) fn from_json(
    run: &RunId,
    config: serde_json::Value,
) -> Result<DownloaderConfig, AgentError> {
    serde_json::from_value(config).map_err(|e| AgentError::InvalidConfig {
        run: run.clone(),
        problems: vec![e.to_string()],
    })
}

/// Checks every value and compiles the rules; all problems are reported at once (the
/// values any hub checks, [`DownloaderConfig::problems`], then what takes the agent's
/// engines and commands). Commands are resolved against `commands`: a raw one the agent
/// does not allow, or a name it does not define, is a problem like any other (the
/// allocation is refused).
pub(crate) fn compile(
    config: &DownloaderConfig,
    run: &RunId,
    commands: &CommandPolicy,
    network: &AddressPolicy,
) -> Result<CompiledConfig, AgentError> {
    let this = config;
    let mut p: Vec<String> = this.problems();
    let spec = match &this.spider {
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
    let spider = spec.and_then(|spec| match Spider::new_seedless(spec) {
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
    let trimmer = match Trimmer::compile(&this.trim.rules) {
        Ok(t) => t,
        Err(problems) => {
            p.extend(problems);
            None
        }
    };
    let proxies = &this.proxies;
    let provider = proxies.provider.as_ref().and_then(|c| {
        commands
            .resolve("proxies.provider", c, proxies.provider_timeout_ms)
            .map_err(|e| p.push(e))
            .ok()
    });
    // Invalid ones are among `problems()`.
    let ban_regex = proxies
        .switch_on_regex
        .as_deref()
        .and_then(|r| Regex::new(r).ok());
    let mut redial = None;
    if let Some(config) = &this.redial {
        redial = commands
            .resolve("redial.command", &config.command, config.timeout_ms)
            .map_err(|e| p.push(e))
            .ok();
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
    fetch.address_policy = Some(network.clone());
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
        parse_trimmed: this.trim.parse_trimmed,
        return_body: this.return_body,
        max_return_body_bytes: usize::try_from(this.max_return_body_bytes).unwrap_or(usize::MAX),
        qps: this.qps,
        ban: BanRules {
            active: has_proxies || this.redial.is_some(),
            statuses: proxies.switch_on_status.clone(),
            regex: ban_regex,
        },
        fetch,
        fetcher,
        provider,
        redial,
    })
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
    use silk_core::CommandSpec;

    const YAML: &str = "name: t\nstart_urls: [\"http://127.0.0.1:1/\"]\n";

    fn compile_json(v: serde_json::Value) -> Result<CompiledConfig, String> {
        let raw = CommandPolicy {
            allow_raw: true,
            ..CommandPolicy::default()
        };
        let run = RunId::new("r1");
        from_json(&run, v)
            .and_then(|c| compile(&c, &run, &raw, &AddressPolicy::default()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn commands_follow_the_agents_policy() {
        let run = RunId::new("r1");
        let config = |v: serde_json::Value| from_json(&run, v).unwrap();
        let raw = config(
            json!({"spider": YAML, "proxies": {"provider": "touch pwned"},
            "redial": {"command": ["pppoe-start"]}}),
        );
        let err = compile(
            &raw,
            &run,
            &CommandPolicy::default(),
            &AddressPolicy::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("proxies.provider: raw commands are not allowed")
                && err.contains("redial.command: raw commands are not allowed"),
            "{err}"
        );
        let named = config(json!({"spider": YAML, "proxies": {"provider": {"command": "p"}}}));
        let err = compile(
            &named,
            &run,
            &CommandPolicy::default(),
            &AddressPolicy::default(),
        )
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
        let compiled = compile(&named, &run, &policy, &AddressPolicy::default()).unwrap();
        assert_eq!(compiled.provider.unwrap().timeout_ms, 10_000);
    }

    #[test]
    fn minimal_yaml_and_spec_forms() {
        let c = compile_json(json!({"spider": YAML})).unwrap();
        assert!(!c.ban.active);
        assert!(c.fetcher.is_some());
        let spec = SpiderSpec::parse(YAML, "t").unwrap();
        let c =
            compile_json(json!({"spider": spec, "proxies": {"list": ["http://127.0.0.1:3128"]}}))
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
        let back = from_json(&RunId::new("r"), c.to_json()).unwrap();
        assert_eq!(back.spider, SpiderSource::Spec(Box::new(spec)));
        let err = compile_json(
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
        let back = from_json(&RunId::new("r"), c.to_json()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn every_problem_is_named() {
        let err = compile_json(json!({
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
                json!({"spider": {"name": "t", "start_urls": 3}}),
                "spider: invalid type",
            ),
            (json!({"spider": YAML, "qsp": 1}), "unknown field `qsp`"),
            (json!(null), "invalid type"),
            (json!({"spider": "name: [unclosed"}), "spider"),
            (
                json!({"spider": YAML, "proxies": {"list": ["http://127.0.0.1:1"]}, "return_body": "yes"}),
                "invalid type",
            ),
        ] {
            let err = compile_json(v.clone()).unwrap_err();
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
