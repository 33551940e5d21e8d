//! `silk tenants list|create NAME|delete NAME`: the platform's tenants (an admin's; any
//! other token lists only its own).

use super::output::{Align, Table, ago, now_ms, print_json};
use super::{Client, Conn, parse};
use clap::{Args, Subcommand};
use silk_api::tenants::{TenantRequest, TenantView};
use std::process::ExitCode;

/// Options of `silk tenants`.
#[derive(Debug, Args)]
pub struct TenantsArgs {
    #[command(subcommand)]
    pub command: TenantsCommand,
    #[command(flatten)]
    pub conn: Conn,
}

/// `silk tenants …`.
#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// List the tenants (an admin sees every one, any other token its own).
    List,
    /// Create a tenant (admin); then make its owner's token with
    /// `silk --tenant NAME tokens create NAME-owner --role owner`.
    Create {
        /// Its name: letters, digits, `.`, `_`, `-`.
        name: String,
        /// For people.
        #[arg(long)]
        description: Option<String>,
    },
    /// Delete a tenant that owns nothing any more (admin).
    Delete {
        /// The tenant's name.
        name: String,
    },
}

/// Runs `silk tenants`.
pub async fn tenants(args: TenantsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    let json = args.conn.json;
    match args.command {
        TenantsCommand::List => {
            let answer = client.get(&["api", "v1", "tenants"]).await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let tenants: Vec<TenantView> = parse(&answer.value, "a list of tenants")?;
            print!("{}", tenants_table(&tenants, now_ms()).render());
        }
        TenantsCommand::Create { name, description } => {
            let answer = client
                .post(
                    &["api", "v1", "tenants"],
                    &serde_json::to_value(TenantRequest {
                        name: name.clone(),
                        description,
                    })?,
                )
                .await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!("tenant {name} created");
        }
        TenantsCommand::Delete { name } => {
            client
                .api()
                .delete_tenant(&name)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("tenant {name} deleted");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn tenants_table(tenants: &[TenantView], now_ms: u64) -> Table {
    use Align::Left;
    let mut table = Table::new(&[("NAME", Left), ("CREATED", Left), ("DESCRIPTION", Left)]);
    for t in tenants {
        table.row(vec![
            t.name.clone(),
            ago(t.created_ms, now_ms),
            t.description.clone().unwrap_or_default(),
        ]);
    }
    table
}
