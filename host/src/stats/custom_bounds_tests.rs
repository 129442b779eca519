//! The byte and count bounds of `--metrics-config custom_*`.

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The lines of `render()` that belong to `model`'s families, with their HELP and TYPE lines.
fn models_part(text: &str, model: &str) -> usize {
    let mine = format!("model=\"{model}\"");
    let mut bytes = 0;
    let mut header = 0;
    for line in text.lines() {
        if line.starts_with("# ") {
            header += line.len() + 1;
        } else if line.contains(&mine) && !line.starts_with("tessera_") {
            bytes += line.len() + 1 + std::mem::take(&mut header);
        } else {
            header = 0;
        }
    }
    bytes
}

#[test]
fn each_bound_refuses_with_its_setting_named_and_counts_the_reason() {
    let limits = CustomLimits { buckets_per_histogram: 4, families_per_model: 3, ..CustomLimits::default() };
    let registry = CustomMetrics::new(limits);
    let long = "n".repeat(129);
    let e = registry.family("m", &long, "", MetricKind::Counter).unwrap_err();
    let shown = "n".repeat(64);
    assert_eq!(
        e,
        format!(
            "Error when creating MetricFamily: the name '{shown}...' (129 bytes) is longer than 128 bytes \
             (--metrics-config custom_name_bytes)"
        )
    );
    let e = registry.family("m", "d", &"x".repeat(4097), MetricKind::Counter).unwrap_err();
    assert!(
        e.ends_with("the description of 'd' is longer than 4096 bytes (--metrics-config custom_description_bytes)")
    );
    let family = registry.family("m", "f", "", MetricKind::Gauge).unwrap();
    let e = registry.series(&family, 1, labels(&[(&long, "v")]), None).unwrap_err();
    assert!(e.contains("the label name 'nnnn") && e.ends_with("(--metrics-config custom_name_bytes)"), "{e}");
    // A megabyte value is refused without being echoed.
    let e = registry.series(&family, 1, labels(&[("k", &"v".repeat(1 << 20))]), None).unwrap_err();
    assert_eq!(
        e,
        "Error when creating Metric: the value of label 'k' is longer than 1024 bytes \
         (--metrics-config custom_label_value_bytes)"
    );
    registry.series(&family, 1, labels(&[("k", &"v".repeat(1024))]), None).unwrap();
    let histogram = registry.family("m", "h", "", MetricKind::Histogram).unwrap();
    let e = registry.series(&histogram, 1, vec![], Some(vec![1.0, 2.0, 3.0, 4.0, 5.0])).unwrap_err();
    assert!(e.ends_with("5 buckets, more than 4 (--metrics-config custom_buckets_per_histogram)"), "{e}");
    registry.series(&histogram, 1, vec![], Some(vec![1.0, 2.0, 3.0, 4.0])).unwrap();
    // Three families held (f, h, and c below); a fourth is refused, the same one again is not.
    let _c = registry.family("m", "c", "", MetricKind::Counter).unwrap();
    let e = registry.family("m", "fourth", "", MetricKind::Counter).unwrap_err();
    assert!(e.ends_with("model 'm' already holds 3 metric families (--metrics-config custom_families_per_model)"));
    assert!(Arc::ptr_eq(&registry.family("m", "c", "", MetricKind::Counter).unwrap(), &_c));
    // Another model holds its own families.
    registry.family("other", "fourth", "", MetricKind::Counter).unwrap();
    for reason in
        [Refused::NameBytes, Refused::DescriptionBytes, Refused::LabelValueBytes, Refused::Buckets, Refused::Families]
    {
        let expected = if reason == Refused::NameBytes { 2 } else { 1 };
        assert_eq!(registry.refusals("m", reason), expected, "{reason:?}");
    }
    let text = registry.render();
    assert!(text.contains("tessera_custom_metric_refused_total{model=\"m\",reason=\"label_value_bytes\"} 1\n"));
    assert!(!text.contains(&"v".repeat(1025)));
}

#[test]
fn a_model_adds_at_most_its_bytes_to_metrics_and_gets_them_back_when_its_series_go() {
    let limits = CustomLimits { bytes_per_model: 64 << 10, ..CustomLimits::default() };
    let registry = CustomMetrics::new(limits);
    let family = registry.family("greedy", "wide", &"d".repeat(4096), MetricKind::Histogram).unwrap();
    let neighbour = registry.family("modest", "small", "", MetricKind::Gauge).unwrap();
    let kept = registry.series(&neighbour, 1, vec![], None).unwrap();
    let mut held = Vec::new();
    let refused = loop {
        let value = format!("{:04}{}", held.len(), "v".repeat(196));
        let buckets = (1..=8).map(|b| f64::from(b) * 1e-300).collect();
        match registry.series(&family, 1, labels(&[("i", &value)]), Some(buckets)) {
            Ok(series) => held.push(series),
            Err(e) => break e,
        }
        assert!(held.len() < 100, "never refused");
    };
    assert!(refused.ends_with(
        "model 'greedy' would add more than 65536 bytes to /metrics (--metrics-config custom_bytes_per_model)"
    ));
    assert_eq!(registry.refusals("greedy", Refused::ModelBytes), 1);
    // What the model's families and series take on /metrics stays within its bytes, however
    // large the values written.
    for (n, series) in held.iter().enumerate() {
        series.observe(-1.234_567_890_123_456_7e-300 * (n as f64 + 1.0)).unwrap();
    }
    let text = registry.render();
    let part = models_part(&text, "greedy");
    assert!(part <= 64 << 10 && part <= registry.model_bytes("greedy"), "{part} > {}", registry.model_bytes("greedy"));
    assert!(part > 48 << 10, "the accounting is close to what is written: {part}");
    // The neighbour was not refused.
    registry.series(&neighbour, 1, labels(&[("k", "v")]), None).unwrap();
    drop(held);
    let header = registry.model_bytes("greedy");
    assert!(header > 4096 && header < 4300, "only the family's HELP and TYPE lines are left: {header}");
    drop(family);
    assert_eq!(registry.model_bytes("greedy"), 0);
    drop(kept);
}

#[test]
fn values_and_bounds_are_written_in_at_most_the_width_charged() {
    let registry = CustomMetrics::new(CustomLimits::default());
    let gauge = registry.family("m", "g", "", MetricKind::Gauge).unwrap();
    let g = registry.series(&gauge, 1, vec![], None).unwrap();
    g.set(1e300).unwrap();
    let h = registry.family("m", "h", "", MetricKind::Histogram).unwrap();
    let h = registry.series(&h, 1, vec![], Some(vec![-1e-300, 0.5])).unwrap();
    h.observe(f64::INFINITY).unwrap();
    let text = registry.render();
    assert!(text.contains("g{model=\"m\",version=\"1\"} 1e300\n"), "{text}");
    assert!(text.contains("h_bucket{model=\"m\",version=\"1\",le=\"-1e-300\"} 0\n"), "{text}");
    assert!(text.contains("h_bucket{model=\"m\",version=\"1\",le=\"0.5\"} 0\n"), "{text}");
    assert!(text.contains("h_sum{model=\"m\",version=\"1\"} +Inf\n"), "{text}");
    for value in [f64::MIN_POSITIVE, -f64::MAX, -2.225_073_858_507_201_4e-308, 0.1 + 0.2, 123_456_789.123] {
        assert!(number(value).len() <= VALUE_WIDTH, "{}", number(value));
        assert_eq!(number(value).parse::<f64>().unwrap(), value);
    }
}
