//! Compiling a component, in this process or in a compiler process of its own.
//!
//! Why a process: compiling a Python guest (a ~20 MB component holding an interpreter) peaks
//! near 500 MB of allocations spread over Cranelift's worker threads. In the server those pages
//! stayed with the allocator after the compile, and request threads that came and went later
//! touched them again: RSS grew under load for minutes after a cold start, up to about what the
//! compile had committed. A compiler
//! process gives all of it back when it exits, and a compile that crashes (a hostile or broken
//! component) fails that model's load, not the server. Its threads are bounded: each compile
//! gets twice the cores over the compiles running when it starts, at most 16
//! ([`compile_threads`]). Its memory is capped (`--wasm-compile-memory-mib`, 4 GiB by default;
//! the Python guest needs a cap of 0.6-1.25 GiB, more with more threads): a component made to
//! blow up Cranelift's memory fails its own load when the compiler's allocations hit the cap
//! (`RLIMIT_DATA`: private writable mappings, heap, stacks and reserved arenas, counted when
//! mapped rather than when touched), before the kernel's OOM killer has to pick a victim. The
//! cap is per compile; compiles run on the model-load threads, so `--model-load-thread-count` of
//! them may be at the cap at once. Should the OOM killer still act, the compiler asks to be taken
//! first (`oom_score_adj` 1000), which a container OOM-killed as a whole (`memory.oom.group`)
//! does not honour.
//!
//! The server binary is its own compiler: `tessera compile-component` reads the component's
//! bytes on stdin (the very bytes the server hashed for the cache key, so a file changed
//! meanwhile cannot slip into the cache under the old key) and writes the compiled artifact to
//! `--output` or stdout. Its engine has the server's settings ([`engine_config`]), so the
//! artifact loads in the server's engine; wasmtime checks that again when loading.
//!
//! An embedder (the Python package) has no such binary and compiles in its own process unless it
//! names a compiler (`WasmOptions::compiler`).

use std::io::ErrorKind;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::Component;

use super::functions::{FunctionCache, FunctionStore};
use super::settings::{Allocation, engine_config};
use crate::backend::child::drain_within;
use crate::backend::disk_cache::write_atomically;
use crate::error::{CoreError, CoreResult};

/// The subcommand the compiler process runs.
const SUBCOMMAND: &str = "compile-component";

/// The exit status of a compiler process given bytes that are not a valid component (its stderr
/// says why); any other failure exits 1.
/// Not 2, which is clap's for a command line it cannot parse.
const INVALID_COMPONENT: i32 = 65;

/// How the server compiles components.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Compiler {
    /// In this process (an embedded server, tests). Nothing bounds how long a compile takes.
    #[default]
    InProcess,
    /// By running `<program> compile-component`: the `tessera` binary itself.
    Process(CompilerProcess),
}

/// The compiler process: which program, how long a compile may take before it is killed and the
/// model's load fails, and how much memory it may allocate (a component made to keep Cranelift
/// busy, or to make it allocate without end, fails only its own load).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompilerProcess {
    pub program: PathBuf,
    pub timeout: Duration,
    /// Bytes of heap and anonymous memory the compiler may map (`RLIMIT_DATA`); `None`: no cap.
    pub memory_limit: Option<u64>,
}

impl CompilerProcess {
    /// The default time limit: a large Python guest compiles in 5-10 s on two cores.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
    /// The default memory cap, 4 GiB: compiling the ~20 MB Python guest (an interpreter) needs
    /// 0.6-0.75 GiB of it on two Cranelift threads and 1-1.25 GiB on sixteen, the most one compile
    /// gets (measured with `prlimit --data` and `RAYON_NUM_THREADS`).
    pub const DEFAULT_MEMORY_LIMIT: u64 = 4 << 30;

    pub fn new(program: impl Into<PathBuf>) -> Self {
        Self { program: program.into(), timeout: Self::DEFAULT_TIMEOUT, memory_limit: Some(Self::DEFAULT_MEMORY_LIMIT) }
    }
}

/// What compiling gave.
pub(super) enum Compiled {
    /// Compiled in this process: the caller writes the cache entry.
    InServer(Component),
    /// Compiled by a compiler process that could not write the cache entry (or had none).
    FromProcess(Component),
    /// The cache entry a compiler process wrote, for the caller to load.
    File(PathBuf),
}

/// Compiles `bytes` (read from `path`, named in errors). A compiler process writes its artifact
/// to `cache_file` when there is one; without one, or when it cannot write there (a cache
/// directory not writable: the server still serves, as an in-process compile would), it hands
/// the artifact back on stdout. A compiler process reuses and adds to `functions`.
pub(super) fn compile(
    compiler: &Compiler,
    engine: &Engine,
    bytes: &[u8],
    path: &Path,
    cache_file: Option<&Path>,
    functions: Option<&FunctionCache>,
) -> CoreResult<Compiled> {
    let Compiler::Process(process) = compiler else {
        return in_process(engine, bytes, path).map(Compiled::InServer);
    };
    let (stdout, stderr) = match in_child(process, bytes, path, cache_file, functions) {
        Ok(output) => output,
        Err(ChildFailure::NotStarted(e)) => {
            tracing::warn!(
                program = %process.program.display(),
                "could not start the compiler process ({e}); compiling in the server"
            );
            return in_process(engine, bytes, path).map(Compiled::InServer);
        }
        Err(ChildFailure::Failed(e)) => return Err(e),
    };
    if let Some(file) = cache_file {
        if stdout.is_empty() {
            return Ok(Compiled::File(file.to_path_buf()));
        }
        tracing::warn!(file = %file.display(), "could not write the compile cache: {stderr}");
    }
    // SAFETY: the bytes are `Component::serialize` output of the compiler process: this running
    // program's own image (`/proc/self/exe`), compiling with this engine's settings
    // ([`engine_config`]). wasmtime checks the header, version and settings again and refuses a
    // mismatch; it cannot check the machine code, hence the trust in the program.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(engine, &stdout) };
    component.map(Compiled::FromProcess).map_err(|e| {
        CoreError::internal(format!("the compiler process's artifact for {} did not load: {e:#}", path.display()))
    })
}

fn in_process(engine: &Engine, bytes: &[u8], path: &Path) -> CoreResult<Component> {
    let started = std::time::Instant::now();
    let component = Component::from_binary(engine, bytes).map_err(|e| invalid_component(path, &format!("{e:#}")))?;
    let elapsed_ms = started.elapsed().as_millis() as u64;
    tracing::info!(model = %path.display(), elapsed_ms, "compiled WebAssembly component");
    Ok(component)
}

fn invalid_component(path: &Path, why: &str) -> CoreError {
    CoreError::invalid_arg(format!("{} is not a valid WebAssembly component: {why}", path.display()))
}

enum ChildFailure {
    /// The program is missing or not executable: compiling in the server still works. (Other
    /// spawn failures, such as too many processes or no memory, fail the load: compiling in the
    /// server just then would make things worse.)
    NotStarted(std::io::Error),
    /// It ran and failed: the component is invalid, or compiling it crashed.
    Failed(CoreError),
}

/// Runs the compiler process on `bytes`; what it wrote on stdout (the artifact, unless it went
/// to `output`) and on stderr.
fn in_child(
    process: &CompilerProcess,
    bytes: &[u8],
    path: &Path,
    output: Option<&Path>,
    functions: Option<&FunctionCache>,
) -> Result<(Vec<u8>, String), ChildFailure> {
    let started = std::time::Instant::now();
    let mut command = Command::new(&process.program);
    // argv[0] `tessera`: a binary copied as `tritonserver` would otherwise take `serve` for granted.
    command.arg0("tessera").arg(SUBCOMMAND);
    // A panic's backtrace is no use in a load error, and printing one after an allocation failed
    // (the memory cap) can deadlock the compiler until its time limit.
    command.env("RUST_BACKTRACE", "0").env("RUST_LIB_BACKTRACE", "0");
    let running = RunningCompile::start();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    command.env("RAYON_NUM_THREADS", compile_threads(cores, running.count).to_string());
    let memory_limit = process.memory_limit.map(DataLimit::under_this_process);
    // SAFETY: `prctl` and `setrlimit` are async-signal-safe and touch no memory of the parent.
    // The thread that spawns the child waits for it to end (or kills it), so "the parent thread
    // died" means the server died: the compiler then stops rather than running on, orphaned.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(limit) = memory_limit {
                libc::setrlimit(libc::RLIMIT_DATA, &libc::rlimit { rlim_cur: limit.cap, rlim_max: limit.hard });
            }
            Ok(())
        });
    }
    if let Some(output) = output {
        command.arg("--output").arg(output);
    }
    if let Some(functions) = functions {
        command.arg("--function-cache").arg(&functions.dir);
        command.arg("--function-cache-max-bytes").arg(functions.max_bytes.to_string());
    }
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| {
            match e.kind() {
                ErrorKind::NotFound | ErrorKind::PermissionDenied => ChildFailure::NotStarted(e),
                _ => ChildFailure::Failed(CoreError::unavailable(format!(
                    "could not start the compiler process for {}: {e}",
                    path.display()
                ))),
            }
        })?;
    let stop = |child: &mut std::process::Child| {
        let _ = child.kill();
    };
    // The artifact comes back on stdout (no cache directory): kept whole.
    let (fed, stdout, stderr, timed_out) = drain_within(&mut child, bytes, process.timeout, stop, None);
    let status = child.wait().map_err(|e| {
        ChildFailure::Failed(CoreError::internal(format!(
            "waiting for the compiler process of {}: {e}",
            path.display()
        )))
    })?;
    if timed_out {
        return Err(ChildFailure::Failed(CoreError::internal(format!(
            "compiling {} took longer than {:?} (--wasm-compile-timeout-secs): the compiler process was stopped",
            path.display(),
            process.timeout
        ))));
    }
    let stderr = String::from_utf8_lossy(&stderr);
    // Rust's hint to set RUST_BACKTRACE after a panic is for the compiler's developers, and the
    // server sets it to 0 on purpose.
    let stderr: Vec<&str> = stderr.lines().filter(|line| !line.starts_with("note: run with `RUST_BACKTRACE")).collect();
    let stderr = stderr.join("\n");
    let stderr = stderr.trim();
    match status.code() {
        Some(0) => {
            tracing::info!(
                model = %path.display(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "compiled WebAssembly component in a compiler process"
            );
            Ok((stdout, stderr.to_string()))
        }
        Some(INVALID_COMPONENT) => Err(ChildFailure::Failed(invalid_component(path, stderr))),
        _ => {
            let fed = match fed {
                Err(e) => format!(" (writing its input: {e})"),
                Ok(()) => String::new(),
            };
            // A signal with nothing said: the kernel refused the loader a mapping, or the OOM
            // killer struck; either may be the cap's doing.
            let silent_signal = status.code().is_none() && stderr.is_empty();
            let cap = match memory_limit {
                Some(limit) if ran_out_of_memory(stderr) || silent_signal => format!(" ({})", limit.describe()),
                _ => String::new(),
            };
            Err(ChildFailure::Failed(CoreError::internal(format!(
                "compiling {} failed in its compiler process ({}){fed}: {stderr}{cap}",
                path.display(),
                status
            ))))
        }
    }
}

/// Compiler processes running now, this server's.
static RUNNING_COMPILES: AtomicUsize = AtomicUsize::new(0);

/// One compiler process counted in [`RUNNING_COMPILES`] while this lives.
struct RunningCompile {
    /// How many ran when this one started, itself included.
    count: usize,
}

impl RunningCompile {
    fn start() -> Self {
        Self { count: RUNNING_COMPILES.fetch_add(1, Ordering::SeqCst) + 1 }
    }
}

impl Drop for RunningCompile {
    fn drop(&mut self) {
        RUNNING_COMPILES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The most Cranelift threads one compile gets. Each costs ~25 MiB at the Python guest's peak
/// (measured peak RSS: ~470 MiB with one thread, 0.9 GiB with 16, 2 GiB with 64), and a compile
/// with many functions is fast enough on 16.
const MAX_COMPILE_THREADS: usize = 16;

/// Cranelift threads (`RAYON_NUM_THREADS`, whatever the server's environment says) for a compile
/// that starts while `running` compiles run, itself included: twice the cores over `running`,
/// fixed for the compile's life (so N compiles started together run about 2·cores·(1 + ln N)
/// threads at most, not cores·N). Without this every compiler process started a thread per core,
/// so at startup, with a model-load thread per core, the compilers ran cores² threads and their
/// memory grew with it. Twice the cores, not just the cores: a compile keeps its threads to the
/// end, and the last one left running would have only its share (on two cores, the quickstart's
/// cold start took 26 s with one thread each, 22-23 s with two).
fn compile_threads(cores: usize, running: usize) -> usize {
    (2 * cores / running.max(1)).clamp(1, MAX_COMPILE_THREADS)
}

/// The compiler's `RLIMIT_DATA`: only the soft limit is set, and never above the hard one, which
/// it inherits. Raising the hard limit takes a privilege a container seldom has, and the failure
/// would read as a program that cannot be started (a silent fallback to an uncapped compile in
/// the server).
#[derive(Clone, Copy)]
struct DataLimit {
    /// What `--wasm-compile-memory-mib` asked for.
    asked: u64,
    /// The soft limit the compiler gets.
    cap: u64,
    /// The hard limit, this process's and so the compiler's.
    hard: u64,
}

impl DataLimit {
    fn under_this_process(asked: u64) -> Self {
        let mut limit = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
        // SAFETY: `getrlimit` writes only the struct it is given; on failure it is left unlimited.
        #[allow(unsafe_code)]
        unsafe {
            libc::getrlimit(libc::RLIMIT_DATA, &mut limit);
        }
        Self { asked, cap: asked.min(limit.rlim_max), hard: limit.rlim_max }
    }

    /// For a load error: what the cap was, and where it came from.
    fn describe(&self) -> String {
        if self.cap < self.asked {
            format!(
                "it may have run out of memory: its cap is {} MiB, the server's own hard RLIMIT_DATA, below \
                 --wasm-compile-memory-mib's {} MiB",
                self.cap >> 20,
                self.asked >> 20
            )
        } else {
            format!("it may have run out of memory: --wasm-compile-memory-mib is {} MiB", self.asked >> 20)
        }
    }
}

/// Whether a compiler's stderr says an allocation failed: Rust's allocation-failure abort, a
/// thread that could not get its stack (Cranelift's worker pool), or the loader unable to map a
/// library's data.
fn ran_out_of_memory(stderr: &str) -> bool {
    ["memory allocation of", "Resource temporarily unavailable", "Cannot allocate memory", "cannot map"]
        .iter()
        .any(|sign| stderr.contains(sign))
}

/// The compiler process's side (`tessera compile-component [--output FILE] [--function-cache
/// DIR]`): the component's bytes on stdin, the artifact to `output` (written atomically) or
/// stdout; to stdout also when `output` cannot be written, saying why on stderr. With a function
/// cache, functions compiled before are taken from it and new ones added ([`super::functions`]).
pub fn compile_component_main(output: Option<&Path>, functions: Option<FunctionCache>) -> ExitCode {
    // If memory runs out, the kernel's OOM killer is to pick this process, not the server.
    // Raising one's own score needs no privilege; where /proc is absent it stays as it was.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        eprintln!("reading the component from stdin: {e}");
        return ExitCode::FAILURE;
    }
    // The server's settings, on demand: instance allocation does not change compiled code (a
    // unit test checks the compatibility hashes agree), and a pool would reserve address space
    // for nothing.
    let mut config = engine_config(Allocation::OnDemand);
    if let Some(FunctionCache { dir, max_bytes }) = functions {
        let store = std::sync::Arc::new(FunctionStore::new(dir, max_bytes));
        if let Err(e) = config.enable_incremental_compilation(store) {
            eprintln!("enabling the function cache: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    let engine = match Engine::new(&config) {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("building the engine: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let artifact = match engine.precompile_component(&bytes) {
        Ok(artifact) => artifact,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::from(INVALID_COMPONENT as u8);
        }
    };
    if let Some(file) = output {
        match write_atomically(file, &artifact) {
            Ok(()) => return ExitCode::SUCCESS,
            Err(e) => eprintln!("{e}"),
        }
    }
    match std::io::stdout().lock().write_all(&artifact) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("writing the compiled component: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wasm::cache::cache_key;
    use crate::backend::wasm::engine::build_engine;
    use crate::backend::wasm::test_support::{EMPTY_COMPONENT, TempDir};

    #[test]
    fn the_compiler_process_engine_makes_artifacts_the_servers_pooled_engine_loads() {
        let pooled = Engine::new(&engine_config(Allocation::Pooling(4))).expect("pooled engine");
        let on_demand = Engine::new(&engine_config(Allocation::OnDemand)).expect("on-demand engine");
        assert_eq!(
            cache_key(&pooled, b"x"),
            cache_key(&on_demand, b"x"),
            "instance allocation must not change the compatibility hash"
        );
        let tmp = TempDir::new("compat-functions");
        let mut config = engine_config(Allocation::OnDemand);
        let store = FunctionStore::new(tmp.0.join("functions"), 0);
        config.enable_incremental_compilation(std::sync::Arc::new(store)).expect("function cache");
        let with_functions = Engine::new(&config).expect("engine with the function cache");
        assert_eq!(cache_key(&with_functions, b"x"), cache_key(&on_demand, b"x"), "nor must the function cache");
        let artifact = with_functions.precompile_component(EMPTY_COMPONENT).expect("precompile");
        let (engine, _linker) = build_engine(Allocation::Pooling(4)).expect("engine");
        // SAFETY: made just above by an engine with the same settings.
        #[allow(unsafe_code)]
        let loaded = unsafe { Component::deserialize(&engine, &artifact) };
        assert!(loaded.is_ok(), "{:?}", loaded.err());
    }

    #[test]
    fn a_compiler_that_cannot_start_leaves_the_compile_to_the_server() {
        let engine = Engine::new(&engine_config(Allocation::OnDemand)).expect("engine");
        let compiler = Compiler::Process(CompilerProcess::new("/nonexistent/tessera"));
        let compiled = compile(&compiler, &engine, EMPTY_COMPONENT, Path::new("m.wasm"), None, None);
        assert!(matches!(compiled, Ok(Compiled::InServer(_))), "compiled here, so the caller writes the cache");
    }

    /// `compile` by a stand-in compiler: a shell script with this body, given `timeout` and a
    /// memory cap of 32 MiB.
    fn compile_by_script(tag: &str, body: &str, timeout: Duration) -> CoreResult<Compiled> {
        let tmp = TempDir::new(tag);
        let program = script(&tmp.0, body);
        let engine = Engine::new(&engine_config(Allocation::OnDemand)).expect("engine");
        let compiler = Compiler::Process(CompilerProcess { program, timeout, memory_limit: Some(32 << 20) });
        compile(&compiler, &engine, b"bytes", Path::new("m.wasm"), None, None)
    }

    /// An executable shell script with this body, in `dir`.
    fn script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let program = dir.join("compiler");
        let text = format!("#!/bin/sh\n[ \"$1\" = ready ] && exit 0\ncat >/dev/null\n{body}\n");
        std::fs::write(&program, text).expect("write");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // Another test thread forking while the file was open for writing holds it open until
        // its exec: running it then fails with ETXTBSY, so wait until it runs (`ready`: at once).
        while let Err(e) = Command::new(&program).arg("ready").status() {
            assert_eq!(e.kind(), std::io::ErrorKind::ExecutableFileBusy, "{e}");
            std::thread::yield_now();
        }
        program
    }

    #[test]
    fn a_compiler_process_that_fails_fails_the_load_with_its_status_and_stderr() {
        let body = "echo 'out of memory' >&2\nexit 3";
        let Err(e) = compile_by_script("compiler", body, CompilerProcess::DEFAULT_TIMEOUT) else {
            panic!("a failing compiler must fail the compile")
        };
        assert_eq!(e.kind, crate::error::ErrorKind::Internal);
        assert_eq!(e.message, "compiling m.wasm failed in its compiler process (exit status: 3): out of memory");
    }

    #[test]
    fn the_compiler_runs_under_its_memory_cap_and_an_allocation_failure_names_the_flag() {
        // The stand-in reports the cap it runs under (`ulimit -d`, in KiB) the way Rust reports a
        // failed allocation before it aborts.
        let body = "echo \"memory allocation of 4096 bytes failed under $(ulimit -d) KiB\" >&2
echo 'note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace' >&2
exit 134";
        let Err(e) = compile_by_script("capped", body, CompilerProcess::DEFAULT_TIMEOUT) else {
            panic!("a compiler out of memory must fail the compile")
        };
        assert_eq!(e.kind, crate::error::ErrorKind::Internal);
        assert_eq!(
            e.message,
            "compiling m.wasm failed in its compiler process (exit status: 134): memory allocation of 4096 bytes \
             failed under 32768 KiB (it may have run out of memory: --wasm-compile-memory-mib is 32 MiB)"
        );
    }

    #[test]
    fn a_cap_above_the_servers_own_hard_limit_becomes_that_limit_and_says_so() {
        let limit = DataLimit { asked: 4096 << 20, cap: 200 << 20, hard: 200 << 20 };
        assert_eq!(
            limit.describe(),
            "it may have run out of memory: its cap is 200 MiB, the server's own hard RLIMIT_DATA, below \
             --wasm-compile-memory-mib's 4096 MiB"
        );
        let here = DataLimit::under_this_process(u64::MAX);
        assert_eq!(here.cap, here.hard, "nothing asks above the hard limit");
    }

    #[test]
    fn a_compile_gets_twice_the_cores_over_those_running_up_to_sixteen_threads() {
        assert_eq!(compile_threads(2, 1), 4, "a lone compile gets twice the cores");
        assert_eq!(compile_threads(2, 2), 2);
        assert_eq!(compile_threads(2, 5), 1, "at least one thread");
        assert_eq!(compile_threads(64, 1), MAX_COMPILE_THREADS);
        assert_eq!(compile_threads(64, 64), 2, "the 64th compile running gets 2 threads, not 64");
    }

    #[test]
    fn the_compiler_process_is_told_how_many_threads_to_compile_on() {
        let Err(e) =
            compile_by_script("threads", "echo \"$RAYON_NUM_THREADS\" >&2\nexit 3", CompilerProcess::DEFAULT_TIMEOUT)
        else {
            panic!("the stand-in fails")
        };
        let threads = e.message.rsplit(": ").next().and_then(|n| n.parse::<usize>().ok());
        assert!(threads.is_some_and(|n| (1..=MAX_COMPILE_THREADS).contains(&n)), "{}", e.message);
    }

    #[test]
    fn a_compiler_process_given_an_invalid_component_says_why_as_the_server_would() {
        let body = format!("echo 'bad magic' >&2\nexit {INVALID_COMPONENT}");
        let Err(e) = compile_by_script("invalid", &body, CompilerProcess::DEFAULT_TIMEOUT) else {
            panic!("an invalid component must fail")
        };
        assert_eq!(e.kind, crate::error::ErrorKind::InvalidArg);
        assert_eq!(e.message, "m.wasm is not a valid WebAssembly component: bad magic");
    }

    #[test]
    fn a_compile_that_takes_too_long_is_stopped_and_fails_its_load() {
        let started = std::time::Instant::now();
        // `exec`: the sleep is the compiler process itself, so stopping it closes its pipes.
        let Err(e) = compile_by_script("slow", "exec sleep 60", Duration::from_millis(100)) else {
            panic!("a compile past its time limit must fail")
        };
        assert!(started.elapsed() < Duration::from_secs(30), "the compiler was stopped, not waited for");
        assert_eq!(e.kind, crate::error::ErrorKind::Internal);
        assert_eq!(
            e.message,
            "compiling m.wasm took longer than 100ms (--wasm-compile-timeout-secs): the compiler process was stopped"
        );
    }
}
