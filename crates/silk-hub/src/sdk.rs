//! The Python SDK (`sdk/python`), served by the hub so that a build on any machine that
//! reaches the hub can install it: a wheel made from the sources embedded in the binary.
//!
//! | method + path | answer |
//! |---|---|
//! | `GET /sdk/python/` | a simple index (PEP 503 style) linking the wheel: `pip install --find-links http://HUB/sdk/python/ silk-sdk` |
//! | `GET /sdk/python/silk_sdk-{version}-py3-none-any.whl` | the wheel: `pip install http://HUB/sdk/python/silk_sdk-0.2.0-py3-none-any.whl` |
//!
//! No token: the SDK is no secret. The wheel is built once per process (a pure-Python wheel:
//! the package, `METADATA`, `WHEEL`, `RECORD` with each file's SHA-256).

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::sync::OnceLock;

/// The SDK's version (its `pyproject.toml`'s).
pub const VERSION: &str = "0.2.0";

const PACKAGE: &[(&str, &str)] = &[
    (
        "silk_sdk/__init__.py",
        include_str!("../../../sdk/python/src/silk_sdk/__init__.py"),
    ),
    (
        "silk_sdk/client.py",
        include_str!("../../../sdk/python/src/silk_sdk/client.py"),
    ),
    (
        "silk_sdk/scrapy.py",
        include_str!("../../../sdk/python/src/silk_sdk/scrapy.py"),
    ),
    ("silk_sdk/py.typed", ""),
];

const PYPROJECT: &str = include_str!("../../../sdk/python/pyproject.toml");
const README: &str = include_str!("../../../sdk/python/README.md");

/// The wheel's file name.
pub fn wheel_name() -> String {
    format!("silk_sdk-{VERSION}-py3-none-any.whl")
}

/// The routes of the SDK (no token).
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/sdk/python/", get(index))
        .route("/sdk/python/{file}", get(file))
}

async fn index() -> Response {
    let sha = match wheel() {
        Ok((_, sha)) => sha,
        Err(e) => return failed(&e),
    };
    let name = wheel_name();
    let html = format!(
        "<!DOCTYPE html>\n<html><body>\n<a href=\"{name}#sha256={sha}\" data-requires-python=\"&gt;=3.9\">{name}</a>\n</body></html>\n"
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response()
}

async fn file(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    if file != wheel_name() {
        return (StatusCode::NOT_FOUND, "no such file; see /sdk/python/").into_response();
    }
    match wheel() {
        Ok((bytes, _)) => {
            ([(header::CONTENT_TYPE, "application/zip")], bytes.clone()).into_response()
        }
        Err(e) => failed(&e),
    }
}

fn failed(e: &str) -> Response {
    tracing::error!(error = %e, "the SDK's wheel could not be made");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "the SDK's wheel could not be made (see the hub's log)",
    )
        .into_response()
}

/// The wheel and its SHA-256 (hex), made once.
fn wheel() -> Result<&'static (Vec<u8>, String), String> {
    static WHEEL: OnceLock<Result<(Vec<u8>, String), String>> = OnceLock::new();
    WHEEL
        .get_or_init(|| {
            let bytes = build().map_err(|e| e.to_string())?;
            let sha = hex(&Sha256::digest(&bytes));
            Ok((bytes, sha))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// `Requires-Dist` lines from the `dependencies` and optional dependencies of the
/// embedded `pyproject.toml` (a list of quoted strings each).
fn metadata() -> String {
    let mut out = format!(
        "Metadata-Version: 2.1\nName: silk-sdk\nVersion: {VERSION}\n\
         Summary: Silk's SDK for programs: a run's items, logs and frontier, and Scrapy on Silk\n\
         License: Apache-2.0\nRequires-Python: >=3.9\n"
    );
    let mut section = String::new();
    for line in PYPROJECT.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        let quoted = || -> Vec<String> {
            line.split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        };
        if section == "[project]" && line.starts_with("dependencies") {
            for dep in quoted() {
                out.push_str(&format!("Requires-Dist: {dep}\n"));
            }
        }
        if section == "[project.optional-dependencies]"
            && let Some((extra, _)) = line.split_once('=')
        {
            let extra = extra.trim();
            out.push_str(&format!("Provides-Extra: {extra}\n"));
            for dep in quoted() {
                out.push_str(&format!("Requires-Dist: {dep}; extra == \"{extra}\"\n"));
            }
        }
    }
    out.push_str("Description-Content-Type: text/markdown\n\n");
    out.push_str(README);
    out
}

fn build() -> Result<Vec<u8>, zip::result::ZipError> {
    let info = format!("silk_sdk-{VERSION}.dist-info");
    let mut files: Vec<(String, Vec<u8>)> = PACKAGE
        .iter()
        .map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec()))
        .collect();
    files.push((format!("{info}/METADATA"), metadata().into_bytes()));
    files.push((
        format!("{info}/WHEEL"),
        b"Wheel-Version: 1.0\nGenerator: silk\nRoot-Is-Purelib: true\nTag: py3-none-any\n".to_vec(),
    ));
    let mut record = String::new();
    for (path, bytes) in &files {
        let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(bytes));
        record.push_str(&format!("{path},sha256={digest},{}\n", bytes.len()));
    }
    record.push_str(&format!("{info}/RECORD,,\n"));
    files.push((format!("{info}/RECORD"), record.into_bytes()));
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o644);
    for (path, bytes) in &files {
        zip.start_file(path.as_str(), options)?;
        zip.write_all(bytes)?;
    }
    Ok(zip.finish()?.into_inner())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wheel_holds_the_package_and_a_record_of_every_file() {
        let (bytes, sha) = wheel().unwrap();
        assert_eq!(sha.len(), 64);
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes.clone())).unwrap();
        let names: Vec<String> = archive
            .file_names()
            .map(|n| n.unwrap().into_owned())
            .collect();
        for needle in [
            "silk_sdk/__init__.py",
            "silk_sdk/scrapy.py",
            "silk_sdk-0.2.0.dist-info/METADATA",
            "silk_sdk-0.2.0.dist-info/RECORD",
        ] {
            assert!(
                names.iter().any(|n| n == needle),
                "{needle} not in {names:?}"
            );
        }
        let mut meta = String::new();
        std::io::Read::read_to_string(
            &mut archive
                .by_name("silk_sdk-0.2.0.dist-info/METADATA")
                .unwrap(),
            &mut meta,
        )
        .unwrap();
        assert!(meta.contains("Requires-Dist: httpx>=0.23\n"), "{meta}");
        assert!(
            meta.contains("Requires-Dist: scrapy>=2.11; extra == \"scrapy\""),
            "{meta}"
        );
        assert!(
            PYPROJECT.contains(&format!("version = \"{VERSION}\"")),
            "VERSION is the pyproject's"
        );
    }
}
