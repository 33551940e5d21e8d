//! `silk router check` and `silk router explain` through the real binary.

use std::path::Path;
use std::process::Command;

fn silk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_silk"))
}

fn seed(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/router/seed")
        .join(file)
        .display()
        .to_string()
}

#[test]
fn check_accepts_the_seed_config_and_names_unfilled_placeholders() {
    let ok = silk()
        .args([
            "router",
            "check",
            "--config",
            &seed("main.yaml"),
            "--var-file",
            &seed("vars.yaml"),
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    let bad = silk()
        .args(["router", "check", "--config", &seed("main.yaml")])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("unfilled placeholder `{redis_url}`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sub_config_a.yaml:"),
        "errors name the file and line: {stderr}"
    );
}

#[test]
fn explain_prints_the_check_task_answer() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task.json");
    std::fs::write(&task, r#"{"task_type": "x"}"#).unwrap();
    let out = silk()
        .args([
            "router",
            "explain",
            "--config",
            &seed("main.yaml"),
            "--var-file",
            &seed("vars.yaml"),
        ])
        .args(["--inbound", "no-such-inbound"])
        .arg(&task)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["accepted"], false);
    assert!(answer["outbound"].is_null());
}
