//! The current `anthropic` and `openai` Python SDKs from PyPI, installed once into a venv
//! under the target directory, and the scripts the tests drive them with: each makes one
//! API call to the base URL in `SDK_BASE_URL` with the key from its usual environment
//! variable, ignores the (echo server's) answer, and prints `SDK VERSION`.

/// A virtual environment with the current `anthropic` and `openai` SDKs from PyPI, made
/// once under the target directory and reused; fails the test, saying why, when python3 or
/// PyPI is not available.
pub fn sdk_python() -> std::path::PathBuf {
    // One installation for the tests of the binary, which run in parallel.
    static PYTHON: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(install_sdks).clone()
}

/// [`sdk_python`]'s work.
fn install_sdks() -> std::path::PathBuf {
    let venv = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("provider-sdk-venv");
    let python = venv.join("bin/python");
    let ready = |python: &std::path::Path| {
        std::process::Command::new(python)
            .args(["-c", "import anthropic, openai"])
            .output()
            .is_ok_and(|output| output.status.success())
    };
    if ready(&python) {
        return python;
    }
    let made = std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap_or_else(|e| panic!("this test needs `python3` (with venv) on PATH: {e}"));
    assert!(made.status.success(), "python3 -m venv failed: {made:?}");
    let installed = std::process::Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "anthropic",
            "openai",
        ])
        .output()
        .expect("run pip");
    assert!(
        installed.status.success() && ready(&python),
        "this test needs the `anthropic` and `openai` packages from PyPI; pip install failed: {}",
        String::from_utf8_lossy(&installed.stderr)
    );
    python
}

/// One `client.messages.create` of the Anthropic SDK; the SDK takes its credential from
/// ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN and picks the header itself.
pub const ANTHROPIC_SCRIPT: &str = r#"
import os, sys, anthropic
client = anthropic.Anthropic(base_url=os.environ["SDK_BASE_URL"], max_retries=0, timeout=20)
try:
    client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=16,
        messages=[{"role": "user", "content": "hello"}],
    )
except Exception as error:  # the echo server answers no Message: only the request matters
    print(f"sdk: {type(error).__name__}: {error}", file=sys.stderr)
print("SDK", anthropic.__version__)
"#;

/// One `client.chat.completions.create` of the OpenAI SDK, keyed by OPENAI_API_KEY.
pub const OPENAI_SCRIPT: &str = r#"
import os, sys, openai
client = openai.OpenAI(base_url=os.environ["SDK_BASE_URL"], max_retries=0, timeout=20)
try:
    client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "hello"}]
    )
except Exception as error:  # the echo server answers no completion
    print(f"sdk: {type(error).__name__}: {error}", file=sys.stderr)
print("SDK", openai.__version__)
"#;
