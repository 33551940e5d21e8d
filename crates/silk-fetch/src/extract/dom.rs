//! The slow path: a full HTML tree, built only when a rule needs one. CSS selectors that
//! `lol_html` cannot stream (`+`, `~`, `:last-child`, `:has`, …) run on `scraper`'s
//! html5ever tree; XPath 1.0 runs on `skyscraper`'s WHATWG tree. Both trees are built at
//! most once per page, and only by the parse that needs them.
//!
//! Must stay semantically equal to the stream pass (`stream`): same text rules (script and
//! style text skipped, whitespace collapsed by the caller), same first/all rules, links in
//! document order through the same canonicalisation.

use super::links::{Base, LinkSet, canonical_link};
use super::{DomField, Extractor};
use scraper::{ElementRef, Html, Node};
use skyscraper::xpath::XpathItemTree;
use skyscraper::xpath::grammar::XpathItemTreeNode;
use skyscraper::xpath::grammar::data_model::XpathItem;
use url::Url;

/// Every link of the page, all follow rules together, in document order.
pub(crate) fn links(ex: &Extractor, doc: &Html, page_url: &Url) -> LinkSet {
    let mut out = LinkSet::default();
    let base = doc
        .select(&ex.dom_base_selector)
        .next()
        .and_then(|b| b.value().attr("href"))
        .and_then(|h| page_url.join(h.trim()).ok())
        .unwrap_or_else(|| page_url.clone());
    let base = Base::new(base);
    for node in doc.root_element().descendants() {
        let Some(el) = ElementRef::wrap(node) else {
            continue;
        };
        let Some(href) = el.value().attr("href") else {
            continue;
        };
        let mut url = None;
        for group in &ex.dom_link_groups {
            if !group.selector.matches(&el) {
                continue;
            }
            let Some(u) =
                url.get_or_insert_with(|| canonical_link(&base, href, &ex.canon, ex.no_rewrites))
            else {
                break;
            };
            if group.rules.is_empty()
                || group
                    .rules
                    .iter()
                    .any(|&r| ex.follow[r].accepts(u.as_str()))
            {
                out.push(u.clone());
                break;
            }
        }
    }
    out
}

/// The values of a CSS field on the tree (text not yet collapsed).
pub(crate) fn css_values(doc: &Html, field: &DomField) -> Vec<String> {
    let mut out = Vec::new();
    for el in doc.select(&field.selector) {
        match &field.attr {
            Some(attr) => {
                if let Some(v) = el.value().attr(attr) {
                    out.push(v.to_owned());
                }
            }
            None => {
                let mut text = String::new();
                element_text(el, &mut text);
                out.push(text);
            }
        }
        if !field.all && !out.is_empty() {
            break;
        }
    }
    out
}

/// Text of an element and its descendants, without script, style and template contents.
fn element_text(el: ElementRef<'_>, out: &mut String) {
    for child in el.children() {
        match child.value() {
            Node::Text(t) => out.push_str(t),
            Node::Element(e) if matches!(e.name(), "script" | "style" | "template") => {}
            Node::Element(_) => {
                if let Some(c) = ElementRef::wrap(child) {
                    element_text(c, out);
                }
            }
            _ => {}
        }
    }
}

/// The values of an XPath field: element nodes give their text (or `attr`), text and
/// attribute nodes their value, atomic results their string form. Whitespace-only text
/// nodes are skipped (they are layout, not content).
pub(crate) fn xpath_values(
    tree: &XpathItemTree,
    xpath: &skyscraper::xpath::Xpath,
    attr: Option<&str>,
    all: bool,
) -> Vec<String> {
    let Ok(items) = xpath.apply(tree) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items.iter() {
        let value = match item {
            XpathItem::Node(node) => match node {
                XpathItemTreeNode::ElementNode(e) => match attr {
                    Some(a) => e.get_attribute(tree, a).map(str::to_owned),
                    None => Some(e.text_content(tree)),
                },
                XpathItemTreeNode::TextNode(t) if !t.content.trim().is_empty() => {
                    Some(t.content.clone())
                }
                XpathItemTreeNode::AttributeNode(a) => Some(a.value.clone()),
                _ => None,
            },
            XpathItem::AnyAtomicType(v) => Some(v.to_string()),
            XpathItem::Function(_) => None,
        };
        if let Some(v) = value {
            out.push(v);
            if !all {
                break;
            }
        }
    }
    out
}
