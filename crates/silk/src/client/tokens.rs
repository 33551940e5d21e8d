//! `silk tokens list|create NAME|delete ID`: the hub's API tokens (admin only).

use super::output::{Align, Table, ago, now_ms, out, print_json};
use super::{Client, Conn, parse};
use clap::{Args, Subcommand};
use silk_api::tokens::{NewToken, TokenRequest, TokenView};
use std::process::ExitCode;

/// Options of `silk tokens`.
#[derive(Debug, Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    pub command: TokensCommand,
    #[command(flatten)]
    pub conn: Conn,
}

/// `silk tokens …`.
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// List the tokens: id, name, admin, created, last used (never the secrets).
    List,
    /// Create a token; it is printed once, alone on stdout, and cannot be shown again.
    Create {
        /// What the token is for (`ci`, `grafana`, …).
        name: String,
        /// The token may manage tokens too.
        #[arg(long)]
        admin: bool,
    },
    /// Delete a token (requests with it are refused from then on).
    Delete {
        /// The token's id (see `silk tokens list`).
        id: String,
    },
}

/// Runs `silk tokens`.
pub async fn tokens(args: TokensArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    let json = args.conn.json;
    match args.command {
        TokensCommand::List => {
            let answer = client.get(&["api", "v1", "tokens"]).await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let tokens: Vec<TokenView> = parse(&answer.value, "a list of tokens")?;
            print!("{}", tokens_table(&tokens, now_ms()).render());
        }
        TokensCommand::Create { name, admin } => {
            let answer = client
                .post(
                    &["api", "v1", "tokens"],
                    &serde_json::to_value(TokenRequest {
                        name: name.clone(),
                        admin,
                    })?,
                )
                .await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let made: NewToken = parse(&answer.value, "a new token")?;
            eprintln!(
                "token {name} created (id {}); it is shown only this once:",
                made.id
            );
            out(&format!("{}\n", made.token));
        }
        TokensCommand::Delete { id } => {
            client
                .api()
                .delete_token(&id)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("token {id} deleted");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn tokens_table(tokens: &[TokenView], now_ms: u64) -> Table {
    use Align::Left;
    let mut table = Table::new(&[
        ("ID", Left),
        ("NAME", Left),
        ("ADMIN", Left),
        ("CREATED", Left),
        ("LAST-USED", Left),
    ]);
    let when = |t: Option<u64>| t.map_or_else(|| "never".to_owned(), |t| ago(t, now_ms));
    for t in tokens {
        table.row(vec![
            t.id.clone(),
            t.name.clone(),
            if t.admin { "yes" } else { "no" }.into(),
            when(Some(t.created_ms)),
            when(t.last_used_ms),
        ]);
    }
    table
}
