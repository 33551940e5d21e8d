//! The Python SDK's own tests (`sdk/python/tests`), run with the Python of
//! `SILK_TEST_PYTHON` (the venv `.ci/run` makes, with Scrapy and the SDK installed): without
//! it the test prints "skipped: …" and passes, except under CI, where it fails.

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_sdk_tests_pass() {
    let python = match std::env::var("SILK_TEST_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "SILK_TEST_PYTHON is not set, and CI must run the Python SDK's tests"
            );
            println!("skipped: SILK_TEST_PYTHON (a Python with scrapy and silk-sdk) is not set");
            return;
        }
    };
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python");
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&sdk)
        .output()
        .unwrap_or_else(|e| panic!("{python} could not run: {e}"));
    assert!(
        out.status.success(),
        "the SDK's tests failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
