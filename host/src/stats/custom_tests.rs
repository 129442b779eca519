use super::*;

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn series_carry_the_models_labels_and_render_as_prometheus_text() {
    let registry = CustomMetrics::new(10);
    let family = registry.family("requests_process_latency_ns", "Cumulative time", MetricKind::Counter).unwrap();
    // Triton's example labels itself with its own name and version: accepted.
    let own =
        registry.series(&family, "custom_metrics", 1, labels(&[("model", "custom_metrics"), ("version", "1")]), None);
    let series = own.unwrap();
    series.increment(5.0).unwrap();
    series.increment(2.5).unwrap();
    assert_eq!(series.value().unwrap(), 7.5);
    let other = registry.series(&family, "other", 3, labels(&[("b", "2"), ("a", "x\"y")]), None).unwrap();
    other.increment(1.0).unwrap();
    assert_eq!(
        registry.render(),
        "# HELP requests_process_latency_ns Cumulative time\n\
         # TYPE requests_process_latency_ns counter\n\
         requests_process_latency_ns{model=\"custom_metrics\",version=\"1\"} 7.5\n\
         requests_process_latency_ns{model=\"other\",version=\"3\",a=\"x\\\"y\",b=\"2\"} 1\n"
    );
    // The same labels give the same series.
    let again = registry.series(&family, "other", 3, labels(&[("a", "x\"y"), ("b", "2")]), None).unwrap();
    assert!(Arc::ptr_eq(&again, &other));
}

#[test]
fn a_model_cannot_write_as_another_nor_take_the_servers_names() {
    let registry = CustomMetrics::new(10);
    let family = registry.family("x", "", MetricKind::Gauge).unwrap();
    let e = registry.series(&family, "mine", 1, labels(&[("model", "theirs")]), None).unwrap_err();
    assert_eq!(
        e,
        "Error when creating Metric: label 'model' is set by the server to the model's own ('mine'), not 'theirs'"
    );
    let e = registry.series(&family, "mine", 1, labels(&[("version", "2")]), None).unwrap_err();
    assert!(e.contains("label 'version' is set by the server"), "{e}");
    for name in ["nv_inference_count", "tessera_model_traps_total"] {
        let e = registry.family(name, "", MetricKind::Counter).unwrap_err();
        assert!(e.contains("are the server's"), "{e}");
    }
    assert!(registry.family("1abc", "", MetricKind::Counter).unwrap_err().contains("not a valid metric name"));
    let e = registry.series(&family, "mine", 1, labels(&[("__x", "1")]), None).unwrap_err();
    assert!(e.contains("'__x' is not a valid label name"), "{e}");
    let e = registry.series(&family, "mine", 1, labels(&[("a", "1"), ("a", "2")]), None).unwrap_err();
    assert!(e.contains("label 'a' is given twice"), "{e}");
}

#[test]
fn kinds_refuse_what_triton_refuses_with_its_messages() {
    let registry = CustomMetrics::new(10);
    let counter = registry.family("c", "", MetricKind::Counter).unwrap();
    let gauge = registry.family("g", "", MetricKind::Gauge).unwrap();
    let histogram = registry.family("h", "", MetricKind::Histogram).unwrap();
    let c = registry.series(&counter, "m", 1, vec![], None).unwrap();
    let g = registry.series(&gauge, "m", 1, vec![], None).unwrap();
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
        registry.series(&histogram, "m", 1, vec![], None).unwrap_err(),
        "Failed to create metric. Missing required buckets."
    );
    assert_eq!(
        registry.series(&counter, "m", 1, vec![], Some(vec![1.0])).unwrap_err(),
        "Failed to create metric. Unexpected buckets found."
    );
    let h = registry.series(&histogram, "m", 1, vec![], Some(vec![1.0, 10.0])).unwrap();
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
    let e = registry.family("c", "", MetricKind::Gauge).unwrap_err();
    assert!(e.contains("already exists with kind TRITONSERVER_METRIC_KIND_COUNTER"), "{e}");
}

#[test]
fn the_series_cap_refuses_and_counts_and_dropped_series_leave() {
    let registry = CustomMetrics::new(2);
    let family = registry.family("f", "", MetricKind::Gauge).unwrap();
    let a = registry.series(&family, "greedy", 1, labels(&[("i", "1")]), None).unwrap();
    let _b = registry.series(&family, "greedy", 1, labels(&[("i", "2")]), None).unwrap();
    let e = registry.series(&family, "greedy", 1, labels(&[("i", "3")]), None).unwrap_err();
    assert!(e.contains("model 'greedy' already has 2 metric series"), "{e}");
    // Another model is not affected by the greedy one's cap.
    let _c = registry.series(&family, "modest", 1, labels(&[("i", "1")]), None).unwrap();
    assert!(registry.render().contains("tessera_custom_metric_series_refused_total{model=\"greedy\"} 1\n"));
    // A series whose handles are all gone leaves /metrics and frees its place.
    assert!(registry.render().contains("f{model=\"greedy\",version=\"1\",i=\"1\"} 0\n"));
    drop(a);
    assert!(!registry.render().contains("f{model=\"greedy\",version=\"1\",i=\"1\"}"));
    registry.series(&family, "greedy", 1, labels(&[("i", "3")]), None).unwrap();
    // Once every handle of a family is gone, its name may come back with another kind.
    drop((family, _b, _c));
    assert!(registry.family("f", "", MetricKind::Counter).is_ok());
}
