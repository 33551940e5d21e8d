//! What a response means for its request before anything is parsed, decided in one place for
//! the local engine (`silk-crawl`) and the agent's downloader (whose answer the hub reads):
//! a redirect (its target request, or why it is not followed: no `Location`, too many hops,
//! an unparsable target, a target off the allowed domains), an HTTP failure (retryable when
//! the status is in the spider's `retry_statuses`), or a page to parse — and before that, what
//! robots.txt's verdict means ([`robots_verdict`]); then what to parse of
//! the page ([`wants`]: links only above `max_depth`, fields only where `item_when` says) and
//! what it gives ([`harvest`]: the item, with its `url`, and the links on the allowed
//! domains). Pure: no I/O.

use crate::error::Retry;
use crate::extract::{Page, Wants};
use crate::fetcher::Response;
use crate::robots::RobotsVerdict;
use silk_core::Request;
use silk_core::outcome::OutcomeCode;
use silk_core::spider::Spider;
use url::Url;

/// What a response means for its request.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// A 2xx: parse it.
    Page,
    /// A redirect to follow: the target, canonical, on the allowed domains
    /// ([`Request::redirect_target`]: the request's depth, priority, meta and salt, one more
    /// hop).
    Redirect(Request),
    /// The request ended here: why, whether a retry may help, and a line for people.
    Ended {
        code: OutcomeCode,
        retryable: bool,
        detail: String,
    },
}

fn ended(code: OutcomeCode, retryable: bool, detail: String) -> Verdict {
    Verdict::Ended {
        code,
        retryable,
        detail,
    }
}

/// Judges `resp`, the answer to `req` (whose parsed URL is `url`), for `spider`.
pub fn judge(spider: &Spider, req: &Request, url: &Url, resp: &Response) -> Verdict {
    let status = resp.status;
    if (300..400).contains(&status) {
        // A 3xx without Location is not a redirect to the page itself (an empty target
        // would resolve to it, and loop up to max_redirects): it is a failed request.
        let Some(location) = resp.location.as_deref() else {
            let detail = format!("{}: {status} without a Location header", req.url);
            return ended(OutcomeCode::RedirectWithoutLocation(status), false, detail);
        };
        let max = spider.spec.max_redirects;
        if req.redirects >= max {
            let detail = format!("{}: more than {max} redirects", req.url);
            return ended(OutcomeCode::TooManyRedirects, false, detail);
        }
        // The target goes through the frontier like a link: its dedup collapses a redirect
        // to a page that is (or will be) fetched anyway.
        let next = match Request::get(location, Some(url), &spider.canon) {
            Ok(next) => next,
            Err(e) => {
                let detail = format!("{}: {e}", req.url);
                return ended(OutcomeCode::InvalidRedirect, false, detail);
            }
        };
        if !spider.canonical_host_allowed(&next.url) {
            let detail = format!(
                "{}: redirect to {} is off the allowed domains",
                req.url, next.url
            );
            return ended(OutcomeCode::RedirectOffDomain, false, detail);
        }
        return Verdict::Redirect(req.redirect_target(next.url));
    }
    let failed = |retryable| {
        let detail = format!("{}: http status {status}", req.url);
        ended(OutcomeCode::Http(status), retryable, detail)
    };
    if let Some(retry) = resp.retry(&spider.spec.retry_statuses) {
        return failed(retry != Retry::Permanent);
    }
    if !(200..300).contains(&status) {
        return failed(false);
    }
    Verdict::Page
}

/// What robots.txt's verdict on `req` means before its page is fetched: `None` to go on, or
/// how the request ends now (always a [`Verdict::Ended`]): disallowed (permanent),
/// robots.txt unavailable (retryable), or — on `first_contact`, when the host's robots.txt
/// was not known before this request — `robots_fetched`: reading it was this request's turn
/// at the host, so the request goes back to the frontier and its page waits for the host's
/// politeness, crawl-delay included. The local engine and the agents both apply it (an
/// agent's result carries the crawl-delay, from which its hub's frontier learns it).
pub fn robots_verdict(
    verdict: &RobotsVerdict,
    first_contact: bool,
    req: &Request,
) -> Option<Verdict> {
    match verdict {
        RobotsVerdict::Allowed if first_contact => Some(ended(
            OutcomeCode::RobotsFetched,
            true,
            format!(
                "{}: robots.txt read first; the page waits for its turn",
                req.url
            ),
        )),
        RobotsVerdict::Allowed => None,
        RobotsVerdict::Disallowed => Some(ended(
            OutcomeCode::RobotsDisallowed,
            false,
            format!("{}: disallowed by robots.txt", req.url),
        )),
        RobotsVerdict::Unavailable { retry_in } => Some(ended(
            OutcomeCode::RobotsUnavailable,
            true,
            format!(
                "{}: robots.txt unavailable; asked again in {} ms",
                req.url,
                retry_in.as_millis()
            ),
        )),
    }
}

/// What to parse of `req`'s page: its links only when they would not be deeper than
/// `max_depth`, its fields only when the spider makes an item of the page.
pub fn wants(spider: &Spider, req: &Request) -> Wants {
    Wants {
        links: spider.depth_allowed(req.depth.saturating_add(1)),
        fields: spider.wants_item(&req.url),
    }
}

/// What a parsed page gives its request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Harvest {
    /// The item (the page's fields and its `url`), when the spider makes one of the page.
    pub item: Option<serde_json::Map<String, serde_json::Value>>,
    /// The links to follow: canonical, on the allowed domains (each becomes
    /// [`Request::link`]).
    pub links: Vec<String>,
}

/// The item and the links of `req`'s parsed `page`, as `wanted` (see [`wants`]).
pub fn harvest(spider: &Spider, req: &Request, page: Page, wanted: Wants) -> Harvest {
    let links = if wanted.links {
        page.links
            .into_iter()
            .filter(|l| spider.canonical_host_allowed(l))
            .collect()
    } else {
        Vec::new()
    };
    let item = wanted.fields.then(|| {
        let mut item = page.fields;
        item.insert("url".into(), serde_json::Value::String(req.url.clone()));
        item
    });
    Harvest { item, links }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use reqwest::header::HeaderMap;

    fn spider() -> Spider {
        Spider::from_yaml(
            "name: t\nstart_urls: ['http://a.test/']\nallowed_domains: [a.test]\nmax_redirects: 2\n",
            "spider.yaml",
        )
        .expect("spider")
    }

    fn response(status: u16, location: Option<&str>) -> Response {
        Response {
            status,
            url: "http://a.test/x".into(),
            version: reqwest::Version::HTTP_11,
            headers: HeaderMap::new(),
            content_type: None,
            location: location.map(str::to_owned),
            retry_after: None,
            body: Bytes::new(),
            elapsed_ms: 0,
            wire_bytes: 0,
            proxy: None,
        }
    }

    fn code(v: &Verdict) -> Option<(String, bool)> {
        match v {
            Verdict::Ended {
                code, retryable, ..
            } => Some((code.to_string(), *retryable)),
            _ => None,
        }
    }

    #[test]
    fn the_table() {
        let spider = spider();
        let mut req = Request::from_canonical("http://a.test/x".into());
        req.depth = 3;
        req.priority = 7;
        let url = Url::parse(&req.url).unwrap();
        let judge = |req: &Request, status, location| {
            judge(&spider, req, &url, &response(status, location))
        };

        assert_eq!(judge(&req, 200, None), Verdict::Page);
        assert_eq!(
            code(&judge(&req, 404, None)),
            Some(("http_404".into(), false))
        );
        assert_eq!(
            code(&judge(&req, 503, None)),
            Some(("http_503".into(), true))
        );
        assert_eq!(
            code(&judge(&req, 101, None)),
            Some(("http_101".into(), false))
        );
        assert_eq!(
            code(&judge(&req, 302, None)),
            Some(("http_302_without_location".into(), false))
        );
        assert_eq!(
            code(&judge(&req, 301, Some("http://b.test/"))),
            Some(("redirect_off_domain".into(), false))
        );
        assert_eq!(
            code(&judge(&req, 301, Some("http://[::1"))),
            Some(("invalid_redirect".into(), false))
        );
        match judge(&req, 301, Some("/y#frag")) {
            Verdict::Redirect(next) => {
                assert_eq!(next.url, "http://a.test/y");
                assert_eq!((next.depth, next.priority, next.redirects), (3, 7, 1));
            }
            other => panic!("{other:?}"),
        }
        req.redirects = 2;
        assert_eq!(
            code(&judge(&req, 301, Some("/y"))),
            Some(("too_many_redirects".into(), false))
        );
    }

    #[test]
    fn only_what_is_wanted_is_parsed_and_kept() {
        let spider = Spider::from_yaml(
            "name: t\nstart_urls: ['http://a.test/']\nallowed_domains: [a.test]\nmax_depth: 1\n\
             item_when: '/item/'\n",
            "spider.yaml",
        )
        .expect("spider");
        let mut req = Request::from_canonical("http://a.test/item/1".into());
        let w = wants(&spider, &req);
        assert!(w.links && w.fields, "{w:?}");
        req.depth = 1;
        req.url = "http://a.test/list".into();
        let w = wants(&spider, &req);
        assert!(
            !w.links && !w.fields,
            "deeper than max_depth, not an item: {w:?}"
        );
        let page = Page {
            links: vec!["http://a.test/a".into(), "http://b.test/b".into()],
            fields: [("title".to_owned(), serde_json::json!("T"))]
                .into_iter()
                .collect(),
            ..Page::default()
        };
        let all = Wants {
            links: true,
            fields: true,
        };
        let h = harvest(&spider, &req, page.clone(), all);
        assert_eq!(h.links, ["http://a.test/a"], "off-domain links dropped");
        let item = h.item.expect("an item");
        assert_eq!(item["url"], "http://a.test/list");
        assert_eq!(item["title"], "T");
        let none = harvest(
            &spider,
            &req,
            page,
            Wants {
                links: false,
                fields: false,
            },
        );
        assert_eq!(none, Harvest::default());
    }

    #[test]
    fn robots_verdicts_end_requests_with_one_set_of_codes() {
        let req = Request::from_canonical("http://a.test/x".into());
        let code_of = |v: &RobotsVerdict, first: bool| {
            robots_verdict(v, first, &req).map(|v| code(&v).expect("an ended verdict"))
        };
        assert_eq!(code_of(&RobotsVerdict::Allowed, false), None);
        assert_eq!(
            code_of(&RobotsVerdict::Allowed, true),
            Some(("robots_fetched".into(), true))
        );
        for first in [false, true] {
            assert_eq!(
                code_of(&RobotsVerdict::Disallowed, first),
                Some(("robots_disallowed".into(), false))
            );
            let unavailable = RobotsVerdict::Unavailable {
                retry_in: std::time::Duration::from_secs(30),
            };
            assert_eq!(
                code_of(&unavailable, first),
                Some(("robots_unavailable".into(), true))
            );
        }
    }
}
