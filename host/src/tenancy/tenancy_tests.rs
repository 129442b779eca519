use super::*;

fn sha(key: &str) -> String {
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

fn file(extra_a: &str) -> String {
    format!(
        r#"
        [[tenant]]
        name = "a"
        models = ["m*"]
        {extra_a}
        keys = [{{ id = "a-key", sha256 = "{}" }}]
        certificates = [{{ cn = "client-a" }}]

        [[tenant]]
        name = "b"
        roles = ["infer", "statistics"]
        keys = [{{ id = "b-key", sha256 = "{}" }}]
        "#,
        sha("key-a"),
        sha("key-b")
    )
}

fn tenants(text: &str) -> (Arc<Tenants>, PathBuf) {
    let dir = std::env::temp_dir().join(format!("tessera-tenancy-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tenants.toml");
    write(&path, text);
    (Tenants::load(&path).unwrap(), path)
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::AtomicU64;
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn key(k: &str) -> Presented<'static> {
    Presented {
        authorization: Some(Box::leak(format!("Bearer {k}").into_boxed_str()).as_bytes()),
        ..Default::default()
    }
}

#[test]
fn keys_and_certificates_name_tenants_and_nothing_else_does() {
    let (t, _) = tenants(&file(""));
    let a = t.identify(key("key-a")).unwrap();
    assert_eq!((a.name(), a.key_id.as_deref()), ("a", Some("a-key")));
    assert_eq!(
        t.identify(Presented { authorization: Some(b"bearer   key-b"), ..Default::default() }).unwrap().name(),
        "b"
    );
    let names = CertNames { common_names: vec!["client-a".into()], alt_names: vec![] };
    let by_cert = t.identify(Presented { certificate: Some(&names), ..Default::default() }).unwrap();
    assert_eq!((by_cert.name(), by_cert.key_id.as_deref()), ("a", None));
    let cases: [(&[u8], AuthError); 5] = [
        (b"Bearer nope", AuthError::UnknownKey),
        (b"Basic a2V5LWE=", AuthError::Malformed),
        (b"Bearer", AuthError::Malformed),
        (b"Bearer key a", AuthError::Malformed),
        (b"Bearer \xff\xfe", AuthError::Malformed),
    ];
    for (raw, expected) in cases {
        let got = t.identify(Presented { authorization: Some(raw), ..Default::default() }).unwrap_err();
        assert_eq!(got, expected, "{raw:?}");
        assert!(!got.message().contains("key-a") && !got.message().contains("a-key"));
    }
    assert_eq!(t.identify(Presented::default()).unwrap_err(), AuthError::Missing);
    // A wrong key is refused even with a good certificate.
    let wrong = Presented { authorization: Some(b"Bearer x"), certificate: Some(&names), peer: None };
    assert_eq!(t.identify(wrong).unwrap_err(), AuthError::UnknownKey);
}

#[test]
fn roles_and_models_decide_what_a_tenant_may_do() {
    let (t, _) = tenants(&file(""));
    let (a, b) = (t.identify(key("key-a")).unwrap(), t.identify(key("key-b")).unwrap());
    assert!(a.may_use(ApiCategory::Inference).is_ok() && a.may_use(ApiCategory::Health).is_ok());
    let denied = a.may_use(ApiCategory::Statistics).unwrap_err();
    assert_eq!(denied.0, "tenant 'a' may not use the statistics API (it needs role 'statistics')");
    assert!(b.may_use(ApiCategory::Statistics).is_ok());
    assert!(a.may_load_files().is_err() && b.may_use(ApiCategory::ModelRepository).is_err());
    assert!(a.tenant.principal.may_call("m1") && !a.tenant.principal.may_call("x"));
    // No `models`: no model at all.
    assert!(!b.tenant.principal.may_call("m1"));
}

#[test]
fn admission_applies_the_cap_and_the_rate() {
    let (t, _) = tenants(&file("max_in_flight = 2\nrate = 0.001\nburst = 3"));
    let a = t.identify(key("key-a")).unwrap();
    let first = a.admit().unwrap();
    let _second = a.admit().unwrap();
    let busy = a.admit().unwrap_err();
    assert!(busy.message.contains("maximum of 2 requests in flight"), "{}", busy.message);
    drop(first);
    // Room again, and the third token of the burst.
    let _third = a.admit().unwrap();
    drop(_third);
    let busy = a.admit().unwrap_err();
    assert!(busy.message.contains("over its rate of 0.001 requests per second"), "{}", busy.message);
    assert!(busy.retry_after > Duration::from_secs(100));
    let metrics = t.render_metrics();
    assert!(metrics.contains("tessera_tenant_requests_total{tenant=\"a\"} 3"), "{metrics}");
    assert!(metrics.contains("tessera_tenant_refusals_total{tenant=\"a\",reason=\"in_flight\"} 1"), "{metrics}");
    assert!(metrics.contains("tessera_tenant_refusals_total{tenant=\"a\",reason=\"rate\"} 1"), "{metrics}");
    assert!(metrics.contains("tessera_tenant_in_flight{tenant=\"a\"} 1"), "{metrics}");
}

#[test]
fn a_reload_applies_a_good_file_and_keeps_the_last_good_one_otherwise() {
    let (t, path) = tenants(&file("max_in_flight = 1"));
    let held = t.identify(key("key-a")).unwrap().admit().unwrap();
    // key-a revoked; the in-flight count carries over to the new version of tenant a.
    write(&path, &file("max_in_flight = 1").replace(&sha("key-a"), &sha("key-a2")));
    t.reload().unwrap();
    assert_eq!(t.identify(key("key-a")).unwrap_err(), AuthError::UnknownKey);
    let a2 = t.identify(key("key-a2")).unwrap();
    assert!(a2.admit().is_err(), "the request admitted before the reload still counts");
    drop(held);
    assert!(a2.admit().is_ok());
    write(&path, "[[tenant]\nbroken");
    assert!(t.reload().unwrap_err().contains("TOML parse error"));
    assert!(t.identify(key("key-a2")).is_ok());
    assert!(t.render_metrics().contains("tessera_tenants_reloads_total{result=\"error\"} 1"));
}

#[test]
fn failures_from_one_address_are_throttled_and_valid_keys_are_not() {
    let (t, _) = tenants(&file(""));
    let peer = Some("10.0.0.9".parse().unwrap());
    let bad = Presented { authorization: Some(b"Bearer guess"), certificate: None, peer };
    let throttled = (0..200).filter(|_| matches!(t.identify(bad), Err(AuthError::Throttled(_)))).count();
    assert!(throttled >= 140, "{throttled}");
    let good = Presented { authorization: Some(b"Bearer key-a"), certificate: None, peer };
    assert!(t.identify(good).is_ok());
    let other = Presented { peer: Some("10.0.0.10".parse().unwrap()), ..bad };
    assert_eq!(t.identify(other).unwrap_err(), AuthError::UnknownKey);
}

#[test]
fn retry_after_is_whole_seconds_rounded_up() {
    assert_eq!(retry_after_secs(Duration::ZERO), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
    assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
}
