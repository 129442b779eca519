//! One run of the Python guest builder, confined ([`super::confine`]) and cancellable: the
//! builder's process group is registered while it runs, so an unload of its model or the
//! server's stop ends it ([`Builds::cancel`]), and its time limit ends it too. Its environment
//! is not the server's: only what a build needs, and the operator's pip settings for a fetch.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::confine::Confinement;
use crate::backend::child::{BUILD_OUTPUT, drain_within};

/// Why a run did not produce its output.
#[derive(Debug)]
pub(super) enum BuildError {
    /// The builder failed: the end of what it printed, or why it could not run.
    Failed(String),
    /// Cancelled by an unload or the server's stop.
    Cancelled,
}

impl BuildError {
    /// The failure with the build directory, the cache and the builder's checkout named by
    /// placeholders: what the builder printed goes to the client, the server's paths do not.
    pub(super) fn redacted(self, build_dir: &Path, cache_root: Option<&Path>, toolchain: Option<&Path>) -> Self {
        match self {
            BuildError::Failed(why) => {
                let mut why = why.replace(&*build_dir.to_string_lossy(), "<build>");
                if let Some(root) = cache_root {
                    why = why.replace(&*root.to_string_lossy(), "<cache>");
                }
                if let Some(root) = toolchain.filter(|r| r.components().count() > 1) {
                    why = why.replace(&*root.to_string_lossy(), "<toolchain>");
                }
                BuildError::Failed(why)
            }
            cancelled => cancelled,
        }
    }
}

/// The builds running now, by model, so they can be cancelled.
#[derive(Default)]
pub(super) struct Builds {
    running: Mutex<HashMap<u64, Running>>,
    next: AtomicU64,
    /// Set once the server stops: no build starts after it.
    closed: AtomicBool,
}

struct Running {
    model: String,
    group: libc::pid_t,
    cancelled: Arc<AtomicBool>,
}

impl Builds {
    /// Ends the builds of `model` (every build for `None`, and none may start after that).
    pub(super) fn cancel(&self, model: Option<&str>) {
        if model.is_none() {
            self.closed.store(true, Ordering::SeqCst);
        }
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        for build in running.values().filter(|b| model.is_none_or(|m| m == b.model)) {
            build.cancelled.store(true, Ordering::SeqCst);
            kill_group(build.group);
            tracing::info!(model = build.model.as_str(), "Python guest build cancelled");
        }
    }

    #[cfg(test)]
    pub(super) fn running_count(&self) -> usize {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub(super) fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn register(&self, model: &str, group: libc::pid_t, cancelled: &Arc<AtomicBool>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let build = Running { model: model.to_string(), group, cancelled: Arc::clone(cancelled) };
        self.running.lock().unwrap_or_else(|e| e.into_inner()).insert(id, build);
        // A stop that came between the spawn and the registration still ends it.
        if self.closed() {
            cancelled.store(true, Ordering::SeqCst);
            kill_group(group);
        }
        id
    }

    fn unregister(&self, id: u64) {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }
}

/// Kills a builder's whole process group (it was started as the group's leader, and
/// componentize-py and pip run as its children, holding its pipes).
fn kill_group(group: libc::pid_t) {
    // SAFETY: kill(2) touches no memory of this process.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(-group, libc::SIGKILL);
    }
}

/// One builder run: `bash BUILDER SOURCE OUT`, with `TESSERA_BUILD_PHASE` saying which part.
pub(super) struct Run<'a> {
    pub builder: &'a Path,
    /// `fetch` (only requirements.txt's wheels, into the dependency cache) or `build` (the
    /// rest, offline: whatever it needs must be in the caches already).
    pub phase: &'static str,
    pub source: &'a Path,
    pub out: &'a Path,
    /// The build directory: HOME and TMPDIR of the builder.
    pub build_dir: &'a Path,
    /// Where the builder keeps numpy and dependency builds (`TESSERA_CACHE_DIR`).
    pub cache_root: Option<&'a Path>,
    /// `None`: unconfined (a builder of the operator's own, run by `tessera guest prepare`).
    pub confinement: Option<&'a Confinement>,
    pub timeout: Duration,
    pub model: &'a str,
    /// The model's `.py` files, relative to the version directory: a failure's reason names
    /// the one its traceback points at ([`super::reason`]).
    pub model_files: &'a [String],
}

impl Run<'_> {
    /// Runs it; `Ok` once the builder exited 0 (the caller checks what it wrote).
    pub(super) fn run(&self, builds: &Builds) -> Result<(), BuildError> {
        use std::os::unix::process::CommandExt;
        if builds.closed() {
            return Err(BuildError::Cancelled);
        }
        let ruleset = match self.confinement.map(Confinement::ruleset).transpose() {
            Ok(ruleset) => ruleset,
            Err(e) => return Err(BuildError::Failed(format!("could not confine the builder: {e}"))),
        };
        let mut command = Command::new("bash");
        command
            .arg(self.builder)
            .arg(self.source)
            .arg(self.out)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command.env_clear().envs(self.environment()).current_dir(self.build_dir).process_group(0);
        if let Some(ruleset) = ruleset {
            let parent = std::process::id() as libc::pid_t;
            // SAFETY: `enforce` makes only system calls (no allocation, no locks), which is what
            // may run between fork and exec.
            #[allow(unsafe_code)]
            unsafe {
                command.pre_exec(move || ruleset.enforce(parent));
            }
        }
        let mut child = command
            .spawn()
            .map_err(|e| BuildError::Failed(format!("could not start {}: {e}", self.builder.display())))?;
        let cancelled = Arc::new(AtomicBool::new(false));
        let id = builds.register(self.model, child.id() as libc::pid_t, &cancelled);
        let group = child.id() as libc::pid_t;
        let (_, stdout, stderr, timed_out) =
            drain_within(&mut child, &[], self.timeout, |_| kill_group(group), Some(BUILD_OUTPUT));
        // Before the leader is reaped, while its group id cannot be reused: a cancel after this
        // finds nothing to kill.
        builds.unregister(id);
        let status = child.wait();
        if cancelled.load(Ordering::SeqCst) {
            return Err(BuildError::Cancelled);
        }
        let printed = format!("{}{}", String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
        let tail = super::reason::clean_lines(&last_lines(&printed, 30), 400);
        if timed_out {
            return Err(BuildError::Failed(format!(
                "the build took longer than {}s (--python-guest-build-timeout-secs) and was stopped{}",
                self.timeout.as_secs(),
                if tail.is_empty() { String::new() } else { format!(":\n{tail}") }
            )));
        }
        match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(BuildError::Failed(match super::reason::from_output(&printed, self.model_files) {
                Some(reason) => reason,
                None if tail.is_empty() => format!("the builder exited with {s}"),
                None => tail,
            })),
            Err(e) => Err(BuildError::Failed(format!("waiting for the builder: {e}"))),
        }
    }

    /// The builder's environment: a fixed PATH, HOME and TMPDIR in the build directory, and
    /// for a fetch the operator's pip and proxy settings (which index, which certificates).
    fn environment(&self) -> Vec<(String, String)> {
        let tmp = self.build_dir.join("tmp");
        let home = self.build_dir.join("home");
        let _ = std::fs::create_dir_all(&tmp);
        let _ = std::fs::create_dir_all(&home);
        let mut env = vec![
            ("PATH".to_string(), "/usr/local/bin:/usr/bin:/bin".to_string()),
            ("HOME".to_string(), home.to_string_lossy().into_owned()),
            ("TMPDIR".to_string(), tmp.to_string_lossy().into_owned()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
            // componentize-py is Rust: a backtrace would bury the model's own error.
            ("RUST_BACKTRACE".to_string(), "0".to_string()),
            ("RUST_LIB_BACKTRACE".to_string(), "0".to_string()),
            ("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string()),
            ("TESSERA_BUILD_PHASE".to_string(), self.phase.to_string()),
        ];
        if let Some(root) = self.cache_root {
            env.push(("TESSERA_CACHE_DIR".to_string(), root.to_string_lossy().into_owned()));
        }
        if self.confinement.is_none_or(|c| c.network) {
            env.extend(std::env::vars().filter(|(k, _)| fetch_setting(k)));
        }
        env
    }
}

/// The server's variables a fetch phase keeps: pip's own settings and the proxies.
pub(super) fn fetch_setting(name: &str) -> bool {
    name.starts_with("PIP_")
        || matches!(
            name.to_ascii_lowercase().as_str(),
            "http_proxy" | "https_proxy" | "no_proxy" | "all_proxy" | "ssl_cert_file" | "ssl_cert_dir"
        )
}

/// Local directories named by `PIP_FIND_LINKS` (an operator's wheel directory), which a fetch
/// reads.
pub(super) fn find_links_dirs() -> Vec<PathBuf> {
    std::env::var("PIP_FIND_LINKS")
        .unwrap_or_default()
        .split_whitespace()
        .map(|link| link.strip_prefix("file://").unwrap_or(link))
        .filter(|link| link.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
