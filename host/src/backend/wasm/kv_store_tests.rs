use super::*;
use crate::backend::wasm::test_support::TempDir;

fn tenant(name: &str) -> SpaceKey {
    Some(Arc::from(name))
}

#[test]
fn spaces_are_apart_and_writes_past_the_quota_change_nothing() {
    let stores = KeyValueStores::default();
    let store = stores.open("m", 200, None).expect("open");
    store.set(&tenant("a"), "cache", "k".into(), b"from a".to_vec()).expect("set");
    assert_eq!(store.get(&tenant("a"), "cache", "k").as_deref(), Some(&b"from a"[..]));
    assert_eq!(store.get(&tenant("b"), "cache", "k"), None, "tenant b sees none of a's keys");
    assert_eq!(store.get(&None, "cache", "k"), None);
    assert!(!store.exists(&tenant("b"), "cache", "k"));

    let e = store.set(&tenant("a"), "cache", "big".into(), vec![0; 200]).expect_err("past the quota");
    assert!(e.0.contains("past its quota of 200"), "{}", e.0);
    assert_eq!(store.get(&tenant("a"), "cache", "big"), None);
    // b has a quota of its own.
    store.set(&tenant("b"), "cache", "big".into(), vec![0; 100]).expect("b's own quota");
    // Overwriting frees the old value's bytes; deleting frees the key's and the empty bucket's.
    for _ in 0..10 {
        store.set(&tenant("a"), "cache", "k".into(), vec![1; 90]).expect("overwrite");
    }
    store.delete(&tenant("a"), "cache", "k");
    store.set(&tenant("a"), "other", "k2".into(), vec![2; 120]).expect("room again");
}

#[test]
fn increments_decimal_values_and_lists_keys_in_pages() {
    let stores = KeyValueStores::default();
    let store = stores.open("m", 1 << 20, None).expect("open");
    assert_eq!(store.increment(&None, "b", "n".into(), 1), Ok(1));
    assert_eq!(store.increment(&None, "b", "n".into(), 41), Ok(42));
    assert_eq!(store.get(&None, "b", "n").as_deref(), Some(&b"42"[..]));
    store.set(&None, "b", "text".into(), b"abc".to_vec()).expect("set");
    assert!(store.increment(&None, "b", "text".into(), 1).is_err());
    store.set(&None, "b", "max".into(), u64::MAX.to_string().into_bytes()).expect("set");
    assert!(store.increment(&None, "b", "max".into(), 1).expect_err("overflow").0.contains("overflows"));

    let (keys, next) = store.list(&None, "b", 0, 2);
    assert_eq!(keys, ["max", "n"]);
    assert_eq!(next, Some(2));
    let (keys, next) = store.list(&None, "b", 2, 2);
    assert_eq!((keys, next), (vec!["text".to_string()], None));
    assert_eq!(store.list(&None, "absent", 0, 2), (Vec::new(), None));
}

#[test]
fn instances_share_a_store_until_the_last_goes() {
    let stores = KeyValueStores::default();
    let first = stores.open("m", 100, None).expect("open");
    first.set(&None, "b", "k".into(), b"v".to_vec()).expect("set");
    let second = stores.open("m", 100, None).expect("open");
    assert_eq!(second.get(&None, "b", "k").as_deref(), Some(&b"v"[..]));
    assert!(stores.open("other", 100, None).expect("open").get(&None, "b", "k").is_none(), "per model");
    drop((first, second));
    assert!(stores.open("m", 100, None).expect("open").get(&None, "b", "k").is_none(), "in memory only");
}

#[test]
fn persists_across_opens_and_refuses_another_models_file() {
    let tmp = TempDir::new("kv-persist");
    let stores = KeyValueStores::default();
    let store = stores.open("m", 1 << 20, Some(&tmp.0)).expect("open");
    store.set(&tenant("a"), "b", "k".into(), b"kept".to_vec()).expect("set");
    store.increment(&None, "c", "n".into(), 7).expect("increment");
    drop(store);
    let store = stores.open("m", 1 << 20, Some(&tmp.0)).expect("reopen");
    assert_eq!(store.get(&tenant("a"), "b", "k").as_deref(), Some(&b"kept"[..]));
    assert_eq!(store.get(&None, "c", "n").as_deref(), Some(&b"7"[..]));
    assert_eq!(store.get(&None, "b", "k"), None, "still apart");
    drop(store);

    let files: Vec<_> = std::fs::read_dir(&tmp.0).expect("dir").filter_map(Result::ok).collect();
    assert_eq!(files.len(), 1, "one file per model, named by a hash");
    let path = files[0].path();
    let name = path.file_name().and_then(|n| n.to_str()).expect("name");
    assert!(name.ends_with(".tkv") && name.len() == 68, "{name}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&path).expect("metadata").permissions().mode();
    assert_eq!(mode & 0o077, 0, "only the server's user may read tenants' data");
    // Another model's file under this model's name, and a damaged one, are refused.
    std::fs::copy(&path, tmp.0.join(format!("{}.tkv", hex(&Sha256::digest(b"other"))))).expect("copy");
    let e = stores.open("other", 100, Some(&tmp.0)).err().expect("another model's");
    assert!(e.contains("is not this model's key-value store"), "{e}");
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.truncate(bytes.len() - 2);
    std::fs::write(&path, bytes).expect("cut");
    assert!(stores.open("m", 100, Some(&tmp.0)).is_err(), "cut short");
}
