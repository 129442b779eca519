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

#[test]
fn a_changed_module_or_requirements_file_changes_the_build_key() {
    let dir = TempDir::new("hash");
    std::fs::write(dir.0.join("model.py"), "x = 1\n").expect("write");
    let first = source_hash(&dir.0, "builder").expect("hash");
    assert_eq!(first, source_hash(&dir.0, "builder").expect("hash"), "the same sources, the same key");
    assert_ne!(first, source_hash(&dir.0, "other builder").expect("hash"), "another builder rebuilds");
    std::fs::write(dir.0.join("model.wasm"), "not read").expect("write");
    assert_eq!(first, source_hash(&dir.0, "builder").expect("hash"), "only what a build reads counts");
    std::fs::write(dir.0.join("requirements.txt"), "attrs\n").expect("write");
    let with_requirements = source_hash(&dir.0, "builder").expect("hash");
    assert_ne!(first, with_requirements);
    std::fs::write(dir.0.join("helper.py"), "y = 2\n").expect("write");
    assert_ne!(with_requirements, source_hash(&dir.0, "builder").expect("hash"));
}

#[test]
fn a_failed_build_reports_what_the_builder_printed() {
    let dir = TempDir::new("fail");
    let builder =
        script(&dir.0, "echo 'build-python-guest: requirements.txt: pandas has no pure-Python wheel' >&2; exit 1");
    let err = run_builder(&builder, &dir.0, &dir.0.join("out.wasm"), Duration::from_secs(60)).expect_err("fails");
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
    let err = run_builder(&builder, &dir.0, &dir.0.join("out.wasm"), Duration::from_secs(1)).expect_err("times out");
    assert!(err.contains("longer than 1s (--python-guest-build-timeout-secs)"), "{err}");
    assert!(err.contains("started"), "what it printed comes with the reason: {err}");
    assert!(started.elapsed() < Duration::from_secs(20), "the builder's output closed with its group");
}

#[test]
fn a_build_that_writes_nothing_fails() {
    let dir = TempDir::new("nothing");
    let builder = script(&dir.0, "exit 0");
    let err = run_builder(&builder, &dir.0, &dir.0.join("out.wasm"), Duration::from_secs(60)).expect_err("fails");
    assert!(err.contains("exited with"), "{err}");
}

#[test]
fn a_model_py_without_a_builder_names_the_flag() {
    let dir = TempDir::new("nobuilder");
    let options = PythonOptions { builder: None, cache_dir: Some(dir.0.join("cache")), ..PythonOptions::default() };
    let guests = PythonGuests::new(&options);
    std::fs::write(dir.0.join("model.py"), "").expect("write");
    let err = guests.component(&dir.0.join("model.py")).expect_err("no builder");
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
    let served = PythonGuests::new(&without).component(&model.join("model.py")).expect("prebuilt");
    assert_eq!(served, model.join("model.wasm"));
    let builder = script(&dir.0, "printf 'built' > \"$2\"");
    let with =
        PythonOptions { builder: Some(builder), cache_dir: Some(dir.0.join("cache")), ..PythonOptions::default() };
    let built = PythonGuests::new(&with).component(&model.join("model.py")).expect("built");
    assert_eq!(std::fs::read_to_string(built).expect("read"), "built", "the source wins where it can be built");
}

#[test]
fn a_build_is_cached_by_content() {
    let dir = TempDir::new("cache");
    let count = dir.0.join("count");
    let builder = script(&dir.0, &format!("echo x >> {}; printf 'built' > \"$2\"", count.display()));
    let options =
        PythonOptions { builder: Some(builder), cache_dir: Some(dir.0.join("cache")), ..PythonOptions::default() };
    let backend = PythonGuests::new(&options);
    let model = dir.0.join("1");
    std::fs::create_dir_all(&model).expect("mkdir");
    std::fs::write(model.join("model.py"), "a = 1\n").expect("write");
    let first = backend.component(&model.join("model.py")).expect("built");
    assert_eq!(std::fs::read_to_string(&first).expect("read"), "built");
    let again = backend.component(&model.join("model.py")).expect("cached");
    assert_eq!(first, again);
    assert_eq!(std::fs::read_to_string(&count).expect("count").lines().count(), 1, "built once");
    std::fs::write(model.join("model.py"), "a = 2\n").expect("write");
    assert_ne!(backend.component(&model.join("model.py")).expect("rebuilt"), first);
    assert_eq!(std::fs::read_to_string(&count).expect("count").lines().count(), 2, "a changed model.py rebuilds");
}
