//! `silk projects create -f FILE | list | show NAME | delete NAME | build NAME --ref REF` and
//! `silk versions NAME [VERSION] [--log [-f]]`: projects from git and their built versions.
//!
//! A project file is YAML (or JSON) with the fields of the API's `ProjectRequest`: `name`,
//! `git_url`, `username`, `password`, `branch`, `tag_pattern`, `build: {kind, command, …}`,
//! `webhook_secret`. The webhook secret is printed once, when the project is created.

use super::output::{Align, Table, ago, human_bytes, now_ms, out, print_json};
use super::sse::SseParser;
use super::{Client, Conn, parse};
use anyhow::Context;
use clap::{Args, Subcommand};
use silk_api::logs::LogLineView;
use silk_api::projects::{
    Artifact, BuildLogParams, BuildRequest, NewProject, ProjectRequest, ProjectView, VersionView,
};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Options of `silk projects`.
#[derive(Debug, Args)]
pub struct ProjectsArgs {
    #[command(subcommand)]
    pub command: ProjectsCommand,
    #[command(flatten)]
    pub conn: Conn,
}

/// `silk projects …`.
#[derive(Debug, Subcommand)]
pub enum ProjectsCommand {
    /// Create a project from a YAML file (admin token): its webhook secret is printed once.
    Create {
        /// The project file (`-` for standard input).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
    },
    /// List the projects.
    List,
    /// Show a project (never its password or webhook secret).
    Show {
        /// The project's name.
        name: String,
    },
    /// Delete a project with its versions, logs, artifacts and images (admin token).
    Delete {
        /// The project's name.
        name: String,
    },
    /// Build a ref by hand: a tag matching the pattern, or a branch, tag or commit with
    /// `--version`.
    #[command(disable_version_flag = true)]
    Build {
        /// The project's name.
        name: String,
        /// The tag (`release/shop/1.4.0`), branch, full ref or commit id.
        #[arg(long = "ref", value_name = "REF")]
        git_ref: String,
        /// The version to record (needed unless the ref is a tag matching the pattern).
        #[arg(long = "version", id = "record_version", value_name = "VERSION")]
        version: Option<String>,
        /// Wait for the build to end, printing its log (exit 1 if it failed).
        #[arg(long)]
        wait: bool,
    },
}

/// Options of `silk versions`.
#[derive(Debug, Args)]
pub struct VersionsArgs {
    /// The project's name.
    pub project: String,
    /// One version: show it (or its log with --log).
    #[arg(id = "one_version", value_name = "VERSION")]
    pub version: Option<String>,
    /// Print the version's build log.
    #[arg(long, requires = "one_version")]
    pub log: bool,
    /// With --log: follow the log while the version builds, until it is ready or failed.
    #[arg(short = 'f', long, requires = "log")]
    pub follow: bool,
    /// Delete the version with its log and artifact.
    #[arg(long, requires = "one_version", conflicts_with = "log")]
    pub delete: bool,
    #[command(flatten)]
    pub conn: Conn,
}

/// Reads a project file: YAML (JSON is YAML), checked against the API's fields with the
/// path of a bad one.
fn read_project(file: &Path) -> anyhow::Result<ProjectRequest> {
    let (name, text) = if file == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("cannot read the project from standard input")?;
        ("<stdin>".to_owned(), text)
    } else {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        (file.display().to_string(), text)
    };
    let yaml: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("{name}: not YAML"))?;
    let json = serde_json::to_value(yaml).with_context(|| format!("{name}: not a project"))?;
    serde_path_to_error::deserialize(&json).map_err(|e| {
        let path = e.path().to_string();
        anyhow::anyhow!("{name}: `{path}`: {}", e.into_inner())
    })
}

/// Runs `silk projects`.
pub async fn projects(args: ProjectsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    let json = args.conn.json;
    match args.command {
        ProjectsCommand::Create { file } => {
            let request = read_project(&file)?;
            let answer = client
                .post(&["api", "v1", "projects"], &serde_json::to_value(&request)?)
                .await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let made: NewProject = parse(&answer.value, "a new project")?;
            eprintln!(
                "project {} created; point the git service's webhook at {} with this secret \
                 (shown only this once):",
                made.project.name, made.project.webhook_path
            );
            out(&format!("{}\n", made.webhook_secret));
        }
        ProjectsCommand::List => {
            let answer = client.get(&["api", "v1", "projects"]).await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let projects: Vec<ProjectView> = parse(&answer.value, "a list of projects")?;
            print!("{}", projects_table(&projects, now_ms()).render());
        }
        ProjectsCommand::Show { name } => {
            let answer = client.get(&["api", "v1", "projects", &name]).await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let p: ProjectView = parse(&answer.value, "a project")?;
            out(&describe_project(&p));
        }
        ProjectsCommand::Delete { name } => {
            client
                .api()
                .delete_project(&name)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("project {name} deleted");
        }
        ProjectsCommand::Build {
            name,
            git_ref,
            version,
            wait,
        } => {
            let request = BuildRequest { git_ref, version };
            let answer = client
                .post(
                    &["api", "v1", "projects", &name, "builds"],
                    &serde_json::to_value(&request)?,
                )
                .await?;
            let v: VersionView = parse(&answer.value, "a version")?;
            if json && !wait {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!(
                "version {} of {name} queued (build {}, {})",
                v.version, v.build, v.tag
            );
            if wait {
                return follow_log(&client, &name, &v.version, json).await;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `silk versions`.
pub async fn versions(args: VersionsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    let json = args.conn.json;
    let project = &args.project;
    let Some(version) = &args.version else {
        let answer = client
            .get(&["api", "v1", "projects", project, "versions"])
            .await?;
        if json {
            print_json(&answer);
            return Ok(ExitCode::SUCCESS);
        }
        let versions: Vec<VersionView> = parse(&answer.value, "a list of versions")?;
        print!("{}", versions_table(&versions, now_ms()).render());
        return Ok(ExitCode::SUCCESS);
    };
    if args.delete {
        client
            .api()
            .delete_version(project, version)
            .await
            .map_err(|e| client.error(e))?;
        eprintln!("version {version} of {project} deleted");
        return Ok(ExitCode::SUCCESS);
    }
    if args.log {
        if args.follow {
            return tokio::select! {
                r = follow_log(&client, project, version, json) => r,
                _ = crate::wait_for_stop_signal() => Ok(ExitCode::from(130)),
            };
        }
        let mut params = BuildLogParams::default();
        loop {
            let page = client
                .api()
                .build_log(project, version, &params)
                .await
                .map_err(|e| client.error(e))?;
            for line in &page.lines {
                if !show_line(line, json) {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            match page.next {
                Some(next) => params.after = Some(next),
                None => return Ok(ExitCode::SUCCESS),
            }
        }
    }
    let answer = client
        .get(&["api", "v1", "projects", project, "versions", version])
        .await?;
    if json {
        print_json(&answer);
        return Ok(ExitCode::SUCCESS);
    }
    let v: VersionView = parse(&answer.value, "a version")?;
    out(&describe_version(&v, now_ms()));
    Ok(ExitCode::SUCCESS)
}

fn show_line(line: &LogLineView, json: bool) -> bool {
    if json {
        out(&format!(
            "{}\n",
            serde_json::to_string(line).unwrap_or_default()
        ))
    } else {
        out(&format!(
            "{} {:<6} {}\n",
            super::output::timestamp(line.ts_ms),
            line.source,
            line.message
        ))
    }
}

/// Follows a version's build log until the build ends; exit 1 if it failed. A stream that
/// breaks off is opened again after the last line seen.
async fn follow_log(
    client: &Client,
    project: &str,
    version: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut after: Option<i64> = None;
    loop {
        let params = BuildLogParams { after, limit: None };
        let mut response = client
            .api()
            .follow_build_log(project, version, &params)
            .await
            .map_err(|e| client.error(e))?;
        let mut parser = SseParser::new();
        let mut state = String::new();
        loop {
            let chunk = match tokio::time::timeout(Duration::from_secs(40), response.chunk()).await
            {
                Ok(Ok(Some(chunk))) => chunk,
                Ok(Ok(None) | Err(_)) | Err(_) => break,
            };
            for event in parser.push(&chunk) {
                match event.event.as_str() {
                    "log" => {
                        let Ok(line) = serde_json::from_str::<LogLineView>(&event.data) else {
                            continue;
                        };
                        if after.is_some_and(|a| line.id <= a) {
                            continue;
                        }
                        after = Some(line.id);
                        if !show_line(&line, json) {
                            return Ok(ExitCode::SUCCESS);
                        }
                    }
                    "version" => {
                        if let Ok(v) = serde_json::from_str::<VersionView>(&event.data) {
                            state = v.state.as_str().to_owned();
                        }
                    }
                    "end" => {
                        let end = event.data.trim();
                        if !end.is_empty() {
                            state = end.to_owned();
                        }
                        eprintln!("version {version} of {project}: {state}");
                        return Ok(if state == "ready" {
                            ExitCode::SUCCESS
                        } else {
                            ExitCode::FAILURE
                        });
                    }
                    _ => {}
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn projects_table(projects: &[ProjectView], now_ms: u64) -> Table {
    use Align::Left;
    let mut table = Table::new(&[
        ("NAME", Left),
        ("GIT-URL", Left),
        ("BUILD", Left),
        ("TAG-PATTERN", Left),
        ("UPDATED", Left),
    ]);
    for p in projects {
        table.row(vec![
            p.name.clone(),
            p.git_url.clone(),
            build_kind(p).into(),
            p.tag_pattern.clone(),
            ago(p.updated_ms, now_ms),
        ]);
    }
    table
}

fn build_kind(p: &ProjectView) -> &'static str {
    match p.build.kind {
        silk_api::projects::BuildKind::Command => "command",
        silk_api::projects::BuildKind::Container => "container",
    }
}

fn describe_project(p: &ProjectView) -> String {
    let mut text = format!(
        "name:         {}\ngit_url:      {}\nusername:     {}\npassword:     {}\nbranch:       {}\ntag_pattern:  {}\nbuild:        {}\n",
        p.name,
        p.git_url,
        p.username.as_deref().unwrap_or("-"),
        if p.has_password {
            "(set; never shown)"
        } else {
            "-"
        },
        p.branch.as_deref().unwrap_or("-"),
        p.tag_pattern,
        build_kind(p),
    );
    if let Some(command) = &p.build.command {
        text.push_str(&format!("command:      {command}\n"));
    }
    if let Some(file) = &p.build.containerfile {
        text.push_str(&format!("containerfile: {file}\n"));
    }
    text.push_str(&format!("webhook:      POST {}\n", p.webhook_path));
    text
}

fn artifact_text(artifact: Option<&Artifact>) -> String {
    match artifact {
        Some(Artifact::Dir { sha256, bytes }) => {
            format!(
                "dir {} sha256:{}",
                human_bytes(*bytes),
                &sha256[..12.min(sha256.len())]
            )
        }
        Some(Artifact::Image { image, .. }) => format!("image {image}"),
        None => "-".into(),
    }
}

fn took(v: &VersionView) -> String {
    match (v.started_ms, v.finished_ms) {
        (Some(s), Some(f)) => format!("{:.1}s", f.saturating_sub(s) as f64 / 1000.0),
        _ => "-".into(),
    }
}

fn versions_table(versions: &[VersionView], now_ms: u64) -> Table {
    use Align::{Left, Right};
    let mut table = Table::new(&[
        ("VERSION", Left),
        ("TAG", Left),
        ("COMMIT", Left),
        ("STATE", Left),
        ("ARTIFACT", Left),
        ("BUILT", Left),
        ("TOOK", Right),
    ]);
    for v in versions {
        table.row(vec![
            v.version.clone(),
            v.tag.trim_start_matches("refs/tags/").to_owned(),
            v.commit
                .as_deref()
                .map_or("-".into(), |c| c[..12.min(c.len())].to_owned()),
            v.state.as_str().to_owned(),
            artifact_text(v.artifact.as_ref()),
            v.finished_ms.map_or("-".into(), |t| ago(t, now_ms)),
            took(v),
        ]);
    }
    table
}

fn describe_version(v: &VersionView, now_ms: u64) -> String {
    let mut text = format!(
        "project:   {}\nversion:   {}\nstate:     {}\nbuild:     {}\ntag:       {}\ncommit:    {}\nartifact:  {}\ntrigger:   {}\nqueued:    {}\ntook:      {}\n",
        v.project,
        v.version,
        v.state.as_str(),
        v.build,
        v.tag,
        v.commit.as_deref().unwrap_or("-"),
        artifact_text(v.artifact.as_ref()),
        v.trigger,
        ago(v.created_ms, now_ms),
        took(v),
    );
    if let Some(hub) = &v.hub {
        text.push_str(&format!("hub:       {hub}\n"));
    }
    if let Some(reason) = &v.reason {
        text.push_str(&format!("reason:    {reason}\n"));
    }
    text
}
