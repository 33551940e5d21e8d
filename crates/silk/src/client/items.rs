//! `silk items RUN`: a run's items as JSON Lines on stdout, as the hub stored them (always
//! JSON: items are data), following the pages' `next_cursor`.

use super::cursor_text;
use super::output::out;
use super::{Client, Conn};
use anyhow::Context;
use clap::Args;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::process::ExitCode;

/// Items asked for per request.
const PAGE: u64 = 1000;

/// Options of `silk items`.
#[derive(Debug, Args)]
pub struct ItemsArgs {
    /// The run id.
    #[arg(value_name = "RUN")]
    pub run: String,
    /// At most this many items (from the first).
    #[arg(long, value_name = "N", default_value_t = 100, conflicts_with = "all")]
    pub limit: u64,
    /// Every item the run has written so far.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub conn: Conn,
}

/// One page of `GET /items`.
#[derive(Debug, Deserialize)]
struct ItemPage {
    #[serde(default)]
    items: Vec<Box<RawValue>>,
    #[serde(default)]
    next_cursor: Option<Value>,
    #[serde(default)]
    done: bool,
}

/// Runs `silk items`.
pub async fn items(args: ItemsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    let limit = if args.all { u64::MAX } else { args.limit };
    let mut cursor = "0".to_owned();
    let mut printed = 0u64;
    while printed < limit {
        let want = (limit - printed).min(PAGE);
        let answer = client
            .get_with(
                &["api", "v1", "runs", &args.run, "items"],
                &[("cursor", cursor.clone()), ("limit", want.to_string())],
            )
            .await?;
        let page: ItemPage = serde_json::from_str(&answer.text)
            .context("unexpected answer from the hub: not a page of items")?;
        let mut text = String::new();
        for item in page
            .items
            .iter()
            .take(usize::try_from(want).unwrap_or(usize::MAX))
        {
            text.push_str(item.get().trim());
            text.push('\n');
            printed += 1;
        }
        if !out(&text) {
            break;
        }
        let next = page.next_cursor.as_ref().and_then(cursor_text);
        match next {
            Some(next) if !page.done && !page.items.is_empty() && next != cursor => cursor = next,
            _ => break,
        }
    }
    Ok(ExitCode::SUCCESS)
}
