//! Shell completions and man pages, generated from the command line definition.

mod cli_support;

use cli_support::silk;

#[test]
fn completions_cover_the_subcommands_and_their_flags() {
    let out = silk().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let bash = String::from_utf8(out.stdout).unwrap();
    assert!(bash.contains("_silk()"), "{bash:.300}");
    for word in ["hub", "agent", "runs", "--public-url", "--allow-programs"] {
        assert!(bash.contains(word), "bash completion lacks {word}");
    }
    let out = silk().args(["completions", "zsh"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("#compdef silk"));
    let out = silk().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

#[test]
fn man_pages_are_written_for_silk_and_each_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let out = silk()
        .args(["man", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let page = |name: &str| {
        std::fs::read_to_string(dir.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let silk_1 = page("silk.1");
    assert!(silk_1.contains(".TH silk 1"), "{silk_1:.200}");
    assert!(
        silk_1.contains("silk\\-hub(1)"),
        "the subcommands are listed"
    );
    let hub = page("silk-hub.1");
    assert!(hub.contains("\\-\\-public\\-url"), "{hub:.500}");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "silk-runs.1"), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        said.contains(&format!("{} man pages", names.len())),
        "{said}"
    );
}
