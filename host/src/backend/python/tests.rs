use std::time::Duration;

use super::*;

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!("tessera-python-test-{what}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A stand-in builder: a bash script, written whole before it runs.
fn script(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("builder.sh");
    std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).expect("write builder");
    path
}

#[test]
fn the_server_list_is_narrowed_by_the_models_own() {
    assert_eq!(narrow("*", "a,b"), "a,b");
    assert_eq!(narrow("a, b", "*"), "a,b");
    assert_eq!(narrow("a,b,c", "c , a"), "a,c");
    assert_eq!(narrow("a,b", "x"), "", "a model cannot widen the server's list");
}

fn key(dir: &Path, builder: &str) -> String {
    Sources::read(dir, &dir.join("model.py")).expect("sources").key(builder)
}

/// Runs a stand-in builder as the server runs its builder: confined, writing `out` in `dir`.
fn run(builder: &Path, dir: &Path, timeout: Duration, builds: &Builds) -> Result<(), BuildError> {
    let mut confinement = toolchain(builder);
    confinement.write.push(dir.to_path_buf());
    let run = Run {
        builder,
        phase: "build",
        source: &dir.join("model.py"),
        out: &dir.join("out.wasm"),
        build_dir: dir,
        cache_root: None,
        confinement: Some(&confinement),
        timeout,
        model: "m",
        model_files: &[],
    };
    run.run(builds)
}

fn failed(result: Result<(), BuildError>) -> String {
    match result {
        Err(BuildError::Failed(why)) => why,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_changed_module_or_requirements_file_changes_the_build_key() {
    let dir = TempDir::new("hash");
    std::fs::write(dir.0.join("model.py"), "x = 1\n").expect("write");
    let first = key(&dir.0, "builder");
    assert_eq!(first, key(&dir.0, "builder"), "the same sources, the same key");
    assert_ne!(first, key(&dir.0, "other builder"), "another builder rebuilds");
    std::fs::write(dir.0.join("model.wasm"), "not read").expect("write");
    assert_eq!(first, key(&dir.0, "builder"), "only what a build reads counts");
    std::fs::write(dir.0.join("requirements.txt"), "attrs\n").expect("write");
    let with_requirements = key(&dir.0, "builder");
    assert_ne!(first, with_requirements);
    std::fs::write(dir.0.join("helper.py"), "y = 2\n").expect("write");
    let with_helper = key(&dir.0, "builder");
    assert_ne!(with_requirements, with_helper);
    std::fs::create_dir_all(dir.0.join("pkg")).expect("mkdir");
    std::fs::write(dir.0.join("pkg/__init__.py"), "z = 3\n").expect("write");
    assert_ne!(with_helper, key(&dir.0, "builder"), "a subpackage is an input too");
}

#[test]
fn a_link_in_the_version_directory_is_not_an_input() {
    let dir = TempDir::new("link");
    let outside = TempDir::new("outside");
    std::fs::write(outside.0.join("secret.py"), "token = 'x'\n").expect("write");
    std::fs::write(dir.0.join("model.py"), "x = 1\n").expect("write");
    std::os::unix::fs::symlink(outside.0.join("secret.py"), dir.0.join("secret.py")).expect("link");
    std::os::unix::fs::symlink(&outside.0, dir.0.join("pkg")).expect("link");
    let sources = Sources::read(&dir.0, &dir.0.join("model.py")).expect("sources");
    let names: Vec<_> = sources.files.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(names, vec![PathBuf::from("model.py")], "links are neither read nor followed");
    std::os::unix::fs::symlink(outside.0.join("secret.py"), dir.0.join("entry.py")).expect("link");
    let err = Sources::read(&dir.0, &dir.0.join("entry.py")).err().expect("a linked model file is refused");
    assert!(err.message.contains("not a regular file"), "{}", err.message);
}

#[test]
fn a_failed_build_reports_what_the_builder_printed() {
    let dir = TempDir::new("fail");
    let builder =
        script(&dir.0, "echo 'build-python-guest: requirements.txt: pandas has no pure-Python wheel' >&2; exit 1");
    let err = failed(run(&builder, &dir.0, Duration::from_secs(60), &Builds::default()));
    assert!(err.contains("pandas has no pure-Python wheel"), "{err}");
    assert!(!dir.0.join("out.wasm").exists());
}

#[test]
fn a_build_past_its_time_limit_is_stopped_with_its_children() {
    let dir = TempDir::new("slow");
    let marker = dir.0.join("still-running");
    // the child sleeps in the background: killing only bash would leave it behind
    let builder = script(&dir.0, &format!("(sleep 30; touch {}) & echo started >&2; wait", marker.display()));
    let started = std::time::Instant::now();
    let err = failed(run(&builder, &dir.0, Duration::from_secs(1), &Builds::default()));
    assert!(err.contains("longer than 1s (--python-guest-build-timeout-secs)"), "{err}");
    assert!(err.contains("started"), "what it printed comes with the reason: {err}");
    assert!(started.elapsed() < Duration::from_secs(20), "the builder's output closed with its group");
}

#[test]
fn a_build_is_cancelled_by_its_model_and_by_the_stop() {
    let dir = TempDir::new("cancel");
    let builder = script(&dir.0, "(sleep 60) & echo started >&2; wait");
    let builds = Builds::default();
    std::thread::scope(|scope| {
        let running = scope.spawn(|| run(&builder, &dir.0, Duration::from_secs(120), &builds));
        // Cancelling another model's builds leaves this one running; the stop ends it.
        while builds.running_count() == 0 {
            std::thread::yield_now();
        }
        builds.cancel(Some("another"));
        assert!(!running.is_finished());
        let started = std::time::Instant::now();
        builds.cancel(Some("m"));
        assert!(matches!(running.join().expect("join"), Err(BuildError::Cancelled)));
        assert!(started.elapsed() < Duration::from_secs(20));
    });
    builds.cancel(None);
    assert!(matches!(run(&builder, &dir.0, Duration::from_secs(120), &builds), Err(BuildError::Cancelled)));
}

#[test]
fn the_builder_writes_only_its_build_directory_and_reaches_no_port() {
    let abi = confine::landlock_abi();
    if abi < 1 {
        eprintln!("skipped: this kernel has no Landlock");
        return;
    }
    let dir = TempDir::new("confined");
    let tools = TempDir::new("tools");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let report = dir.0.join("report");
    let builder = script(
        &tools.0,
        &format!(
            "r={report}\n\
             touch {tools}/written 2>/dev/null && echo tools-writable >> $r\n\
             touch /tmp/tessera-confined-$$ 2>/dev/null && echo tmp-writable >> $r\n\
             cat /etc/shadow >/dev/null 2>&1 && echo shadow-readable >> $r\n\
             (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo port-reachable >> $r\n\
             echo done >> $r; printf built > \"$2\"",
            report = report.display(),
            tools = tools.0.display(),
        ),
    );
    run(&builder, &dir.0, Duration::from_secs(60), &Builds::default()).expect("the build runs");
    let mut reported = std::fs::read_to_string(&report).expect("report");
    // Network rules need Landlock ABI 4 (Linux 6.7); the file rules hold from ABI 1.
    if abi < 4 {
        reported = reported.replace("port-reachable\n", "");
    }
    assert_eq!(reported, "done\n", "it wrote its report and nothing else");
    assert!(!tools.0.join("written").exists());
}

#[test]
fn a_model_py_without_a_builder_names_the_flag() {
    let dir = TempDir::new("nobuilder");
    let options = PythonOptions { builder: None, cache_dir: Some(dir.0.join("cache")), ..PythonOptions::default() };
    let guests = PythonGuests::new(&options);
    std::fs::write(dir.0.join("model.py"), "").expect("write");
    let err = guests.component(&dir.0.join("model.py"), "m").expect_err("no builder");
    assert!(err.message.contains("--python-guest-builder"), "{}", err.message);
    assert!(err.message.contains("tessera guest build"), "{}", err.message);
}

#[test]
fn a_server_without_a_builder_serves_the_prebuilt_model_wasm_and_one_with_a_builder_builds() {
    let dir = TempDir::new("prebuilt");
    let model = dir.0.join("1");
    std::fs::create_dir_all(&model).expect("mkdir");
    std::fs::write(model.join("model.py"), "a = 1\n").expect("write");
    std::fs::write(model.join("model.wasm"), "prebuilt").expect("write");
    let without = PythonOptions { builder: None, cache_dir: Some(dir.0.join("cache")), ..PythonOptions::default() };
    let served = PythonGuests::new(&without).component(&model.join("model.py"), "m").expect("prebuilt");
    assert_eq!(served, model.join("model.wasm"));
    let builder = script(&dir.0, "printf 'built' > \"$2\"");
    let with =
        PythonOptions { builder: Some(builder), cache_dir: Some(dir.0.join("cache")), ..PythonOptions::default() };
    let built = PythonGuests::new(&with).component(&model.join("model.py"), "m").expect("built");
    assert_eq!(std::fs::read_to_string(built).expect("read"), "built", "the source wins where it can be built");
}

#[test]
fn a_build_is_cached_by_content() {
    let dir = TempDir::new("cache");
    // each build writes something of its own (its process id and the time)
    let builder = script(&dir.0, "printf \"built $$ $(date +%s%N)\" > \"$2\"");
    let options =
        PythonOptions { builder: Some(builder), cache_dir: Some(dir.0.join("cache")), ..PythonOptions::default() };
    let backend = PythonGuests::new(&options);
    let model = dir.0.join("1");
    std::fs::create_dir_all(&model).expect("mkdir");
    std::fs::write(model.join("model.py"), "a = 1\n").expect("write");
    let first = backend.component(&model.join("model.py"), "m").expect("built");
    let built = std::fs::read_to_string(&first).expect("read");
    assert!(built.starts_with("built"), "{built}");
    let again = backend.component(&model.join("model.py"), "m").expect("cached");
    assert_eq!(first, again);
    assert_eq!(std::fs::read_to_string(&again).expect("read"), built, "built once");
    std::fs::write(model.join("model.py"), "a = 2\n").expect("write");
    let rebuilt = backend.component(&model.join("model.py"), "m").expect("rebuilt");
    assert_ne!(rebuilt, first);
    assert_ne!(std::fs::read_to_string(&rebuilt).expect("read"), built, "a changed model.py rebuilds");
}

#[test]
fn the_build_cache_keeps_to_its_cap_least_recently_used_first() {
    let dir = TempDir::new("cap");
    let builder = script(&dir.0, "head -c 1000 /dev/zero > \"$2\"");
    let cache = dir.0.join("cache");
    let options = PythonOptions {
        builder: Some(builder),
        cache_dir: Some(cache.clone()),
        cache_max_bytes: 3500,
        ..PythonOptions::default()
    };
    let guests = PythonGuests::new(&options);
    let mut built = Vec::new();
    for i in 0..4 {
        let model = dir.0.join(format!("m{i}"));
        std::fs::create_dir_all(&model).expect("mkdir");
        std::fs::write(model.join("model.py"), format!("a = {i}\n")).expect("write");
        built.push(guests.component(&model.join("model.py"), "m").expect("built"));
        if i == 2 {
            // the first is used again: the second is now the least recently used
            guests.component(&dir.0.join("m0/model.py"), "m").expect("cached");
        }
    }
    let kept: Vec<bool> = built.iter().map(|p| p.exists()).collect();
    assert_eq!(kept, vec![true, false, true, true], "three fit; the least recently used went");
    let metrics = crate::backend::disk_cache::render();
    let evictions: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tessera_disk_cache_evictions_total{cache=\"python_guests\"} "))
        .and_then(|v| v.parse().ok())
        .expect("the evictions counter");
    assert!(evictions >= 1, "{metrics}");
}

#[test]
fn only_the_componentize_py_pin_of_the_test_requirements_keys_the_builds() {
    let root = std::env::temp_dir().join(format!("tessera-builder-hash-{}", std::process::id()));
    std::fs::create_dir_all(root.join("scripts")).expect("scripts");
    std::fs::create_dir_all(root.join("tests")).expect("tests");
    let script = root.join("scripts/build-python-guest.sh");
    std::fs::write(&script, "echo build").expect("script");
    let requirements = root.join("tests/requirements.txt");
    std::fs::write(&requirements, "componentize-py==0.25.1\npytest==9.2.0\n").expect("write");
    let first = builder_hash(&script);
    std::fs::write(&requirements, "componentize-py==0.25.1\npytest==9.2.0\nopenai==3.51.0\n").expect("write");
    assert_eq!(builder_hash(&script), first, "pinning a test client builds no guest again");
    std::fs::write(&requirements, "componentize-py==0.26.0\npytest==9.2.0\nopenai==3.51.0\n").expect("write");
    assert_ne!(builder_hash(&script), first, "another componentize-py builds every guest again");
    let _ = std::fs::remove_dir_all(&root);
}
