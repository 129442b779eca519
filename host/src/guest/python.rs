//! Python guests: a Triton-style `model.py` componentized by `componentize-py` against `wit/`
//! with the Python SDK (`guest-sdk/python`) on its path (scripts/build-python-guest.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(super) fn build(root: &Path, model_py: &Path, out: &Path) -> Result<(), String> {
    let tool = ["componentize-py"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::iter::once(root.join(".venv/bin/componentize-py")))
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .ok_or("componentize-py not found: run scripts/setup.sh (it installs it into .venv)")?;
    let script = root.join("scripts/build-python-guest.sh");
    let status = Command::new("bash")
        .arg(&script)
        .arg(model_py)
        .arg(out)
        .env("COMPONENTIZE_PY", &tool)
        .status()
        .map_err(|e| format!("failed to run {}: {e}", script.display()))?;
    if status.success() { Ok(()) } else { Err(format!("componentize-py failed for {}", model_py.display())) }
}
