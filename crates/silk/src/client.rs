//! The commands that talk to a running hub over its REST API (`/api/v1`): `silk run` (start an
//! ad-hoc run), `silk runs` (list, show, pause, resume, cancel, restart, wait), `silk jobs`
//! (list, show, create, update, delete, trigger, runs), `silk logs` (a run's log, `-f` follows
//! it over the event stream), `silk items` (a run's items as JSON Lines), `silk agents` and
//! `silk tokens` and `silk tenants`. `output::Table` prints the listings.
//!
//! Every command takes the same connection options ([`Conn`]): `--server` (`SILK_SERVER`),
//! `--token`, else `SILK_TOKEN`, else the admin token a local hub wrote
//! (`DATA_DIR/hub/admin.token`, then `DATA_DIR/admin.token`; `--data-dir`, default `.silk`),
//! `--tenant` (`SILK_TENANT`: the tenant an admin acts in) and `--json` (the API's answer as
//! is, for scripts). The token is never printed.
//!
//! [`Client`] is `silk-api`'s typed client with the token's source; answers are read into
//! `silk-api`'s types (fields this build does not know are ignored). The hub answers errors as
//! JSON `{"code": "...", "message": "..."}` with an HTTP error status; they are shown as one
//! line, `error: MESSAGE (CODE, HTTP STATUS)`.

mod agents;
mod alerts;
mod items;
pub(crate) mod jobfile;
mod jobs;
mod logs;
mod output;
mod projects;
pub(crate) mod router;
mod runs;
mod sse;
mod tenants;
mod tokens;

pub use agents::{AgentsArgs, agents};
pub use alerts::{AlertsArgs, alerts};
pub use items::{ItemsArgs, items};
pub use jobs::{JobsArgs, jobs};
pub use logs::{LogsArgs, logs};
pub use projects::{ProjectsArgs, VersionsArgs, projects, versions};
pub use runs::{RunArgs, RunsArgs, run, runs};
pub use tenants::{TenantsArgs, tenants};
pub use tokens::{TokensArgs, tokens};

use anyhow::Context;
use clap::Args;
use serde_json::Value;
pub use silk_api::client::Answer;
use silk_api::client::ClientError;
use std::fmt;
use std::path::{Path, PathBuf};
use url::Url;

/// Where the hub is when neither `--server` nor `SILK_SERVER` says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7700";
/// The environment variable of the token (`--token` wins over it).
pub const TOKEN_ENV: &str = "SILK_TOKEN";

/// The options every client command takes: which hub, which token, which output.
#[derive(Debug, Clone, Args)]
pub struct Conn {
    /// The hub's HTTP address (`http://HOST:PORT`; a bare `HOST:PORT` means http).
    #[arg(long, global = true, value_name = "URL", env = "SILK_SERVER", default_value = DEFAULT_SERVER, value_parser = parse_server_url)]
    pub server: Url,
    /// The API token. Default: the SILK_TOKEN environment variable, else the admin token of a
    /// local hub (DATA_DIR/hub/admin.token, then DATA_DIR/admin.token).
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// The data dir of a local hub, where its admin token is looked for (`silk up --data-dir
    /// DIR` writes DIR/hub/admin.token, `silk hub --data-dir DIR` writes DIR/admin.token).
    #[arg(long, global = true, value_name = "DIR", default_value = ".silk")]
    pub data_dir: PathBuf,
    /// Print the API's JSON answer as is instead of a table (for scripts).
    #[arg(long, global = true)]
    pub json: bool,
    /// The tenant to act in (an admin token's choice; any other token acts in its own).
    /// Sent as the X-Silk-Tenant header.
    #[arg(long, global = true, value_name = "NAME", env = "SILK_TENANT")]
    pub tenant: Option<String>,
}

/// Accepts `http(s)://HOST[:PORT][/PREFIX]`, or `HOST:PORT` as http.
fn parse_server_url(text: &str) -> Result<Url, String> {
    let with_scheme = if text.contains("://") {
        text.to_owned()
    } else {
        format!("http://{text}")
    };
    let url = Url::parse(&with_scheme).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the `{}` scheme is not supported, only http:// and https://",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("a query or fragment has no place in the hub's address".into());
    }
    Ok(url)
}

// ------------------------------------------------------------------------------------------
// The token.

/// Where the token sent to the hub came from (said when the hub refuses it; the token itself
/// is never shown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `--token`.
    Flag,
    /// The `SILK_TOKEN` environment variable.
    Env,
    /// A local hub's token file.
    File(PathBuf),
    /// None found: no flag, no variable, none of these files.
    Missing(Vec<PathBuf>),
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenSource::Flag => f.write_str("the token from --token"),
            TokenSource::Env => write!(f, "the token from {TOKEN_ENV}"),
            TokenSource::File(path) => write!(f, "the token from {}", path.display()),
            TokenSource::Missing(looked) => {
                let looked: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "no token: no --token, no {TOKEN_ENV}, no {}",
                    looked.join(" or ")
                )
            }
        }
    }
}

/// The token files of a local hub under `data_dir`, in the order they are tried: `silk up
/// --data-dir DIR` keeps the hub's data in `DIR/hub`, `silk hub --data-dir DIR` in `DIR`.
pub fn token_files(data_dir: &Path) -> [PathBuf; 2] {
    [
        data_dir.join("hub").join("admin.token"),
        data_dir.join("admin.token"),
    ]
}

/// The token to send: `flag`, else `env` (`SILK_TOKEN`), else the first token file under
/// `data_dir` that holds one. Empty values count as absent. A token file that exists but
/// cannot be read is an error (naming the file, never its content).
pub fn resolve_token(
    flag: Option<&str>,
    env: Option<&str>,
    data_dir: &Path,
) -> anyhow::Result<(Option<String>, TokenSource)> {
    let given = |v: Option<&str>| {
        v.map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    if let Some(token) = given(flag) {
        return Ok((Some(token), TokenSource::Flag));
    }
    if let Some(token) = given(env) {
        return Ok((Some(token), TokenSource::Env));
    }
    let files = token_files(data_dir);
    for path in &files {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                if let Some(token) = given(Some(&text)) {
                    return Ok((Some(token), TokenSource::File(path.clone())));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "cannot read the token file {}: {e}",
                    path.display()
                ));
            }
        }
    }
    Ok((None, TokenSource::Missing(files.to_vec())))
}

// ------------------------------------------------------------------------------------------
// Errors.

/// What can go wrong talking to the hub: the typed client's error ([`ClientError`]), said for
/// people at a terminal, with where the token came from when the hub refused it.
#[derive(Debug)]
pub struct ApiError {
    /// What went wrong.
    pub error: ClientError,
    /// Where the token sent came from.
    source: TokenSource,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            ClientError::Unreachable { server, reason } => write!(
                f,
                "cannot reach the hub at {server}: {reason} (is the hub running there? set --server or SILK_SERVER)"
            ),
            ClientError::Timeout { server, after } => write!(
                f,
                "the hub at {server} did not answer within {}",
                humantime::format_duration(*after)
            ),
            ClientError::Unauthorized { server, message } => {
                let source = &self.source;
                let what = match source {
                    TokenSource::Missing(_) => "wants a token",
                    _ => "refused the token",
                };
                write!(
                    f,
                    "the hub at {server} {what} ({source}; {message}); pass --token, set \
                     {TOKEN_ENV} or run where DATA_DIR/hub/admin.token or DATA_DIR/admin.token \
                     is (DATA_DIR: --data-dir, default .silk)"
                )
            }
            // The client's own wording: `MESSAGE (CODE, HTTP STATUS)`, `unexpected answer …`.
            other => write!(f, "{other}"),
        }
    }
}

impl std::error::Error for ApiError {}

// ------------------------------------------------------------------------------------------
// The client.

/// The CLI's client of the hub's API: the typed client of `silk-api`
/// ([`silk_api::client::Client`]) and where its token came from (said when the hub refuses
/// it).
#[derive(Debug, Clone)]
pub struct Client {
    api: silk_api::client::Client,
    source: TokenSource,
}

impl Client {
    /// A client of the hub `conn` names, with the token resolved as [`resolve_token`] says.
    pub fn connect(conn: &Conn) -> anyhow::Result<Self> {
        let env = std::env::var(TOKEN_ENV).ok();
        let (token, source) = resolve_token(conn.token.as_deref(), env.as_deref(), &conn.data_dir)?;
        let mut client = Self::with_token(conn.server.clone(), token, source)?;
        if let Some(tenant) = conn
            .tenant
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            client.api = client
                .api
                .with_tenant(tenant)
                .map_err(|e| anyhow::anyhow!("--tenant: {e}"))?;
        }
        Ok(client)
    }

    /// A client of the hub at `base` (`http://HOST:PORT`, possibly with a path prefix),
    /// sending `token` (from `source`) if any.
    pub fn with_token(
        base: Url,
        token: Option<String>,
        source: TokenSource,
    ) -> anyhow::Result<Self> {
        let api = silk_api::client::Client::new(base, token).map_err(|e| match e {
            ClientError::Setup(reason) if reason.contains("control characters") => {
                anyhow::anyhow!("{source} is not a valid token (it has control characters)")
            }
            other => anyhow::anyhow!("{other}"),
        })?;
        Ok(Self { api, source })
    }

    /// The typed client underneath.
    pub fn api(&self) -> &silk_api::client::Client {
        &self.api
    }

    /// The hub's address as the user gave it (without a trailing slash).
    pub fn server(&self) -> String {
        self.api.server()
    }

    /// The client's error as the CLI says it.
    pub fn error(&self, error: ClientError) -> ApiError {
        ApiError {
            error,
            source: self.source.clone(),
        }
    }

    /// `GET` → the JSON answer.
    pub async fn get(&self, segments: &[&str]) -> Result<Answer, ApiError> {
        self.api.get(segments).await.map_err(|e| self.error(e))
    }

    /// `GET` with a query string → the JSON answer.
    pub async fn get_with(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<Answer, ApiError> {
        self.api
            .get_with(segments, query)
            .await
            .map_err(|e| self.error(e))
    }

    /// `POST` a JSON body → the JSON answer.
    pub async fn post(&self, segments: &[&str], body: &Value) -> Result<Answer, ApiError> {
        self.api
            .post(segments, body)
            .await
            .map_err(|e| self.error(e))
    }

    /// `PATCH` a JSON body → the JSON answer.
    pub async fn patch(&self, segments: &[&str], body: &Value) -> Result<Answer, ApiError> {
        self.api
            .patch(segments, body)
            .await
            .map_err(|e| self.error(e))
    }

    /// Opens an event stream (`text/event-stream`) at `segments` + `query`; the answer's body
    /// is read chunk by chunk by the caller.
    pub async fn stream(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<reqwest::Response, ApiError> {
        self.api
            .stream(segments, query)
            .await
            .map_err(|e| self.error(e))
    }
}

/// A string or number id as text (`"12"` for `12`): cursors are opaque.
pub fn cursor_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Parses an answer into `T` (a type of `silk-api`), saying what was expected when it does not
/// fit.
fn parse<T: serde::de::DeserializeOwned>(value: &Value, what: &str) -> anyhow::Result<T> {
    T::deserialize(value).with_context(|| format!("unexpected answer from the hub: not {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls() {
        assert_eq!(
            parse_server_url("127.0.0.1:7700").unwrap().as_str(),
            "http://127.0.0.1:7700/"
        );
        assert!(parse_server_url("nats://x:4222").is_err());
        assert!(parse_server_url("http://h:1/?x=1").is_err());
    }

    #[test]
    fn api_errors_read_as_one_line() {
        let e = ApiError {
            error: ClientError::Api {
                status: 409,
                code: "allocation_failed".into(),
                message: "no live agent".into(),
            },
            source: TokenSource::Env,
        };
        assert_eq!(e.to_string(), "no live agent (allocation_failed, HTTP 409)");
        let e = ApiError {
            error: ClientError::Unauthorized {
                server: "http://h:1".into(),
                message: "invalid token".into(),
            },
            source: TokenSource::Env,
        };
        let text = e.to_string();
        assert!(
            text.starts_with(
                "the hub at http://h:1 refused the token (the token from SILK_TOKEN; invalid token); \
                 pass --token, set SILK_TOKEN or run where DATA_DIR/hub/admin.token"
            ),
            "{text}"
        );
        assert!(!text.contains('\n'));
    }

    #[test]
    fn the_token_comes_from_the_flag_then_the_environment_then_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Nothing anywhere.
        let (token, source) = resolve_token(None, None, d).unwrap();
        assert_eq!(token, None);
        assert_eq!(
            source,
            TokenSource::Missing(vec![d.join("hub/admin.token"), d.join("admin.token")])
        );
        // `silk hub --data-dir DIR` keeps it in DIR.
        std::fs::write(d.join("admin.token"), "silk_b_2\n").unwrap();
        let (token, source) = resolve_token(None, Some(""), d).unwrap();
        assert_eq!(token.as_deref(), Some("silk_b_2"));
        assert_eq!(source, TokenSource::File(d.join("admin.token")));
        // `silk up --data-dir DIR` keeps it in DIR/hub, which is tried first.
        std::fs::create_dir(d.join("hub")).unwrap();
        std::fs::write(d.join("hub/admin.token"), "  silk_a_1 \n").unwrap();
        let (token, source) = resolve_token(None, None, d).unwrap();
        assert_eq!(token.as_deref(), Some("silk_a_1"));
        assert_eq!(source, TokenSource::File(d.join("hub/admin.token")));
        // The environment beats the files, the flag beats the environment.
        let (token, source) = resolve_token(None, Some("silk_env"), d).unwrap();
        assert_eq!(
            (token.as_deref(), source),
            (Some("silk_env"), TokenSource::Env)
        );
        let (token, source) = resolve_token(Some("silk_flag"), Some("silk_env"), d).unwrap();
        assert_eq!(
            (token.as_deref(), source),
            (Some("silk_flag"), TokenSource::Flag)
        );
        // An empty file is no token.
        std::fs::write(d.join("hub/admin.token"), "\n").unwrap();
        let (token, _) = resolve_token(None, None, d).unwrap();
        assert_eq!(token.as_deref(), Some("silk_b_2"));
    }

    #[test]
    fn a_token_with_control_characters_is_refused_without_showing_it() {
        let e = Client::with_token(
            Url::parse("http://h:1").unwrap(),
            Some("sec\nret".into()),
            TokenSource::Flag,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--token") && !e.contains("sec"), "{e}");
    }

    #[test]
    fn error_messages_never_echo_the_token() {
        let c = Client::with_token(
            Url::parse("http://h:1").unwrap(),
            Some("silk_x_secret".into()),
            TokenSource::Flag,
        )
        .unwrap();
        let url = Url::parse("http://h:1/api/v1/runs").unwrap();
        let e = c.error(c.api().error_answer(
            reqwest::StatusCode::UNAUTHORIZED,
            br#"{"code":"unauthorized","message":"bad token silk_x_secret"}"#,
            &url,
        ));
        let text = e.to_string();
        assert!(matches!(e.error, ClientError::Unauthorized { .. }));
        assert!(
            !text.contains("silk_x_secret") && text.contains("--token"),
            "{text}"
        );
        let e = c.error(
            c.api()
                .error_answer(reqwest::StatusCode::NOT_FOUND, b"{}", &url),
        );
        assert!(matches!(
            e.error,
            ClientError::Unexpected { status: 404, .. }
        ));
        assert!(!format!("{c:?}").contains("secret"));
    }
}
