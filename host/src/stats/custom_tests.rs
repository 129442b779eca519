use super::*;

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn registry(series_per_model: usize) -> Arc<CustomMetrics> {
    CustomMetrics::new(CustomLimits { series_per_model, ..CustomLimits::default() })
}

#[test]
fn series_carry_the_models_labels_and_render_as_prometheus_text() {
    let registry = registry(10);
    let name = "requests_process_latency_ns";
    let family = registry.family("custom_metrics", name, "Cumulative time", MetricKind::Counter).unwrap();
    let others = registry.family("other", name, "Another description", MetricKind::Counter).unwrap();
    // Triton's example labels itself with its own name and version: accepted.
    let own = registry.series(&family, 1, labels(&[("model", "custom_metrics"), ("version", "1")]), None);
    let series = own.unwrap();
    series.increment(5.0).unwrap();
    series.increment(2.5).unwrap();
    assert_eq!(series.value().unwrap(), 7.5);
    let other = registry.series(&others, 3, labels(&[("b", "2"), ("a", "x\"y")]), None).unwrap();
    other.increment(1.0).unwrap();
    assert_eq!(
        registry.render(),
        "# HELP requests_process_latency_ns Cumulative time\n\
         # TYPE requests_process_latency_ns counter\n\
         requests_process_latency_ns{model=\"custom_metrics\",version=\"1\"} 7.5\n\
         requests_process_latency_ns{model=\"other\",version=\"3\",a=\"x\\\"y\",b=\"2\"} 1\n"
    );
    // The same labels give the same series.
    let again = registry.series(&others, 3, labels(&[("a", "x\"y"), ("b", "2")]), None).unwrap();
    assert!(Arc::ptr_eq(&again, &other));
}

#[test]
fn a_model_cannot_write_as_another_nor_take_the_servers_names() {
    let registry = registry(10);
    let family = registry.family("mine", "x", "", MetricKind::Gauge).unwrap();
    let e = registry.series(&family, 1, labels(&[("model", "theirs")]), None).unwrap_err();
    assert_eq!(
        e,
        "Error when creating Metric: label 'model' is set by the server to the model's own ('mine'), not 'theirs'"
    );
    let e = registry.series(&family, 1, labels(&[("version", "2")]), None).unwrap_err();
    assert!(e.contains("label 'version' is set by the server"), "{e}");
    for name in ["nv_inference_count", "tessera_model_traps_total"] {
        let e = registry.family("mine", name, "", MetricKind::Counter).unwrap_err();
        assert!(e.contains("are the server's"), "{e}");
    }
    assert!(registry.family("mine", "1abc", "", MetricKind::Counter).unwrap_err().contains("not a valid metric name"));
    let e = registry.series(&family, 1, labels(&[("__x", "1")]), None).unwrap_err();
    assert!(e.contains("'__x' is not a valid label name"), "{e}");
    let e = registry.series(&family, 1, labels(&[("a", "1"), ("a", "2")]), None).unwrap_err();
    assert!(e.contains("label 'a' is given twice"), "{e}");
}

#[test]
fn kinds_refuse_what_triton_refuses_with_its_messages() {
    let registry = registry(10);
    let counter = registry.family("m", "c", "", MetricKind::Counter).unwrap();
    let gauge = registry.family("m", "g", "", MetricKind::Gauge).unwrap();
    let histogram = registry.family("m", "h", "", MetricKind::Histogram).unwrap();
    let c = registry.series(&counter, 1, vec![], None).unwrap();
    let g = registry.series(&gauge, 1, vec![], None).unwrap();
    assert_eq!(
        c.increment(-1.0).unwrap_err(),
        "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically \
         by non-negative values."
    );
    assert_eq!(
        c.set(1.0).unwrap_err(),
        "Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set"
    );
    assert_eq!(
        g.observe(1.0).unwrap_err(),
        "Failed to observe metric value: TRITONSERVER_METRIC_KIND_GAUGE does not support Observe"
    );
    g.set(4.0).unwrap();
    g.increment(-1.5).unwrap();
    assert_eq!(g.value().unwrap(), 2.5);
    assert_eq!(
        registry.series(&histogram, 1, vec![], None).unwrap_err(),
        "Failed to create metric. Missing required buckets."
    );
    assert_eq!(
        registry.series(&counter, 1, vec![], Some(vec![1.0])).unwrap_err(),
        "Failed to create metric. Unexpected buckets found."
    );
    let h = registry.series(&histogram, 1, vec![], Some(vec![1.0, 10.0])).unwrap();
    h.observe(3.0).unwrap();
    assert_eq!(
        h.value().unwrap_err(),
        "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"
    );
    assert_eq!(
        h.increment(1.0).unwrap_err(),
        "Failed to increment metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"
    );
    assert!(registry.render().contains("h_bucket{model=\"m\",version=\"1\",le=\"10\"} 1\n"));
    // The same name with another kind is refused while the first family lives.
    let e = registry.family("m", "c", "", MetricKind::Gauge).unwrap_err();
    assert!(e.contains("already exists with kind TRITONSERVER_METRIC_KIND_COUNTER"), "{e}");
    let e = registry.family("another", "c", "", MetricKind::Gauge).unwrap_err();
    assert!(e.contains("already exists with kind TRITONSERVER_METRIC_KIND_COUNTER"), "{e}");
}

#[test]
fn the_series_cap_refuses_and_counts_and_dropped_series_leave() {
    let registry = registry(2);
    let family = registry.family("greedy", "f", "", MetricKind::Gauge).unwrap();
    let modest = registry.family("modest", "f", "", MetricKind::Gauge).unwrap();
    let a = registry.series(&family, 1, labels(&[("i", "1")]), None).unwrap();
    let _b = registry.series(&family, 1, labels(&[("i", "2")]), None).unwrap();
    let e = registry.series(&family, 1, labels(&[("i", "3")]), None).unwrap_err();
    assert_eq!(
        e,
        "Error when creating Metric: model 'greedy' already has 2 metric series \
         (--metrics-config custom_series_per_model)"
    );
    // Another model is not affected by the greedy one's cap.
    let _c = registry.series(&modest, 1, labels(&[("i", "1")]), None).unwrap();
    assert!(registry.render().contains("tessera_custom_metric_refused_total{model=\"greedy\",reason=\"series\"} 1\n"));
    // A series whose handles are all gone leaves /metrics and frees its place.
    assert!(registry.render().contains("f{model=\"greedy\",version=\"1\",i=\"1\"} 0\n"));
    drop(a);
    assert!(!registry.render().contains("f{model=\"greedy\",version=\"1\",i=\"1\"}"));
    registry.series(&family, 1, labels(&[("i", "3")]), None).unwrap();
    // Once every handle of a family is gone, its name may come back with another kind.
    drop((family, modest, _b, _c));
    assert!(registry.family("greedy", "f", "", MetricKind::Counter).is_ok());
}
