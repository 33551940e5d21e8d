//! Trimming: cutting a page down to the parts a run cares about before anything leaves the
//! agent (design §4: less traffic back to the hub). A run gives rules; each rule keeps its
//! matches, and the trimmed body is the matches of every rule, in rule order, joined by a
//! newline:
//!
//! | rule    | keeps |
//! |---------|-------|
//! | `css`   | the outer HTML of every element the selector matches (`scraper`) |
//! | `xpath` | every node the XPath 1.0 expression selects (`skyscraper`): elements as their outer HTML, text and attribute nodes as their value, atomic results as text |
//! | `regex` | every (non-overlapping) match of the regex |
//!
//! A page where nothing matches trims to an empty body (counted as a miss), never to the
//! whole page: trimming that silently stopped working would otherwise look like success
//! while sending everything.
//!
//! Rules run on the page's text (decoded from its charset); the result is UTF-8. This module
//! is pure (no I/O) and must not fail on any page: bad rules are refused when compiled.

use regex::Regex;
use silk_api::downloader::TrimRule;
use skyscraper::xpath::grammar::data_model::XpathItem;
use skyscraper::xpath::grammar::{DisplayFormatting, XpathItemTreeNode};

enum Plan {
    Css(scraper::Selector),
    Xpath(Box<skyscraper::xpath::Xpath>),
    Regex(Regex),
}

/// The compiled trimming rules of one run.
pub(crate) struct Trimmer {
    plans: Vec<Plan>,
}

impl std::fmt::Debug for Trimmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trimmer")
            .field("rules", &self.plans.len())
            .finish()
    }
}

/// What trimming made of one page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Trimmed {
    /// The kept parts.
    pub(crate) text: String,
    /// Whether no rule matched anything.
    pub(crate) missed: bool,
    /// Rules that failed on this page (they kept nothing), each naming the rule:
    /// `trim.rules[1].xpath: …`.
    pub(crate) problems: Vec<String>,
}

impl Trimmer {
    /// Compiles `rules` (`None` when there are none); every bad rule is reported, named by
    /// its position (`trim.rules[1].css: …`).
    pub(crate) fn compile(rules: &[TrimRule]) -> Result<Option<Trimmer>, Vec<String>> {
        let mut plans = Vec::new();
        let mut problems = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let at = format!("trim.rules[{i}]");
            let given = [&rule.css, &rule.xpath, &rule.regex]
                .iter()
                .filter(|r| r.is_some())
                .count();
            if given != 1 {
                problems.push(format!("{at}: give exactly one of css, xpath, regex"));
                continue;
            }
            if let Some(css) = &rule.css {
                match scraper::Selector::parse(css) {
                    Ok(s) => plans.push(Plan::Css(s)),
                    Err(e) => problems.push(format!("{at}.css: invalid selector `{css}`: {e}")),
                }
            } else if let Some(xpath) = &rule.xpath {
                match skyscraper::xpath::parse(xpath) {
                    Ok(x) => plans.push(Plan::Xpath(Box::new(x))),
                    Err(e) => problems.push(format!("{at}.xpath: invalid xpath `{xpath}`: {e}")),
                }
            } else if let Some(re) = &rule.regex {
                match Regex::new(re) {
                    Ok(r) => plans.push(Plan::Regex(r)),
                    Err(e) => problems.push(format!("{at}.regex: invalid regex `{re}`: {e}")),
                }
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok((!plans.is_empty()).then_some(Trimmer { plans }))
    }

    /// The parts of `text` the rules keep.
    pub(crate) fn apply(&self, text: &str) -> Trimmed {
        let mut parts: Vec<String> = Vec::new();
        let mut problems = Vec::new();
        // Each tree is built at most once per page, and only if a rule needs it.
        let mut html: Option<scraper::Html> = None;
        let mut tree: Option<Option<skyscraper::xpath::XpathItemTree>> = None;
        // Plans are in rule order, one per rule (a bad rule fails the compilation).
        for (i, plan) in self.plans.iter().enumerate() {
            match plan {
                Plan::Css(selector) => {
                    let doc = html.get_or_insert_with(|| scraper::Html::parse_document(text));
                    parts.extend(doc.select(selector).map(|el| el.html()));
                }
                Plan::Xpath(xpath) => {
                    let tree = tree.get_or_insert_with(|| match skyscraper::html::parse(text) {
                        Ok(t) => Some(t),
                        Err(e) => {
                            tracing::debug!(error = %e, "xpath tree could not be built; xpath trimming keeps nothing");
                            problems.push(format!(
                                "the page could not be parsed for xpath rules (they keep nothing): {e}"
                            ));
                            None
                        }
                    });
                    if let Some(tree) = tree {
                        match xpath_parts(tree, xpath) {
                            Ok(found) => parts.extend(found),
                            Err(e) => problems.push(format!(
                                "trim.rules[{i}].xpath: could not be evaluated (it keeps nothing): {e}"
                            )),
                        }
                    }
                }
                Plan::Regex(regex) => {
                    parts.extend(regex.find_iter(text).map(|m| m.as_str().to_owned()));
                }
            }
        }
        parts.retain(|p| !p.is_empty());
        Trimmed {
            missed: parts.is_empty(),
            text: parts.join("\n"),
            problems,
        }
    }
}

fn xpath_parts(
    tree: &skyscraper::xpath::XpathItemTree,
    xpath: &skyscraper::xpath::Xpath,
) -> Result<Vec<String>, String> {
    let items = xpath.apply(tree).map_err(|e| e.to_string())?;
    Ok(items
        .iter()
        .filter_map(|item| match item {
            XpathItem::Node(node) => match node {
                XpathItemTreeNode::ElementNode(_) => {
                    Some(node.display(tree, DisplayFormatting::Raw, 0))
                }
                XpathItemTreeNode::TextNode(t) => Some(t.content.to_string()),
                XpathItemTreeNode::AttributeNode(a) => Some(a.value.clone()),
                _ => None,
            },
            XpathItem::AnyAtomicType(v) => Some(v.to_string()),
            XpathItem::Function(_) => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<html><head><title>T</title><script>var x=1;</script></head>
<body><div id="nav"><a href="/a">a</a></div>
<div class="main"><h1>Title</h1><p class="price">12.50</p></div>
<div class="main"><p>second</p></div><footer>lots of footer text</footer></body></html>"#;

    fn rule(css: Option<&str>, xpath: Option<&str>, regex: Option<&str>) -> TrimRule {
        TrimRule {
            css: css.map(Into::into),
            xpath: xpath.map(Into::into),
            regex: regex.map(Into::into),
        }
    }

    #[test]
    fn css_keeps_outer_html_of_every_match() {
        let t = Trimmer::compile(&[rule(Some("div.main"), None, None)])
            .unwrap()
            .unwrap();
        let out = t.apply(PAGE);
        assert!(!out.missed);
        assert_eq!(
            out.text,
            "<div class=\"main\"><h1>Title</h1><p class=\"price\">12.50</p></div>\n<div class=\"main\"><p>second</p></div>"
        );
    }

    #[test]
    fn xpath_and_regex_keep_their_matches_in_rule_order() {
        let t = Trimmer::compile(&[
            rule(None, None, Some(r"\d+\.\d+")),
            rule(None, Some("//h1"), None),
            rule(None, Some("//a/@href"), None),
        ])
        .unwrap()
        .unwrap();
        let out = t.apply(PAGE);
        assert_eq!(out.text, "12.50\n<h1>Title</h1>\n/a");
    }

    #[test]
    fn no_match_is_empty_and_a_miss() {
        let t = Trimmer::compile(&[rule(Some("table"), None, None)])
            .unwrap()
            .unwrap();
        assert_eq!(
            t.apply(PAGE),
            Trimmed {
                text: String::new(),
                missed: true,
                problems: Vec::new(),
            }
        );
        assert!(t.apply("").missed);
        assert!(t.apply("\u{0}<<<>>>&&&").missed);
    }

    #[test]
    fn bad_rules_are_all_reported() {
        let err = Trimmer::compile(&[
            rule(Some("div[["), None, None),
            rule(None, None, None),
            rule(Some("p"), None, Some("x")),
            rule(None, Some("//["), None),
            rule(None, None, Some("(")),
        ])
        .unwrap_err();
        assert_eq!(err.len(), 5, "{err:?}");
        for (i, e) in err.iter().enumerate() {
            assert!(e.starts_with(&format!("trim.rules[{i}]")), "{e}");
        }
        assert!(Trimmer::compile(&[]).unwrap().is_none());
    }
}
