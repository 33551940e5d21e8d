//! A real git server for tests: git's own `git http-backend` (smart HTTP, protocol v2) run as
//! a CGI behind a small HTTP server on loopback that asks for basic auth; and [`WorkRepo`],
//! a working repository driven by the `git` command (commits, tags, pushes) to serve.
//!
//! Repositories are bare directories under the server's root: `{root}/{name}.git`, served at
//! `http://127.0.0.1:PORT/{name}.git`. Every request needs `Authorization: Basic` with the
//! server's user and password; a wrong or missing one is `401` with a `WWW-Authenticate`
//! challenge, as a real git service answers.

use crate::TestkitError;
use crate::server::{ServerHandle, accept_loop, bind_any_loopback};
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

/// A git smart-HTTP server with basic auth on `127.0.0.1`.
#[derive(Debug)]
pub struct GitServer {
    addr: SocketAddr,
    root: PathBuf,
    refused: Arc<AtomicU64>,
    _handle: ServerHandle,
}

struct Auth {
    root: PathBuf,
    expected: String,
    refused: Arc<AtomicU64>,
}

impl GitServer {
    /// Serves the bare repositories under `root` to `user` with `password`.
    pub async fn start(
        root: impl Into<PathBuf>,
        user: &str,
        password: &str,
    ) -> Result<GitServer, TestkitError> {
        let root = root.into();
        let std_listener = bind_any_loopback()?;
        let addr = std_listener
            .local_addr()
            .map_err(|source| TestkitError::Bind {
                addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                source,
            })?;
        let listener = TcpListener::from_std(std_listener).map_err(TestkitError::Runtime)?;
        let refused = Arc::new(AtomicU64::new(0));
        let auth = Arc::new(Auth {
            root: root.clone(),
            expected: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            refused: refused.clone(),
        });
        let (handle, signal) = ServerHandle::new();
        tokio::spawn(accept_loop(listener, signal, move |stream| {
            let auth = auth.clone();
            async move {
                let service = service_fn(move |req| {
                    let auth = auth.clone();
                    async move { Ok::<_, Infallible>(serve(&auth, req).await) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            }
        }));
        Ok(GitServer {
            addr,
            root,
            refused,
            _handle: handle,
        })
    }

    /// The URL of repository `name` (`http://127.0.0.1:PORT/name.git`).
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/{name}.git", self.addr)
    }

    /// The directory of the bare repositories.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Requests refused for a wrong or missing password so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *resp.status_mut() = status;
    resp
}

async fn serve(auth: &Auth, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if given != auth.expected {
        auth.refused.fetch_add(1, Ordering::Relaxed);
        let mut resp = plain(StatusCode::UNAUTHORIZED, "authentication required\n");
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"git\""),
        );
        return resp;
    }
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let text = |name: header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let content_type = text(header::CONTENT_TYPE);
    let encoding = text(header::CONTENT_ENCODING);
    let protocol = req
        .headers()
        .get("git-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return plain(StatusCode::BAD_REQUEST, "body\n");
    };
    let child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", &auth.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", &path)
        .env("QUERY_STRING", &query)
        .env("CONTENT_TYPE", &content_type)
        .env("HTTP_CONTENT_ENCODING", &encoding)
        .env("GIT_PROTOCOL", &protocol)
        .env("REMOTE_USER", "tester")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let Ok(mut child) = child else {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "git http-backend\n");
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&body).await;
    }
    let Ok(out) = child.wait_with_output().await else {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "git http-backend\n");
    };
    cgi_response(&out.stdout)
}

/// A CGI answer (headers, a blank line, the body) as an HTTP response.
fn cgi_response(out: &[u8]) -> Response<Full<Bytes>> {
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4))
        .or_else(|| {
            out.windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, i + 2))
        });
    let Some((head_end, body_start)) = split else {
        return plain(StatusCode::BAD_GATEWAY, "no CGI headers\n");
    };
    let head = String::from_utf8_lossy(&out[..head_end]).into_owned();
    let mut resp = Response::new(Full::new(Bytes::copy_from_slice(&out[body_start..])));
    for line in head.lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().and_then(|c| c.parse().ok());
            if let Some(status) = code.and_then(|c| StatusCode::from_u16(c).ok()) {
                *resp.status_mut() = status;
            }
        } else if let (Ok(name), Ok(value)) = (
            header::HeaderName::from_bytes(name.trim().as_bytes()),
            header::HeaderValue::from_str(value),
        ) {
            resp.headers_mut().append(name, value);
        }
    }
    resp
}

/// A working repository driven by the `git` command, with a bare twin under a
/// [`GitServer`]'s root that [`WorkRepo::push`] updates. Panics on a git failure (it is test
/// scaffolding).
#[derive(Debug)]
pub struct WorkRepo {
    dir: PathBuf,
    bare: PathBuf,
}

impl WorkRepo {
    /// A new repository `name`: work tree `{work}/{name}`, bare twin `{root}/{name}.git`.
    pub fn init(work: &Path, root: &Path, name: &str) -> WorkRepo {
        let dir = work.join(name);
        let bare = root.join(format!("{name}.git"));
        std::fs::create_dir_all(&dir).expect("work dir");
        std::fs::create_dir_all(root).expect("git root");
        let repo = WorkRepo { dir, bare };
        git(root, &["init", "-q", "--bare", &format!("{name}.git")]);
        repo.git(&["init", "-q", "-b", "main"]);
        repo.git(&["remote", "add", "origin", &repo.bare.display().to_string()]);
        repo
    }

    /// The work tree.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The bare repository (for `file://` URLs).
    pub fn bare(&self) -> &Path {
        &self.bare
    }

    /// Writes `files` (path, content) and commits them; returns the commit id.
    pub fn commit(&self, files: &[(&str, &str)], message: &str) -> String {
        for (path, content) in files {
            let path = self.dir.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("dir");
            }
            std::fs::write(&path, content).expect("file");
        }
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
        self.head()
    }

    /// The current commit id.
    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"]).trim().to_owned()
    }

    /// Tags the current commit (annotated), moving the tag if it exists.
    pub fn tag(&self, name: &str) {
        self.git(&["tag", "-f", "-a", "-m", name, name]);
    }

    /// Pushes the branch and every tag to the bare twin (tags forced).
    pub fn push(&self) {
        self.git(&["push", "-q", "--force", "origin", "main"]);
        self.git(&["push", "-q", "--force", "--tags", "origin"]);
    }

    /// Runs `git args` in the work tree; its standard output.
    pub fn git(&self, args: &[&str]) -> String {
        git(&self.dir, args)
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Silk Test",
            "-c",
            "user.email=test@silk.invalid",
        ])
        .args(["-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
