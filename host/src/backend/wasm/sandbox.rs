//! What a guest may use, per model, from its config `parameters`: memory and time limits, the
//! models it may call, a read-only view of its version directory, real clocks, and the server's
//! environment variables the operator granted (`--guest-env`) that the model asks for
//! (`environment_variables`; see [`GuestEnv`]). Everything else (network, other variables, other
//! files) is never granted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use wasmtime::ResourceLimiter;
use wasmtime_wasi::WasiCtx;

use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};

const DEFAULT_MAX_MEMORY: usize = 256 << 20;
const DEFAULT_MAX_EXECUTE_MS: u64 = 10_000;
/// The pooling allocator's per-memory reservation: no model may ask for more.
const MAX_MEMORY_CAP: usize = 4 << 30;

/// Per-model sandbox settings, read from config parameters.
#[derive(Clone, Debug)]
pub(super) struct Sandbox {
    pub(super) max_memory: usize,
    pub(super) max_execute: Duration,
    /// `max_cpu_ms_per_second`: the CPU time the model's executions may use per second.
    pub(super) max_cpu_per_second: Option<Duration>,
    pub(super) allowed_models: AllowList,
    read_only_dir: Option<PathBuf>,
    clocks: bool,
    /// The `environment_variables` parameter: the names and `PREFIX*` patterns the model asks
    /// for; none without it.
    env_requested: Vec<String>,
    /// What the guest's WASI environment holds: set by [`Self::grant_env`], empty until then.
    env: Vec<(String, String)>,
    /// `isolation = fresh`: every execution runs in an instance of its own (see `instance`).
    pub(super) fresh: bool,
}

/// The models a guest may call through BLS (`allowed_models`).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum AllowList {
    #[default]
    Nothing,
    Any,
    Only(Vec<String>),
}

impl AllowList {
    /// The `allowed_models` parameter's value: empty allows nothing, `*` any model, else a comma
    /// list of names.
    pub(crate) fn parse(text: &str) -> Self {
        match text.trim() {
            "" => AllowList::Nothing,
            "*" => AllowList::Any,
            list => AllowList::Only(list.split(',').map(|m| m.trim().to_string()).filter(|m| !m.is_empty()).collect()),
        }
    }

    pub(super) fn allows(&self, model: &str) -> bool {
        match self {
            AllowList::Nothing => false,
            AllowList::Any => true,
            AllowList::Only(list) => list.iter().any(|m| m == model),
        }
    }

    /// The models both lists allow, in this list's order.
    pub(crate) fn narrowed_by(&self, other: &AllowList) -> AllowList {
        match (self, other) {
            (AllowList::Nothing, _) | (_, AllowList::Nothing) => AllowList::Nothing,
            (AllowList::Any, list) | (list, AllowList::Any) => list.clone(),
            (AllowList::Only(mine), theirs) => {
                AllowList::Only(mine.iter().filter(|m| theirs.allows(m)).cloned().collect())
            }
        }
    }

    /// The list as an `allowed_models` parameter value ([`Self::parse`] reads it back).
    pub(crate) fn to_parameter(&self) -> String {
        match self {
            AllowList::Nothing => String::new(),
            AllowList::Any => "*".into(),
            AllowList::Only(list) => list.join(","),
        }
    }
}

impl Sandbox {
    pub(super) fn from_config(config: &ModelConfig, version_dir: &Path) -> CoreResult<Self> {
        let param = |key: &str| config.parameters.get(key).map(|p| p.string_value.trim().to_string());
        let number = |key: &str| crate::config::positive_parameter(config, key).map_err(CoreError::invalid_arg);
        let max_memory =
            number("max_memory_bytes")?.map_or(DEFAULT_MAX_MEMORY, |n| usize::try_from(n).unwrap_or(usize::MAX));
        if max_memory > MAX_MEMORY_CAP {
            return Err(CoreError::invalid_arg("parameter 'max_memory_bytes' must be at most 4 GiB"));
        }
        let allowed_models = AllowList::parse(param("allowed_models").as_deref().unwrap_or(""));
        let read_only_dir = match param("filesystem").as_deref() {
            None | Some("" | "none") => None,
            Some("read-only") => Some(version_dir.to_path_buf()),
            Some(other) => {
                return Err(CoreError::invalid_arg(format!(
                    "parameter 'filesystem' must be 'none' or 'read-only', got '{other}'"
                )));
            }
        };
        let clocks = match param("clocks").as_deref() {
            None | Some("" | "false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(CoreError::invalid_arg(format!("parameter 'clocks' must be true or false, got '{other}'")));
            }
        };
        let fresh = match param("isolation").as_deref() {
            None | Some("" | "reuse") => false,
            Some("fresh") => true,
            Some(_) => return Err(CoreError::invalid_arg("parameter 'isolation' must be reuse or fresh")),
        };
        let env_requested = match param(ENV_PARAMETER) {
            None => Vec::new(),
            Some(list) => env::parse_request(&list).map_err(CoreError::invalid_arg)?,
        };
        Ok(Self {
            max_memory,
            max_execute: Duration::from_millis(number("max_execute_ms")?.unwrap_or(DEFAULT_MAX_EXECUTE_MS)),
            max_cpu_per_second: number("max_cpu_ms_per_second")?.map(Duration::from_millis),
            allowed_models,
            read_only_dir,
            clocks,
            env_requested,
            env: Vec::new(),
            fresh,
        })
    }

    /// Gives the guest the variables of `granted` (the operator's) that the model's
    /// `environment_variables` asks for. A name it asks for that the operator did not grant fails
    /// the load, naming it (a name is checked to be one before it is ever echoed).
    pub(super) fn grant_env(&mut self, granted: &GuestEnv) -> CoreResult<()> {
        self.env = granted.for_request(&self.env_requested).map_err(CoreError::invalid_arg)?;
        Ok(())
    }

    /// The variables the guest sees (names and values), for tests and logs.
    #[cfg(test)]
    pub(super) fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Whether the guest may read files (`filesystem = read-only`): wasmtime-wasi serves a file
    /// read by blocking on the runtime, so such a guest must not run on an async worker thread.
    pub(super) fn grants_filesystem(&self) -> bool {
        self.read_only_dir.is_some()
    }

    /// The most bytes one guest-to-host call may make the host allocate while it lifts the
    /// call's arguments (and the host lifting `execute`'s results): 2 x `max_memory_bytes`.
    /// wasmtime copies every string and list a guest passes before the host sees any of them, and
    /// one string named a million times in a `list<string>` is a million copies: this cap
    /// (wasmtime's "hostcall fuel", 128 MiB by default whatever the model) bounds that by what the
    /// operator granted the model. Real data never nears it: a guest cannot pass more bytes than
    /// its linear memory holds, and the host's copies of the lists' headers cost at most about
    /// three times the guest's own.
    pub(super) fn max_hostcall_bytes(&self) -> usize {
        self.max_memory.saturating_mul(2)
    }

    /// The WASI context of one store: only the grants above.
    pub(super) fn wasi(&self) -> CoreResult<WasiCtx> {
        let mut builder = WasiCtx::builder();
        if !self.clocks {
            builder.wall_clock(FrozenClock).monotonic_clock(FrozenClock);
        }
        builder.allow_ip_name_lookup(false);
        builder.envs(&self.env);
        if let Some(dir) = &self.read_only_dir {
            builder.preopened_dir(dir, "/model", wasmtime_wasi::FsPerms::ReadOnly).map_err(|e| {
                CoreError::internal(format!("failed to grant read-only access to {}: {e}", dir.display()))
            })?;
            // Also at `/model/<version>`: a Python guest's `args['model_repository']` is `/model`,
            // so Triton's `os.path.join(model_repository, model_version, file)` opens it too.
            if let Some(version) = dir.file_name().and_then(|n| n.to_str()).filter(|n| n.parse::<u64>().is_ok()) {
                let alias = format!("/model/{version}");
                builder.preopened_dir(dir, &alias, wasmtime_wasi::FsPerms::ReadOnly).map_err(|e| {
                    CoreError::internal(format!("failed to grant read-only access to {}: {e}", dir.display()))
                })?;
            }
        }
        Ok(builder.build())
    }
}

/// The variable no pattern grants: it holds the keys of sealed model files (`backend::sealed`).
const NEVER_GRANTED: &str = "TESSERA_MODEL_KEYS";

/// The model parameter naming the variables a model asks for.
pub(crate) const ENV_PARAMETER: &str = "environment_variables";

/// The server's environment variables an operator grants to guests (`tessera serve --guest-env`):
/// exact names, or `PREFIX*` for every variable whose name starts with `PREFIX`. Their values are
/// read once, when the server starts. A guest sees a granted variable only if its model's
/// `environment_variables` parameter asks for it (a name, a `PREFIX*`, or `*` for every granted
/// one): an uploaded config alone reads nothing of the server's environment.
#[derive(Clone, Debug, Default)]
pub struct GuestEnv {
    patterns: Vec<String>,
    /// The granted variables the server has, by name.
    values: std::collections::BTreeMap<String, String>,
}

impl GuestEnv {
    /// The grant of `patterns` over this process's environment.
    pub fn from_server(patterns: &[String]) -> Result<Self, String> {
        Self::new(patterns, std::env::vars_os())
    }

    /// The grant of `patterns` over `vars` (variables whose name or value is not Unicode are
    /// never granted). A bare `*` is refused: the operator names what guests may read.
    pub fn new(
        patterns: &[String],
        vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Result<Self, String> {
        let mut checked = Vec::new();
        for pattern in patterns.iter().flat_map(|p| p.split(',')).map(str::trim).filter(|p| !p.is_empty()) {
            if pattern == "*" {
                return Err("--guest-env '*' would hand every server variable (credentials included) to guests: \
                            name the variables, or a prefix such as MYAPP_*"
                    .into());
            }
            if !env::valid_pattern(pattern) {
                return Err(format!(
                    "--guest-env {}: a variable name (letters, digits, '_', not starting with a digit), \
                     optionally ending in '*'",
                    pattern.escape_debug()
                ));
            }
            checked.push(pattern.to_string());
        }
        let values = vars
            .into_iter()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| checked.iter().any(|p| env::matches(p, k)))
            // The keys of sealed models are the server's, whatever a pattern matches.
            .filter(|(k, _)| k != NEVER_GRANTED)
            .collect();
        Ok(Self { patterns: checked, values })
    }

    /// Whether the operator granted nothing.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The variables a model asking for `request` (checked names and patterns) sees; `Err`
    /// naming an exact name the operator did not grant.
    fn for_request(&self, request: &[String]) -> Result<Vec<(String, String)>, String> {
        for name in request.iter().filter(|r| !r.ends_with('*')) {
            if !self.patterns.iter().any(|p| env::matches(p, name)) {
                return Err(format!(
                    "parameter '{ENV_PARAMETER}' asks for the environment variable {name}, which the server does \
                     not grant to guests (the operator grants variables with `tessera serve --guest-env NAME`)"
                ));
            }
        }
        Ok(self
            .values
            .iter()
            .filter(|(k, _)| request.iter().any(|r| env::matches(r, k)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

/// The syntax of variable names and patterns.
mod env {
    /// At most this many entries, of at most this many bytes, in `environment_variables`.
    const MAX_ENTRIES: usize = 256;
    const MAX_NAME: usize = 256;

    /// `NAME` or `PREFIX*` (a portable name: letters, digits and '_', not starting with a digit).
    pub(super) fn valid_pattern(pattern: &str) -> bool {
        let name = pattern.strip_suffix('*').unwrap_or(pattern);
        name.len() <= MAX_NAME
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && (!name.is_empty() || pattern == "*")
    }

    pub(super) fn matches(pattern: &str, name: &str) -> bool {
        match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => pattern == name,
        }
    }

    /// The `environment_variables` parameter: a comma list of names, `PREFIX*` patterns and
    /// `*`. An entry that is none of those is refused by its position, never echoed.
    pub(super) fn parse_request(list: &str) -> Result<Vec<String>, String> {
        let entries: Vec<&str> = list.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        if entries.len() > MAX_ENTRIES {
            return Err(format!("parameter '{}' lists more than {MAX_ENTRIES} variables", super::ENV_PARAMETER));
        }
        for (i, entry) in entries.iter().enumerate() {
            if !valid_pattern(entry) {
                return Err(format!(
                    "parameter '{}': entry {} is not a variable name (letters, digits and '_', not starting with \
                     a digit, at most {MAX_NAME} bytes), a PREFIX* or *",
                    super::ENV_PARAMETER,
                    i + 1
                ));
            }
        }
        Ok(entries.into_iter().map(String::from).collect())
    }
}

/// The clock a guest sees without the `clocks` grant: always zero.
struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

/// How the limiter's refusal starts (`instance::trap_kind` recognises it).
pub(super) const GROW_REFUSED: &str = "linear memory would grow to";

/// Caps linear memory (a grow past the cap traps) and remembers the high-water mark, so an
/// instance that leaks (componentize-py leaks every `list<u8>` a guest passes to the host) is
/// recycled between calls before it hits the cap.
pub(super) struct GuestLimiter {
    max_memory: usize,
    peak: usize,
}

impl GuestLimiter {
    pub(super) fn new(max_memory: usize) -> Self {
        Self { max_memory, peak: 0 }
    }

    /// The largest linear memory size any grow asked for (and got).
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    /// The model's memory limit (`max_memory_bytes`).
    pub(super) fn max_memory(&self) -> usize {
        self.max_memory
    }
}

impl ResourceLimiter for GuestLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            return Err(wasmtime::Error::msg(format!(
                "{GROW_REFUSED} {desired} bytes, beyond the model's limit of {} bytes",
                self.max_memory
            )));
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::config::pb;

    pub(in super::super) fn config(params: &[(&str, &str)]) -> ModelConfig {
        let mut config = ModelConfig { name: "guest".into(), ..ModelConfig::default() };
        for (key, value) in params {
            config.parameters.insert((*key).into(), pb::ModelParameter { string_value: (*value).into() });
        }
        config
    }

    fn sandbox(params: &[(&str, &str)]) -> CoreResult<Sandbox> {
        Sandbox::from_config(&config(params), Path::new("/models/guest/1"))
    }

    fn error(params: &[(&str, &str)]) -> String {
        match sandbox(params) {
            Ok(s) => panic!("{params:?} must be refused, got {s:?}"),
            Err(e) => {
                assert_eq!(e.kind, crate::error::ErrorKind::InvalidArg);
                e.message
            }
        }
    }

    #[test]
    fn defaults_grant_nothing() {
        let s = sandbox(&[]).expect("defaults");
        assert_eq!(s.max_memory, 256 << 20);
        assert_eq!(s.max_hostcall_bytes(), 512 << 20);
        assert_eq!(s.max_execute, Duration::from_secs(10));
        assert_eq!(s.allowed_models, AllowList::Nothing);
        assert_eq!(s.read_only_dir, None);
        assert!(!s.clocks);
        // Empty values (and surrounding spaces) mean the default too.
        let s = sandbox(&[("allowed_models", " "), ("filesystem", ""), ("clocks", "  ")]).expect("empty values");
        assert_eq!(s.allowed_models, AllowList::Nothing);
        assert_eq!(s.read_only_dir, None);
        assert!(!s.clocks);
    }

    #[test]
    fn max_memory_bytes() {
        assert_eq!(sandbox(&[("max_memory_bytes", "1048576")]).expect("valid").max_memory, 1 << 20);
        assert_eq!(sandbox(&[("max_memory_bytes", " 65536 ")]).expect("trimmed").max_memory, 65536);
        assert_eq!(sandbox(&[("max_memory_bytes", "4294967296")]).expect("4 GiB").max_memory, 4 << 30);
        for bad in ["0", "-1", "1.5", "lots", "1 MiB"] {
            assert_eq!(
                error(&[("max_memory_bytes", bad)]),
                format!("parameter 'max_memory_bytes' must be a positive integer, got '{bad}'")
            );
        }
        for too_big in ["4294967297", "18446744073709551615"] {
            assert_eq!(error(&[("max_memory_bytes", too_big)]), "parameter 'max_memory_bytes' must be at most 4 GiB");
        }
    }

    #[test]
    fn max_execute_ms() {
        assert_eq!(sandbox(&[("max_execute_ms", "250")]).expect("valid").max_execute, Duration::from_millis(250));
        assert_eq!(error(&[("max_execute_ms", "0")]), "parameter 'max_execute_ms' must be a positive integer, got '0'");
        assert_eq!(
            error(&[("max_execute_ms", "soon")]),
            "parameter 'max_execute_ms' must be a positive integer, got 'soon'"
        );
    }

    #[test]
    fn allowed_models() {
        assert_eq!(sandbox(&[("allowed_models", "*")]).expect("any").allowed_models, AllowList::Any);
        assert_eq!(
            sandbox(&[("allowed_models", " a, b ,,c ")]).expect("list").allowed_models,
            AllowList::Only(vec!["a".into(), "b".into(), "c".into()])
        );
        assert_eq!(sandbox(&[("allowed_models", ",")]).expect("no names").allowed_models, AllowList::Only(vec![]));
    }

    #[test]
    fn filesystem() {
        assert_eq!(sandbox(&[("filesystem", "none")]).expect("none").read_only_dir, None);
        assert_eq!(
            sandbox(&[("filesystem", "read-only")]).expect("read-only").read_only_dir,
            Some(PathBuf::from("/models/guest/1"))
        );
        assert_eq!(
            error(&[("filesystem", "read-write")]),
            "parameter 'filesystem' must be 'none' or 'read-only', got 'read-write'"
        );
    }

    #[test]
    fn clocks() {
        assert!(sandbox(&[("clocks", "true")]).expect("true").clocks);
        assert!(!sandbox(&[("clocks", "false")]).expect("false").clocks);
        assert_eq!(error(&[("clocks", "yes")]), "parameter 'clocks' must be true or false, got 'yes'");
    }

    #[test]
    fn allow_list_matching() {
        assert!(!AllowList::Nothing.allows("a"));
        assert!(!AllowList::Nothing.allows(""));
        assert!(AllowList::Any.allows("a"));
        assert!(AllowList::Any.allows("anything at all"));
        let only = sandbox(&[("allowed_models", "add_sub , identity")]).expect("list").allowed_models;
        assert!(only.allows("add_sub"));
        assert!(only.allows("identity"));
        assert!(!only.allows("add"), "names match whole");
        assert!(!only.allows(" identity"), "the caller's name is not trimmed");
        assert!(!only.allows("*"), "'*' is only special on its own");
        assert!(!sandbox(&[("allowed_models", "a,*")]).expect("list").allowed_models.allows("b"));
    }

    #[test]
    fn limiter_refuses_growth_past_the_cap_and_tracks_the_peak() {
        let mut limiter = GuestLimiter::new(1 << 20);
        assert_eq!(limiter.peak(), 0);
        assert!(limiter.memory_growing(0, 65536, None).expect("within the cap"));
        assert!(limiter.memory_growing(65536, 1 << 20, None).expect("exactly the cap"));
        assert_eq!(limiter.peak(), 1 << 20);
        let refused = limiter.memory_growing(1 << 20, (1 << 20) + 65536, None).expect_err("past the cap");
        assert_eq!(
            refused.to_string(),
            "linear memory would grow to 1114112 bytes, beyond the model's limit of 1048576 bytes"
        );
        assert_eq!(limiter.peak(), 1 << 20, "a refused grow is not a peak");
        // Another memory of the same store growing less does not lower the peak.
        assert!(limiter.memory_growing(0, 65536, None).expect("small"));
        assert_eq!(limiter.peak(), 1 << 20);
        assert!(limiter.table_growing(0, 1_000_000, None).expect("table within bounds"));
        assert!(!limiter.table_growing(0, 1_000_001, None).expect("table past bounds"));
    }

    fn granted(patterns: &[&str]) -> GuestEnv {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        let vars = [("APP_MODE", "fast"), ("APP_LEVEL", "3"), ("SECRET_TOKEN", "hunter2"), ("HOME", "/root")];
        GuestEnv::new(&patterns, vars.iter().map(|(k, v)| ((*k).into(), (*v).into()))).expect("grant")
    }

    fn seen(grant: &GuestEnv, params: &[(&str, &str)]) -> CoreResult<Vec<(String, String)>> {
        let mut s = sandbox(params)?;
        s.grant_env(grant)?;
        Ok(s.env().to_vec())
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn no_pattern_grants_the_keys_of_sealed_models() {
        let vars = [("TESSERA_MODEL_KEYS", "{\"keys\":[]}"), ("TESSERA_MODE", "x")];
        let grant = GuestEnv::new(&["TESSERA_*".to_string()], vars.iter().map(|(k, v)| ((*k).into(), (*v).into())))
            .expect("grant");
        let env = seen(&grant, &[("environment_variables", "*")]).expect("all");
        assert_eq!(env, pairs(&[("TESSERA_MODE", "x")]));
    }

    #[test]
    fn a_guest_sees_granted_variables_its_model_asks_for_and_nothing_else() {
        let grant = granted(&["APP_*", "HOME"]);
        assert!(!grant.is_empty());
        // Without the parameter: nothing, whatever the operator granted.
        assert_eq!(seen(&grant, &[]).expect("none asked"), vec![]);
        assert_eq!(
            seen(&grant, &[("environment_variables", "APP_MODE")]).expect("one"),
            pairs(&[("APP_MODE", "fast")])
        );
        assert_eq!(
            seen(&grant, &[("environment_variables", " APP_* , HOME ")]).expect("pattern"),
            pairs(&[("APP_LEVEL", "3"), ("APP_MODE", "fast"), ("HOME", "/root")])
        );
        assert_eq!(
            seen(&grant, &[("environment_variables", "*")]).expect("every granted one"),
            pairs(&[("APP_LEVEL", "3"), ("APP_MODE", "fast"), ("HOME", "/root")])
        );
        // Granted but not set on the server: absent, as in a process.
        assert_eq!(seen(&grant, &[("environment_variables", "APP_UNSET")]).expect("unset"), vec![]);
        // A pattern the model asks for reaches only granted variables.
        assert_eq!(seen(&grant, &[("environment_variables", "SECRET_*")]).expect("no grant"), vec![]);
    }

    #[test]
    fn a_name_the_operator_did_not_grant_fails_the_load_naming_it() {
        let e = seen(&granted(&["APP_*"]), &[("environment_variables", "APP_MODE,SECRET_TOKEN")]).expect_err("refused");
        assert_eq!(e.kind, crate::error::ErrorKind::InvalidArg);
        assert!(e.message.contains("SECRET_TOKEN, which the server does not grant"), "{}", e.message);
        assert!(!e.message.contains("hunter2"));
        let e = seen(&GuestEnv::default(), &[("environment_variables", "HOME")]).expect_err("nothing granted");
        assert!(e.message.contains("--guest-env"), "{}", e.message);
    }

    #[test]
    fn bad_names_are_refused_without_being_echoed() {
        for bad in ["A-B", "1ABC", "A B", "A\u{1b}[31m", "A=B", "**", "A*B"] {
            let message = error(&[("environment_variables", bad)]);
            assert!(message.contains("entry 1 is not a variable name"), "{message}");
            assert!(!message.contains(bad), "{message}");
        }
        let many = vec!["A"; 257].join(",");
        assert!(error(&[("environment_variables", &many)]).contains("more than 256"));
        for bad in ["*", "A-B", "SECRET,*"] {
            assert!(GuestEnv::new(&[bad.to_string()], std::iter::empty()).is_err(), "{bad}");
        }
        // Comma lists and repeats; variables that are not Unicode are never granted.
        let grant = GuestEnv::new(
            &["A,B".to_string(), " C ".to_string()],
            [("C".into(), std::ffi::OsString::from("c")), ("A".into(), "a".into())],
        )
        .expect("grant");
        assert_eq!(grant.for_request(&["*".to_string()]).expect("all"), pairs(&[("A", "a"), ("C", "c")]));
    }

    #[test]
    fn frozen_clocks_read_zero() {
        use wasmtime_wasi::{HostMonotonicClock, HostWallClock};
        assert_eq!(HostWallClock::now(&FrozenClock), Duration::ZERO);
        assert_eq!(HostMonotonicClock::now(&FrozenClock), 0);
    }

    #[test]
    fn wasi_context_builds_with_and_without_grants() {
        assert!(sandbox(&[]).expect("defaults").wasi().is_ok());
        assert!(sandbox(&[("clocks", "true")]).expect("clocks").wasi().is_ok());
        let s = Sandbox::from_config(&config(&[("filesystem", "read-only")]), Path::new("/nonexistent/tessera/dir"))
            .expect("parse");
        let Err(e) = s.wasi() else { panic!("a missing directory cannot be granted") };
        assert!(
            e.message.starts_with("failed to grant read-only access to /nonexistent/tessera/dir: "),
            "{}",
            e.message
        );
    }
}
