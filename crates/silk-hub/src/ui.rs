//! The hub's web UI: three static files written for Silk (`ui/index.html`, `ui/app.js`,
//! `ui/style.css`, no third-party code, no build step), embedded in the binary with
//! `include_str!` and served by [`routes`]:
//!
//! | method + path | answer |
//! |---|---|
//! | `GET /` | `index.html` |
//! | `GET /ui/app.js` | the single page app (an ES module) |
//! | `GET /ui/style.css` | its style sheet |
//!
//! The routes are public (the page itself holds no data): the app reads everything from the
//! REST API under `/api/v1` with the token the user gives it (from the `#token=…` link the
//! hub prints, kept in the browser's `localStorage`, or typed in its sign-in box), sent as
//! `Authorization: Bearer`. Every answer says `Cache-Control: no-cache` (the browser
//! revalidates, so a new hub binary never runs with an old script) and carries a
//! Content-Security-Policy that allows only this origin's scripts, styles and connections:
//! with text from the API put on the page only as text, no injected markup can run.
//!
//! The hash routes of the app (`#/`, `#/jobs`, `#/runs/ID`, `#/agents`, …) are documented at
//! the top of `ui/app.js`.

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName};
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const STYLE_CSS: &str = include_str!("../ui/style.css");

/// Only this origin's resources; canvases draw, `fetch` talks to the hub itself.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The UI's routes (stateless; merged into the API router).
pub(crate) fn routes() -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { asset(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/ui/app.js",
            get(|| async { asset(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/style.css",
            get(|| async { asset(STYLE_CSS, "text/css; charset=utf-8") }),
        )
}

fn asset(body: &'static str, content_type: &'static str) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "no-cache"),
            (HeaderName::from_static("content-security-policy"), CSP),
            (HeaderName::from_static("x-content-type-options"), "nosniff"),
            (HeaderName::from_static("referrer-policy"), "no-referrer"),
            (HeaderName::from_static("x-frame-options"), "DENY"),
        ],
        body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn serve() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, routes()).await.unwrap() });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn serves_the_three_files_with_their_types_and_no_cache() {
        let base = serve().await;
        let http = reqwest::Client::new();
        for (path, ty, body) in [
            ("/", "text/html; charset=utf-8", INDEX_HTML),
            ("/ui/app.js", "text/javascript; charset=utf-8", APP_JS),
            ("/ui/style.css", "text/css; charset=utf-8", STYLE_CSS),
        ] {
            let resp = http.get(format!("{base}{path}")).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            let headers = resp.headers().clone();
            assert_eq!(headers["content-type"], ty, "{path}");
            assert_eq!(headers["cache-control"], "no-cache", "{path}");
            assert_eq!(headers["x-frame-options"], "DENY", "{path}");
            assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
            assert!(
                headers["content-security-policy"]
                    .to_str()
                    .unwrap()
                    .contains("script-src 'self'"),
                "{path}"
            );
            assert_eq!(resp.text().await.unwrap(), body, "{path}");
        }
    }

    #[test]
    fn the_page_loads_only_our_own_files() {
        assert!(INDEX_HTML.contains(r#"src="/ui/app.js""#));
        assert!(INDEX_HTML.contains(r#"href="/ui/style.css""#));
        for text in [INDEX_HTML, APP_JS, STYLE_CSS] {
            for remote in [
                "src=\"http",
                "href=\"http",
                "from 'http",
                "from \"http",
                "import(",
                "url(http",
                "@import",
            ] {
                assert!(!text.contains(remote), "loads a remote resource: {remote}");
            }
        }
    }

    #[test]
    fn the_app_never_parses_text_as_html() {
        // Text from the API reaches the page through text nodes only.
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ] {
            assert!(!APP_JS.contains(sink), "app.js uses {sink}");
        }
    }
}
