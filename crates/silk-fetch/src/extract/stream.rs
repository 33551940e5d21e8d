//! The one streaming pass over a page with `lol_html`: links (every follow rule's selector,
//! and `<base href>`), the CSS fields whose selectors `lol_html` supports (text of the
//! first or every match, or an attribute), and the JSON-LD scripts, all in document order
//! without building a tree.
//!
//! `lol_html` hands over raw text and attribute values: character references are decoded
//! here (`entities`). Its element stack knows void elements but not the HTML parser's
//! implicit closing (`<li>a<li>b`), so a child combinator or `:nth-child` may see a
//! different tree than a browser on such markup; text capture is robust to it (a new match
//! ends the previous one). Must not allocate per element beyond the captured values.

use super::links::{Base, LinkSet, canonical_link};
use super::{Extractor, StreamField};
use crate::entities;
use lol_html::html_content::{Element, TextChunk, TextType};
use lol_html::{ElementContentHandlers, HandlerResult, HtmlRewriter, Selector, Settings};
use std::borrow::Cow;
use std::cell::RefCell;
use url::Url;

/// What one stream-capable field collected.
#[derive(Default)]
pub(crate) struct Capture {
    matches: u32,
    capturing: bool,
    /// Raw text of the current text node, decoded when the node ends (a character
    /// reference may straddle two chunks).
    pending: String,
    pub(crate) values: Vec<String>,
}

/// The results of the pass.
pub(crate) struct StreamOut {
    pub(crate) links: LinkSet,
    pub(crate) fields: Vec<Capture>,
    pub(crate) jsonld: Vec<String>,
}

struct State<'p> {
    page_url: &'p Url,
    base: Base,
    /// Whether a `<base href>` was seen (only the first counts).
    base_seen: bool,
    links: LinkSet,
    fields: Vec<Capture>,
    jsonld: Vec<String>,
    jsonld_open: bool,
}

/// Runs the pass over `html` (UTF-8). `want_links` / `want_fields` / `want_jsonld` switch
/// the handlers on; a pass with none of them is not run.
pub(crate) fn run(
    ex: &Extractor,
    page_url: &Url,
    html: &str,
    want_links: bool,
    want_fields: bool,
    want_jsonld: bool,
) -> StreamOut {
    let state = RefCell::new(State {
        page_url,
        base: Base::new(page_url.clone()),
        base_seen: false,
        links: LinkSet::default(),
        fields: (0..ex.stream_fields.len())
            .map(|_| Capture::default())
            .collect(),
        jsonld: Vec::new(),
        jsonld_open: false,
    });
    {
        let state = &state;
        let mut handlers: Vec<(Cow<'_, Selector>, ElementContentHandlers<'_>)> = Vec::new();
        if want_links {
            handlers.push((
                Cow::Borrowed(&ex.base_selector),
                ElementContentHandlers::default()
                    .element(move |el: &mut Element<'_, '_>| on_base(state, el)),
            ));
            for group in &ex.stream_link_groups {
                let follow = &ex.follow;
                let canon = &ex.canon;
                let no_rewrites = ex.no_rewrites;
                handlers.push((
                    Cow::Borrowed(&group.selector),
                    ElementContentHandlers::default().element(move |el: &mut Element<'_, '_>| {
                        let Some(href) = el.get_attribute("href") else {
                            return Ok(());
                        };
                        let href = entities::decode(&href, true);
                        let mut st = state.borrow_mut();
                        if let Some(url) = canonical_link(&st.base, &href, canon, no_rewrites) {
                            let accepted = group.rules.is_empty()
                                || group.rules.iter().any(|&r| follow[r].accepts(&url));
                            if accepted {
                                st.links.push(url);
                            }
                        }
                        Ok(())
                    }),
                ));
            }
        }
        if want_fields {
            for (i, field) in ex.stream_fields.iter().enumerate() {
                handlers.push(field_handlers(state, i, field));
            }
        }
        if want_jsonld {
            handlers.push((
                Cow::Borrowed(&ex.jsonld_selector),
                ElementContentHandlers::default()
                    .element(move |el: &mut Element<'_, '_>| {
                        let is_ld = el
                            .get_attribute("type")
                            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/ld+json"));
                        let mut st = state.borrow_mut();
                        st.jsonld_open = is_ld;
                        if is_ld {
                            st.jsonld.push(String::new());
                        }
                        Ok(())
                    })
                    .text(move |t: &mut TextChunk<'_>| {
                        let mut st = state.borrow_mut();
                        if st.jsonld_open
                            && let Some(last) = st.jsonld.last_mut()
                        {
                            last.push_str(t.as_str());
                        }
                        Ok(())
                    }),
            ));
        }
        if !handlers.is_empty() {
            let mut settings = Settings::new().with_strict(false);
            for h in handlers {
                settings = settings.append_element_content_handler(h);
            }
            let mut rewriter = HtmlRewriter::new(settings, |_: &[u8]| {});
            // Handlers never fail and strict mode is off, so an error here can only be a
            // parser limit: keep what was gathered up to it.
            let result = rewriter
                .write(html.as_bytes())
                .and_then(|()| rewriter.end());
            if let Err(e) = result {
                tracing::debug!(url = %page_url, error = %e, "html stream pass stopped early");
            }
        }
    }
    let mut st = state.into_inner();
    // A page cut inside a captured text node (a stopped pass) still gives that text.
    for cap in &mut st.fields {
        if !cap.pending.is_empty()
            && let Some(last) = cap.values.last_mut()
        {
            entities::decode_into(&cap.pending, false, last);
        }
    }
    StreamOut {
        links: st.links,
        fields: st.fields,
        jsonld: st.jsonld,
    }
}

fn on_base(state: &RefCell<State<'_>>, el: &mut Element<'_, '_>) -> HandlerResult {
    let mut st = state.borrow_mut();
    if !st.base_seen
        && let Some(href) = el.get_attribute("href")
    {
        st.base_seen = true;
        if let Ok(base) = st.page_url.join(entities::decode(&href, true).trim()) {
            st.base = Base::new(base);
        }
    }
    Ok(())
}

fn field_handlers<'h>(
    state: &'h RefCell<State<'_>>,
    i: usize,
    field: &'h StreamField,
) -> (Cow<'h, Selector>, ElementContentHandlers<'h>) {
    let all = field.all;
    match &field.attr {
        Some(attr) => (
            Cow::Borrowed(&field.selector),
            ElementContentHandlers::default().element(move |el: &mut Element<'_, '_>| {
                let mut st = state.borrow_mut();
                let cap = &mut st.fields[i];
                if (all || cap.values.is_empty())
                    && let Some(v) = el.get_attribute(attr)
                {
                    cap.values.push(entities::decode(&v, true).into_owned());
                }
                Ok(())
            }),
        ),
        None => (
            Cow::Borrowed(&field.selector),
            ElementContentHandlers::default()
                .element(move |_: &mut Element<'_, '_>| {
                    let mut st = state.borrow_mut();
                    let cap = &mut st.fields[i];
                    cap.matches += 1;
                    cap.capturing = all || cap.matches == 1;
                    if cap.capturing {
                        cap.values.push(String::new());
                    }
                    Ok(())
                })
                .text(move |t: &mut TextChunk<'_>| {
                    let mut st = state.borrow_mut();
                    let cap = &mut st.fields[i];
                    if !cap.capturing {
                        return Ok(());
                    }
                    match t.text_type() {
                        // Script and style source is not text a reader sees.
                        TextType::RawText | TextType::ScriptData => {}
                        TextType::Data | TextType::RCData => {
                            cap.pending.push_str(t.as_str());
                            if t.last_in_text_node() {
                                let Capture {
                                    pending, values, ..
                                } = cap;
                                if let Some(last) = values.last_mut() {
                                    entities::decode_into(pending, false, last);
                                }
                                pending.clear();
                            }
                        }
                        _ => {
                            if let Some(last) = cap.values.last_mut() {
                                last.push_str(t.as_str());
                            }
                        }
                    }
                    Ok(())
                }),
        ),
    }
}
