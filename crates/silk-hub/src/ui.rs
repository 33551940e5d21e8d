//! The hub's web UI: static files written for Silk (`ui/index.html`, `ui/style.css` and the
//! app's ES modules, no third-party code, no build step), embedded in the binary with
//! `include_str!` and served by [`routes`]:
//!
//! | method + path | answer |
//! |---|---|
//! | `GET /` | `index.html` |
//! | `GET /ui/app.js` | the single page app's entry module (routing, sign-in) |
//! | `GET /ui/{module}.js`, `GET /ui/views/{view}.js` | its other modules ([`MODULES`]) |
//! | `GET /ui/style.css` | its style sheet |
//!
//! The modules: `dom` (elements from properties and children, text as text nodes), `format`,
//! `api` (token, REST calls, error line, polling), `chart` (canvas charts), one module per
//! view under `views/`, and `types` — JSDoc type definitions of the API's JSON generated from
//! the OpenAPI document (`jsdoc_types`; a test fails when `ui/types.js` is stale, and
//! `SILK_BLESS=1` rewrites it). Every module starts with `// @ts-check`.
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
use axum::extract::Path;
use axum::http::StatusCode;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderName};
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../ui/index.html");
const STYLE_CSS: &str = include_str!("../ui/style.css");

/// The app's ES modules, by their path under `/ui/`.
pub(crate) const MODULES: &[(&str, &str)] = &[
    ("app.js", include_str!("../ui/app.js")),
    ("api.js", include_str!("../ui/api.js")),
    ("chart.js", include_str!("../ui/chart.js")),
    ("dom.js", include_str!("../ui/dom.js")),
    ("format.js", include_str!("../ui/format.js")),
    ("types.js", include_str!("../ui/types.js")),
    ("views/agents.js", include_str!("../ui/views/agents.js")),
    (
        "views/dashboard.js",
        include_str!("../ui/views/dashboard.js"),
    ),
    ("views/jobs.js", include_str!("../ui/views/jobs.js")),
    ("views/logs.js", include_str!("../ui/views/logs.js")),
    ("views/alerts.js", include_str!("../ui/views/alerts.js")),
    ("views/router.js", include_str!("../ui/views/router.js")),
    ("views/projects.js", include_str!("../ui/views/projects.js")),
    ("views/parts.js", include_str!("../ui/views/parts.js")),
    ("views/runs.js", include_str!("../ui/views/runs.js")),
];

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
            "/ui/style.css",
            get(|| async { asset(STYLE_CSS, "text/css; charset=utf-8") }),
        )
        .route("/ui/{*module}", get(module))
}

async fn module(Path(path): Path<String>) -> axum::response::Response {
    match MODULES.iter().find(|(p, _)| *p == path) {
        Some((_, body)) => asset(body, "text/javascript; charset=utf-8").into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
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
            ("/ui/style.css", "text/css; charset=utf-8", STYLE_CSS),
        ]
        .into_iter()
        .chain(MODULES.iter().map(|(path, body)| {
            (
                Box::leak(format!("/ui/{path}").into_boxed_str()) as &str,
                "text/javascript; charset=utf-8",
                *body,
            )
        })) {
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
        // JSDoc comments name types with `import('./types.js')`; that loads nothing.
        let modules = MODULES.iter().map(|(_, body)| without_block_comments(body));
        let texts = [INDEX_HTML.to_owned(), STYLE_CSS.to_owned()];
        for text in texts.into_iter().chain(modules) {
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

    /// `text` without its `/* … */` comments.
    fn without_block_comments(text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("/*") {
            out.push_str(&rest[..start]);
            rest = rest[start..]
                .find("*/")
                .map_or("", |end| &rest[start + end + 2..]);
        }
        out.push_str(rest);
        out
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
            for (path, body) in MODULES {
                assert!(!body.contains(sink), "{path} uses {sink}");
            }
        }
    }

    #[tokio::test]
    async fn a_file_that_is_not_ours_is_not_found() {
        let base = serve().await;
        for path in [
            "/ui/nope.js",
            "/ui/../Cargo.toml",
            "/ui/views/",
            "/ui/views/../app.js.map",
        ] {
            let resp = reqwest::get(format!("{base}{path}")).await.unwrap();
            assert_eq!(resp.status(), 404, "{path}");
        }
    }

    /// Every module the app imports is served, every served module is checked by the type
    /// checker, and nothing but the entry has side effects on the page at import time.
    #[test]
    fn every_imported_module_is_served_and_type_checked() {
        let served: std::collections::BTreeSet<&str> = MODULES.iter().map(|(p, _)| *p).collect();
        for (path, body) in MODULES {
            assert!(
                body.starts_with("// @ts-check\n"),
                "{path} does not start with // @ts-check"
            );
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let from = line.split('\'').nth(1).unwrap_or_default();
                let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
                for seg in from.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let target = parts.join("/");
                assert!(
                    served.contains(target.as_str()),
                    "{path} imports {from}, which is not served (add it to MODULES)"
                );
            }
        }
        assert!(INDEX_HTML.contains(r#"<script type="module" src="/ui/app.js">"#));
    }

    /// The JSDoc types of the API's JSON, from its OpenAPI document: one `@typedef` per
    /// component schema, properties with their types and first line of description.
    fn jsdoc_types(openapi: &serde_json::Value) -> String {
        let mut out = String::from(
            "// @ts-check\n\
             // JSDoc types of the hub API's JSON, generated from its OpenAPI document\n\
             // (`silk_hub::openapi`) by the test `ui::tests::the_ui_types_match_the_openapi_document`.\n\
             // Do not edit: `SILK_BLESS=1 cargo test -p silk-hub ui_types` rewrites this file.\n",
        );
        let empty = serde_json::Map::new();
        let schemas = openapi["components"]["schemas"]
            .as_object()
            .unwrap_or(&empty);
        for (name, schema) in schemas {
            out.push('\n');
            out.push_str("/**\n");
            if let Some(d) = first_line(schema) {
                out.push_str(&format!(" * {d}\n"));
            }
            match schema["properties"].as_object() {
                Some(props) if schema.get("oneOf").is_none() => {
                    let required: Vec<&str> = schema["required"]
                        .as_array()
                        .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
                        .unwrap_or_default();
                    out.push_str(&format!(" * @typedef {{object}} {name}\n"));
                    for (prop, ps) in props {
                        let ty = js_type(ps);
                        let field = if required.contains(&prop.as_str()) {
                            prop.clone()
                        } else {
                            format!("[{prop}]")
                        };
                        match first_line(ps) {
                            Some(d) => {
                                out.push_str(&format!(" * @property {{{ty}}} {field} {d}\n"))
                            }
                            None => out.push_str(&format!(" * @property {{{ty}}} {field}\n")),
                        }
                    }
                }
                _ => out.push_str(&format!(" * @typedef {{{}}} {name}\n", js_type(schema))),
            }
            out.push_str(" */\n");
        }
        out.push_str("\nexport {};\n");
        out
    }

    /// The first line of a schema's description, without what would end the comment.
    fn first_line(schema: &serde_json::Value) -> Option<String> {
        let d = schema["description"].as_str()?.lines().next()?.trim();
        (!d.is_empty()).then(|| d.replace("*/", "* /"))
    }

    /// A schema as a TypeScript type (what `// @ts-check` reads in JSDoc).
    fn js_type(schema: &serde_json::Value) -> String {
        use serde_json::Value;
        if let Some(r) = schema["$ref"].as_str() {
            return r.rsplit('/').next().unwrap_or("any").to_owned();
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(all) = schema[key].as_array() {
                return union(all.iter().map(js_type));
            }
        }
        if let Some(all) = schema["allOf"].as_array() {
            let parts: Vec<String> = all.iter().map(js_type).collect();
            return parts.join(" & ");
        }
        if let Some(values) = schema["enum"].as_array() {
            return union(values.iter().map(|v| match v {
                Value::Null => "null".to_owned(),
                other => other.to_string(),
            }));
        }
        if let Some(c) = schema.get("const") {
            return c.to_string();
        }
        match &schema["type"] {
            Value::Array(types) => union(types.iter().map(|t| {
                let mut one = schema.clone();
                one["type"] = t.clone();
                js_type(&one)
            })),
            Value::String(t) => match t.as_str() {
                "null" => "null".into(),
                "string" => "string".into(),
                "integer" | "number" => "number".into(),
                "boolean" => "boolean".into(),
                "array" => format!("Array<{}>", js_type(&schema["items"])),
                "object" => match (
                    schema["properties"].as_object(),
                    &schema["additionalProperties"],
                ) {
                    (Some(props), _) => {
                        let required: Vec<&str> = schema["required"]
                            .as_array()
                            .map(|r| r.iter().filter_map(|v| v.as_str()).collect())
                            .unwrap_or_default();
                        let fields: Vec<String> = props
                            .iter()
                            .map(|(k, v)| {
                                let opt = if required.contains(&k.as_str()) {
                                    ""
                                } else {
                                    "?"
                                };
                                format!("{k}{opt}: {}", js_type(v))
                            })
                            .collect();
                        format!("{{{}}}", fields.join(", "))
                    }
                    (None, Value::Object(_)) => {
                        format!(
                            "Record<string, {}>",
                            js_type(&schema["additionalProperties"])
                        )
                    }
                    _ => "Record<string, any>".into(),
                },
                _ => "any".into(),
            },
            _ => "any".into(),
        }
    }

    fn union(parts: impl Iterator<Item = String>) -> String {
        let mut seen: Vec<String> = Vec::new();
        for p in parts {
            if !seen.contains(&p) {
                seen.push(p);
            }
        }
        seen.join("|")
    }

    #[test]
    fn the_ui_types_match_the_openapi_document() {
        let openapi = serde_json::to_value(crate::api::openapi()).unwrap();
        let want = jsdoc_types(&openapi);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/types.js");
        let have = MODULES
            .iter()
            .find(|(p, _)| *p == "types.js")
            .map(|(_, body)| *body)
            .unwrap();
        if std::env::var_os("SILK_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
            return;
        }
        assert!(
            have == want,
            "ui/types.js is stale: the API changed. Rewrite it with \
             `SILK_BLESS=1 cargo test -p silk-hub ui_types` and check the modules still fit"
        );
        assert!(want.contains("@typedef {object} RunView"), "{want}");
    }
}
