//! `silk tokens list|create NAME|delete ID`: the tenant's API tokens (an owner's or an
//! admin's; `--tenant` for an admin acting in another tenant).

use super::output::{Align, Table, ago, now_ms, out, print_json};
use super::{Client, Conn, parse};
use clap::{Args, Subcommand};
use silk_api::tokens::{NewToken, Role, TokenRequest, TokenView};
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
    /// List the tenant's tokens: id, name, tenant, role, created, last used (never the
    /// secrets).
    List,
    /// Create a token; it is printed once, alone on stdout, and cannot be shown again.
    Create {
        /// What the token is for (`ci`, `grafana`, …).
        name: String,
        /// Its role: viewer (reads), member (jobs, runs, items), owner (also the tenant's
        /// tokens), admin (the platform; only an admin makes one).
        #[arg(long, value_name = "ROLE", default_value = "member", value_parser = parse_role)]
        role: Role,
        /// Same as `--role admin`.
        #[arg(long, conflicts_with = "role")]
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
        TokensCommand::Create { name, role, admin } => {
            let role = if admin { Role::Admin } else { role };
            let answer = client
                .post(
                    &["api", "v1", "tokens"],
                    &serde_json::to_value(TokenRequest {
                        name: name.clone(),
                        role: Some(role),
                        tenant: None,
                        admin: false,
                    })?,
                )
                .await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let made: NewToken = parse(&answer.value, "a new token")?;
            eprintln!(
                "token {name} ({role}) created (id {}); it is shown only this once:",
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

fn parse_role(text: &str) -> Result<Role, String> {
    Role::parse(text).ok_or_else(|| format!("`{text}`: expected viewer, member, owner or admin"))
}

fn tokens_table(tokens: &[TokenView], now_ms: u64) -> Table {
    use Align::Left;
    let mut table = Table::new(&[
        ("ID", Left),
        ("NAME", Left),
        ("TENANT", Left),
        ("ROLE", Left),
        ("CREATED", Left),
        ("LAST-USED", Left),
    ]);
    let when = |t: Option<u64>| t.map_or_else(|| "never".to_owned(), |t| ago(t, now_ms));
    for t in tokens {
        table.row(vec![
            t.id.clone(),
            t.name.clone(),
            t.tenant.clone(),
            t.role.to_string(),
            when(Some(t.created_ms)),
            when(t.last_used_ms),
        ]);
    }
    table
}
