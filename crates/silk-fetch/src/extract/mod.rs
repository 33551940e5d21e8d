//! Page parsing near the data: the links to follow and the fields of the item, from a
//! spider's follow and extract rules.
//!
//! [`Extractor::compile`] turns the rules into a plan once per crawl, reporting every bad
//! selector, XPath, regex or JSON path at once. [`Extractor::parse`] then runs per page:
//! one streaming `lol_html` pass for links, `<base href>`, JSON-LD and the CSS fields it can
//! stream (the common case, and the one that must reach thousands of pages a second); a full
//! tree only when a rule needs it (`dom`); regexes on the decoded text; JSON paths on a JSON
//! body or the page's JSON-LD.
//!
//! What it must not do: fetch, decide depth or allowed domains (the caller does), or fail on
//! a page: any HTML, however broken, gives a [`Page`] (missing fields are `null`, or `[]`
//! with `all`).

pub mod budget;
mod dom;
mod links;
mod stream;

pub use budget::ParseLimits;

use crate::decode::decode_html_cow;
use crate::error::FetchError;
use regex::Regex;
use serde_json::{Map, Value};
use serde_json_path::JsonPath;
use silk_core::canon::CanonRules;
use silk_core::spider::{CompiledFollow, ExtractKind, Spider};
use std::str::FromStr;
use url::Url;

/// What a page yields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// Links to follow: canonical absolute URLs, in page order, each once, already through
    /// the follow rules' allow/deny (not through allowed domains or depth).
    pub links: Vec<String>,
    /// The extracted fields, by name (empty when the spider extracts nothing or the caller
    /// did not ask for fields).
    pub fields: Map<String, Value>,
    /// Set when the page was not parsed because it is over the parse budget
    /// ([`ParseLimits`]): why. The caller fails the request (`parse_budget`).
    pub over_budget: Option<String>,
}

/// What a parse should compute (both by default): a page deeper than `max_depth` needs no
/// links, a page that `item_when` rejects needs no fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wants {
    /// Extract links.
    pub links: bool,
    /// Extract fields.
    pub fields: bool,
}

impl Default for Wants {
    fn default() -> Self {
        Self {
            links: true,
            fields: true,
        }
    }
}

/// Links found by one selector, accepted by any of its rules (`rules` empty = all).
struct StreamLinkGroup {
    selector: lol_html::Selector,
    rules: Vec<usize>,
}

struct DomLinkGroup {
    selector: scraper::Selector,
    rules: Vec<usize>,
}

/// A CSS field the stream pass can take.
pub(crate) struct StreamField {
    selector: lol_html::Selector,
    attr: Option<String>,
    all: bool,
}

/// A CSS field that needs the tree.
pub(crate) struct DomField {
    selector: scraper::Selector,
    attr: Option<String>,
    all: bool,
}

enum Plan {
    /// Index into `stream_fields`.
    Stream(usize),
    /// Index into `dom_fields`.
    Dom(usize),
    Xpath {
        xpath: skyscraper::xpath::Xpath,
        attr: Option<String>,
        all: bool,
    },
    Regex {
        regex: Regex,
        all: bool,
    },
    Json {
        path: JsonPath,
        all: bool,
    },
}

/// The compiled follow and extract rules of one spider. `Send + Sync`: share one per crawl.
pub struct Extractor {
    canon: CanonRules,
    no_rewrites: bool,
    follow: Vec<CompiledFollow>,
    /// `true` when `follow: []`: the spider follows nothing.
    no_links: bool,
    stream_link_groups: Vec<StreamLinkGroup>,
    /// Non-empty when some follow selector needs the tree: then all links come from it.
    dom_link_groups: Vec<DomLinkGroup>,
    stream_fields: Vec<StreamField>,
    dom_fields: Vec<DomField>,
    fields: Vec<(String, Plan)>,
    base_selector: lol_html::Selector,
    jsonld_selector: lol_html::Selector,
    dom_base_selector: scraper::Selector,
    limits: ParseLimits,
}

impl std::fmt::Debug for Extractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extractor")
            .field(
                "fields",
                &self.fields.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("stream_link_groups", &self.stream_link_groups.len())
            .field("dom_link_groups", &self.dom_link_groups.len())
            .finish_non_exhaustive()
    }
}

const DEFAULT_LINK_CSS: &str = "a[href]";

enum Css {
    Stream(lol_html::Selector),
    Dom(scraper::Selector),
}

/// Compiles a selector for the stream pass if `lol_html` supports it, else for the tree.
fn compile_css(css: &str) -> Result<Css, String> {
    if let Ok(s) = lol_html::Selector::from_str(css) {
        return Ok(Css::Stream(s));
    }
    scraper::Selector::parse(css).map(Css::Dom).map_err(|e| {
        format!(
            "invalid selector `{css}`: {}",
            selector_reason(&e.to_string())
        )
    })
}

/// scraper words some parse errors as "Unexpected error occurred. Please report this to the
/// developer NoQualifiedNameInAttributeSelector"; say "no qualified name in attribute
/// selector" instead, which is what the user needs to read.
fn selector_reason(message: &str) -> String {
    const NOISE: &str = "Please report this to the developer";
    let Some(at) = message.find(NOISE) else {
        return message.to_owned();
    };
    let kind = message[at + NOISE.len()..].trim();
    let mut out = String::with_capacity(kind.len() + 8);
    for (i, ch) in kind.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push(' ');
        }
        out.extend(ch.to_lowercase());
    }
    if out.is_empty() {
        message.to_owned()
    } else {
        out
    }
}

#[cfg(test)]
#[test]
fn selector_reasons_are_readable() {
    let e = compile_css("h1[[").err().unwrap();
    assert!(!e.contains("report this"), "{e}");
    assert!(e.starts_with("invalid selector `h1[[`: "), "{e}");
}

fn internal_selector(css: &str) -> lol_html::Selector {
    lol_html::Selector::from_str(css)
        .unwrap_or_else(|e| unreachable!("built-in selector `{css}`: {e}"))
}

impl Extractor {
    /// Compiles the spider's follow rules and extract rules; every invalid one is reported,
    /// naming its key (`extract.price.css: invalid selector …`, `follow[1].css: …`).
    pub fn compile(spider: &Spider) -> Result<Extractor, FetchError> {
        let mut problems = Vec::new();
        let follow: Vec<CompiledFollow> = spider.follow.clone().unwrap_or_default();
        let no_links = spider.follow.as_ref().is_some_and(Vec::is_empty);
        // Group the rules by selector so that a page is scanned once per distinct selector.
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        if spider.follow.is_none() {
            groups.push((DEFAULT_LINK_CSS.to_owned(), Vec::new()));
        }
        for (i, rule) in follow.iter().enumerate() {
            let css = rule
                .css
                .as_deref()
                .unwrap_or(DEFAULT_LINK_CSS)
                .trim()
                .to_owned();
            match groups.iter_mut().find(|(c, _)| *c == css) {
                Some((_, rules)) => rules.push(i),
                None => groups.push((css, vec![i])),
            }
        }
        let mut stream_link_groups = Vec::new();
        let mut dom_link_groups = Vec::new();
        let mut all_streamable = true;
        for (css, rules) in &groups {
            match compile_css(css) {
                Ok(Css::Stream(selector)) => stream_link_groups.push(StreamLinkGroup {
                    selector,
                    rules: rules.clone(),
                }),
                Ok(Css::Dom(_)) => all_streamable = false,
                Err(e) => {
                    let at = rules
                        .first()
                        .map_or("follow".to_owned(), |i| format!("follow[{i}].css"));
                    problems.push(format!("{at}: {e}"));
                }
            }
        }
        if !all_streamable {
            // One selector needs the tree: take all links from it, to keep document order.
            stream_link_groups.clear();
            for (css, rules) in &groups {
                if let Ok(selector) = scraper::Selector::parse(css) {
                    dom_link_groups.push(DomLinkGroup {
                        selector,
                        rules: rules.clone(),
                    });
                }
            }
        }

        let mut stream_fields = Vec::new();
        let mut dom_fields = Vec::new();
        let mut fields = Vec::new();
        for (name, rule) in &spider.spec.extract {
            let Some((kind, expr)) = rule.source() else {
                problems.push(format!(
                    "extract.{name}: give exactly one of css, xpath, regex, json"
                ));
                continue;
            };
            if rule.attr.is_some() && !matches!(kind, ExtractKind::Css | ExtractKind::Xpath) {
                problems.push(format!("extract.{name}.attr: only with css or xpath"));
                continue;
            }
            let attr = rule.attr.as_ref().map(|a| a.trim().to_ascii_lowercase());
            let all = rule.all;
            let plan = match kind {
                ExtractKind::Css => match compile_css(expr) {
                    Ok(Css::Stream(selector)) => {
                        stream_fields.push(StreamField {
                            selector,
                            attr,
                            all,
                        });
                        Plan::Stream(stream_fields.len() - 1)
                    }
                    Ok(Css::Dom(selector)) => {
                        dom_fields.push(DomField {
                            selector,
                            attr,
                            all,
                        });
                        Plan::Dom(dom_fields.len() - 1)
                    }
                    Err(e) => {
                        problems.push(format!("extract.{name}.css: {e}"));
                        continue;
                    }
                },
                ExtractKind::Xpath => match skyscraper::xpath::parse(expr) {
                    Ok(xpath) => Plan::Xpath { xpath, attr, all },
                    Err(e) => {
                        problems.push(format!(
                            "extract.{name}.xpath: invalid xpath `{expr}`: {}",
                            e.to_string().trim()
                        ));
                        continue;
                    }
                },
                ExtractKind::Regex => match Regex::new(expr) {
                    Ok(regex) => Plan::Regex { regex, all },
                    Err(e) => {
                        problems.push(format!("extract.{name}.regex: invalid regex `{expr}`: {e}"));
                        continue;
                    }
                },
                ExtractKind::Json => match JsonPath::parse(expr) {
                    Ok(path) => Plan::Json { path, all },
                    Err(e) => {
                        problems.push(format!(
                            "extract.{name}.json: invalid json path `{expr}`: {e}"
                        ));
                        continue;
                    }
                },
            };
            fields.push((name.clone(), plan));
        }
        if !problems.is_empty() {
            return Err(FetchError::InvalidConfig { problems });
        }
        Ok(Extractor {
            canon: spider.canon.clone(),
            no_rewrites: !spider.canon.has_rewrites(),
            follow,
            no_links,
            stream_link_groups,
            dom_link_groups,
            stream_fields,
            dom_fields,
            fields,
            base_selector: internal_selector("base[href]"),
            jsonld_selector: internal_selector("script[type]"),
            dom_base_selector: scraper::Selector::parse("base[href]")
                .unwrap_or_else(|e| unreachable!("built-in selector `base[href]`: {e}")),
            limits: ParseLimits {
                max_depth: spider.spec.max_html_depth,
                max_elements: spider.spec.max_html_elements,
            },
        })
    }

    /// Why the decoded HTML page `text` is over the parse budget (see [`budget`]), if it
    /// is: for callers that build a tree of their own (trimming) before [`Extractor::parse`],
    /// which checks by itself.
    pub fn over_budget(&self, text: &str) -> Option<String> {
        budget::check(text, &self.limits).err()
    }

    /// Whether the spider extracts any field.
    pub fn has_fields(&self) -> bool {
        !self.fields.is_empty()
    }

    /// Links and fields of the page at `url` (the URL it was fetched from; relative links
    /// resolve against it or its `<base href>`). `content_type` picks the charset and tells
    /// JSON from HTML.
    pub fn parse(&self, url: &Url, body: &[u8], content_type: Option<&str>) -> Page {
        self.parse_with(url, body, content_type, Wants::default())
    }

    /// [`Extractor::parse`], computing only what `wants` asks for.
    pub fn parse_with(
        &self,
        url: &Url,
        body: &[u8],
        content_type: Option<&str>,
        wants: Wants,
    ) -> Page {
        let want_fields = wants.fields && !self.fields.is_empty();
        let want_links = wants.links && !self.no_links;
        if is_binary(content_type) || (!want_fields && !want_links) {
            return self.page(Vec::new(), want_fields, |_| None);
        }
        let text = decode_html_cow(body, content_type);
        // A body typed as JSON that does not parse is treated as HTML (mislabelled pages).
        if is_json(content_type, &text)
            && let Ok(json) = serde_json::from_str::<Value>(&text)
        {
            return self.page(Vec::new(), want_fields, |plan| match plan {
                Plan::Json { path, all } => {
                    Some(json_values(path, std::slice::from_ref(&json), *all))
                }
                Plan::Regex { regex, all } => Some(regex_values(regex, &text, *all)),
                _ => None,
            });
        }
        if let Err(why) = budget::check(&text, &self.limits) {
            return Page {
                over_budget: Some(why),
                ..Page::default()
            };
        }
        self.parse_html(url, &text, want_links, want_fields)
    }

    fn parse_html(&self, url: &Url, text: &str, want_links: bool, want_fields: bool) -> Page {
        let needs =
            |f: &dyn Fn(&Plan) -> bool| want_fields && self.fields.iter().any(|(_, p)| f(p));
        let want_jsonld = needs(&|p| matches!(p, Plan::Json { .. }));
        let dom_links = want_links && !self.dom_link_groups.is_empty();
        let stream_links = want_links && !dom_links;
        let stream_fields = want_fields && !self.stream_fields.is_empty();
        let out = stream::run(self, url, text, stream_links, stream_fields, want_jsonld);

        let need_scraper = dom_links || needs(&|p| matches!(p, Plan::Dom(_)));
        let scraper_doc = need_scraper.then(|| scraper::Html::parse_document(text));
        let xpath_tree = if needs(&|p| matches!(p, Plan::Xpath { .. })) {
            match skyscraper::html::parse(text) {
                Ok(tree) => Some(tree),
                Err(e) => {
                    tracing::debug!(url = %url, error = %e, "xpath tree could not be built");
                    None
                }
            }
        } else {
            None
        };
        let links = match (&scraper_doc, dom_links) {
            (Some(doc), true) => dom::links(self, doc, url).into_vec(),
            _ => out.links.into_vec(),
        };
        let jsonld: Vec<Value> = out
            .jsonld
            .iter()
            .filter_map(|s| serde_json::from_str(s.trim()).ok())
            .collect();
        let mut stream_values = out.fields;
        self.page(links, want_fields, |plan| match plan {
            Plan::Stream(i) => Some(std::mem::take(&mut stream_values[*i].values).into()),
            Plan::Dom(i) => scraper_doc
                .as_ref()
                .map(|doc| dom::css_values(doc, &self.dom_fields[*i]).into()),
            Plan::Xpath { xpath, attr, all } => xpath_tree
                .as_ref()
                .map(|t| dom::xpath_values(t, xpath, attr.as_deref(), *all).into()),
            Plan::Regex { regex, all } => Some(regex_values(regex, text, *all)),
            Plan::Json { path, all } => Some(json_values(path, &jsonld, *all)),
        })
    }

    /// Assembles the page: `values` gives each field's raw values (`None` = the field does
    /// not apply to this page). Strings of CSS and XPath fields are whitespace-collapsed.
    fn page(
        &self,
        links: Vec<String>,
        want_fields: bool,
        mut values: impl FnMut(&Plan) -> Option<FieldValues>,
    ) -> Page {
        let mut fields = Map::new();
        if want_fields {
            for (name, plan) in &self.fields {
                let all = plan_all(plan, &self.stream_fields, &self.dom_fields);
                let collapse = matches!(plan, Plan::Stream(_) | Plan::Dom(_) | Plan::Xpath { .. });
                let vals: Vec<Value> = match values(plan) {
                    Some(FieldValues::Strings(v)) => v
                        .into_iter()
                        .map(|s| Value::String(if collapse { collapse_whitespace(&s) } else { s }))
                        .collect(),
                    Some(FieldValues::Json(v)) => v,
                    None => Vec::new(),
                };
                let value = if all {
                    Value::Array(vals)
                } else {
                    vals.into_iter().next().unwrap_or(Value::Null)
                };
                fields.insert(name.clone(), value);
            }
        }
        Page {
            links,
            fields,
            over_budget: None,
        }
    }
}

/// A field's raw results.
enum FieldValues {
    Strings(Vec<String>),
    Json(Vec<Value>),
}

impl From<Vec<String>> for FieldValues {
    fn from(v: Vec<String>) -> Self {
        FieldValues::Strings(v)
    }
}

fn plan_all(plan: &Plan, stream: &[StreamField], dom: &[DomField]) -> bool {
    match plan {
        Plan::Stream(i) => stream[*i].all,
        Plan::Dom(i) => dom[*i].all,
        Plan::Xpath { all, .. } | Plan::Regex { all, .. } | Plan::Json { all, .. } => *all,
    }
}

fn regex_values(regex: &Regex, text: &str, all: bool) -> FieldValues {
    let group = usize::from(regex.captures_len() > 1);
    let pick = |c: regex::Captures<'_>| {
        c.get(group)
            .or_else(|| c.get(0))
            .map(|m| m.as_str().to_owned())
    };
    let values = if all {
        regex.captures_iter(text).filter_map(pick).collect()
    } else {
        regex.captures(text).and_then(pick).into_iter().collect()
    };
    FieldValues::Strings(values)
}

fn json_values(path: &JsonPath, docs: &[Value], all: bool) -> FieldValues {
    let mut out = Vec::new();
    for doc in docs {
        for v in path.query(doc).all() {
            out.push(v.clone());
            if !all {
                return FieldValues::Json(out);
            }
        }
    }
    FieldValues::Json(out)
}

/// Trims and collapses runs of whitespace (including no-break spaces) to one space.
pub(crate) fn collapse_whitespace(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

fn mime(content_type: Option<&str>) -> String {
    content_type
        .and_then(|c| c.split(';').next())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// A body that is JSON: by its type, or untyped and shaped like JSON.
fn is_json(content_type: Option<&str>, text: &str) -> bool {
    let m = mime(content_type);
    if m.is_empty() {
        let t = text.trim_start();
        return t.starts_with('{') || t.starts_with('[');
    }
    m == "application/json" || m == "text/json" || m.ends_with("+json")
}

/// A body that certainly is not markup (images, media, archives): not parsed at all.
fn is_binary(content_type: Option<&str>) -> bool {
    let m = mime(content_type);
    ["image/", "audio/", "video/", "font/"]
        .iter()
        .any(|p| m.starts_with(p))
        || matches!(
            m.as_str(),
            "application/pdf" | "application/zip" | "application/gzip" | "application/octet-stream"
        )
}

#[cfg(test)]
mod tests;
