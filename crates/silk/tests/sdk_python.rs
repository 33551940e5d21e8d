//! The Python SDK's own tests (`sdk/python/tests`), run with the Python of
//! `SILK_TEST_PYTHON` (the venv `.ci/run` makes, with Scrapy and the SDK installed): without
//! it the test prints "skipped: …" and passes, except under CI, where it fails.

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_sdk_tests_pass() {
    // The venv `.ci/run` makes, with Scrapy and silk-sdk.
    let Some(python) = silk_testkit::service_url("SILK_TEST_PYTHON") else {
        return;
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
