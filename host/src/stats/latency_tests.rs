use super::*;
use crate::config::pb;

fn settings(entries: &[&str]) -> Result<MetricsSettings, String> {
    MetricsSettings::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>())
}

fn config_with_buckets(family: &str, buckets: Vec<f64>) -> ModelConfig {
    use pb::model_metrics::MetricControl;
    use pb::model_metrics::metric_control::{HistogramOptions, MetricIdentifier};
    ModelConfig {
        name: "m".into(),
        model_metrics: Some(pb::ModelMetrics {
            metric_control: vec![MetricControl {
                metric_identifier: Some(MetricIdentifier { family: family.into() }),
                metric_options: Some(MetricOptions::HistogramOptions(HistogramOptions { buckets })),
            }],
        }),
        ..Default::default()
    }
}

#[test]
fn settings_default_as_triton_and_parse_its_syntax() {
    let defaults = settings(&[]).unwrap();
    assert!(defaults.counter_latencies && !defaults.histogram_latencies && !defaults.summary_latencies);
    assert!(defaults.phase_histograms);
    assert_eq!(defaults.quantiles, DEFAULT_QUANTILES.to_vec());
    let s = settings(&[
        "counter_latencies=false",
        "histogram_latencies=true",
        "summary_latencies=true",
        "summary_quantiles=0.5:0.05,0.99:0.001",
        "summary_max_age=10",
        "some_future_setting=1",
    ])
    .unwrap();
    assert!(!s.counter_latencies && s.histogram_latencies && s.summary_latencies);
    assert_eq!(s.quantiles, vec![(0.5, 0.05), (0.99, 0.001)]);
    assert_eq!(s.summary_max_age, Duration::from_secs(10));
}

#[test]
fn bad_settings_are_refused_with_what_was_wrong() {
    let error = |entries: &[&str]| settings(entries).unwrap_err();
    assert_eq!(
        error(&["histogram_latencies"]),
        "--metrics-config option format is <setting>=<value>. Got histogram_latencies"
    );
    assert_eq!(error(&["a,b=c"]), "--metrics-config option format is <setting>=<value>. Got a,b=c");
    assert!(error(&["summary_latencies=yes"]).contains("expected true or false"));
    assert!(error(&["summary_quantiles=0.5"]).contains("'0.5' has no ':'"));
    assert!(error(&["summary_quantiles=1.5:0.1"]).contains("not two numbers in [0, 1]"));
    assert!(error(&["summary_max_age=-1"]).contains("positive number of seconds"));
    assert_eq!(
        error(&["custom_label_value_bytes=1k"]),
        "--metrics-config custom_label_value_bytes=1k: expected a whole number (0 or more)"
    );
}

#[test]
fn the_custom_metric_bounds_read_from_their_settings() {
    use super::super::custom::CustomLimits;
    assert_eq!(settings(&[]).unwrap().custom, CustomLimits::default());
    let entries = [
        "custom_series_per_model=1",
        "custom_families_per_model=2",
        "custom_name_bytes=3",
        "custom_label_value_bytes=4",
        "custom_description_bytes=5",
        "custom_buckets_per_histogram=6",
        "custom_bytes_per_model=7",
    ];
    let limits = settings(&entries).unwrap().custom;
    assert_eq!(
        limits,
        CustomLimits {
            series_per_model: 1,
            families_per_model: 2,
            name_bytes: 3,
            label_value_bytes: 4,
            description_bytes: 5,
            buckets_per_histogram: 6,
            bytes_per_model: 7,
        }
    );
}

#[test]
fn a_histogram_renders_cumulative_buckets_sum_and_count() {
    let mut h = Histogram::new(vec![1.0, 5.0]);
    for v in [0.5, 1.0, 3.0, 9.0] {
        h.observe(v);
    }
    let mut out = String::new();
    h.render(&mut out, "x", "model=\"m\",version=\"1\"");
    assert_eq!(
        out,
        "x_bucket{model=\"m\",version=\"1\",le=\"1\"} 2\n\
         x_bucket{model=\"m\",version=\"1\",le=\"5\"} 3\n\
         x_bucket{model=\"m\",version=\"1\",le=\"+Inf\"} 4\n\
         x_sum{model=\"m\",version=\"1\"} 13.5\n\
         x_count{model=\"m\",version=\"1\"} 4\n"
    );
}

#[test]
fn summary_quantiles_are_exact_and_forget_what_left_the_window() {
    let mut s = Summary::new(Duration::from_secs(5));
    let t0 = s.started;
    for v in 1..=100 {
        s.observe(f64::from(v), t0);
    }
    let quantiles = [(0.5, 0.05), (0.9, 0.01), (0.99, 0.001)];
    assert_eq!(s.quantiles(&quantiles, t0), vec![50.0, 90.0, 99.0]);
    // Six seconds on, every sample is older than the 5 s window: NaN, as prometheus-cpp reports.
    let later = t0 + Duration::from_secs(6);
    assert!(s.quantiles(&quantiles, later).iter().all(|q| q.is_nan()));
    s.observe(7.0, later);
    assert_eq!(s.quantiles(&quantiles, later), vec![7.0, 7.0, 7.0]);
    // The count and sum are cumulative, never windowed.
    assert_eq!((s.count, s.sum), (101, 5057.0));
}

#[test]
fn a_summary_beyond_its_reservoir_still_tracks_the_distribution() {
    let mut s = Summary::new(Duration::from_secs(60));
    let t0 = s.started;
    for v in 0..100_000 {
        s.observe(f64::from(v % 1000), t0);
    }
    let median = s.quantiles(&[(0.5, 0.05)], t0)[0];
    assert!((450.0..=550.0).contains(&median), "median of a uniform 0..1000 sampled as {median}");
}

#[test]
fn model_metrics_override_buckets_and_bad_buckets_fail_the_load() {
    let on = settings(&["histogram_latencies=true"]).unwrap();
    let config = config_with_buckets(FIRST_RESPONSE_FAMILY, vec![1.0, 2.0, 4.0, 8.0]);
    let latency = Latency::new(&on, &config, false).unwrap();
    assert_eq!(latency.first_response.unwrap().bounds(), vec![1.0, 2.0, 4.0, 8.0]);
    let phase = config_with_buckets(Phase::Queue.family(), vec![10.0, 20.0]);
    let latency = Latency::new(&on, &phase, false).unwrap();
    assert_eq!(latency.phases.unwrap()[Phase::Queue as usize].bounds(), vec![10.0, 20.0]);
    let unsorted = config_with_buckets(FIRST_RESPONSE_FAMILY, vec![4.0, 2.0]);
    let error = Latency::new(&on, &unsorted, false).unwrap_err();
    assert_eq!(
        error,
        "model_metrics: the buckets of 'nv_inference_first_response_histogram_ms' must be finite and increasing"
    );
    // Without histogram_latencies there is no first-response histogram to configure.
    let off = settings(&[]).unwrap();
    assert!(Latency::new(&off, &config, false).unwrap().first_response.is_none());
}

#[test]
fn summaries_follow_the_cache_as_triton_reports_them() {
    let on = settings(&["summary_latencies=true"]).unwrap();
    let config = ModelConfig { name: "m".into(), ..Default::default() };
    let reported = |cached| {
        let latency = Latency::new(&on, &config, cached).unwrap();
        latency.summaries.unwrap().iter().map(Option::is_some).collect::<Vec<_>>()
    };
    assert_eq!(reported(false), [true, true, true, true, true, false, false]);
    assert_eq!(reported(true), [false, true, true, true, true, true, true]);
}

#[test]
fn render_groups_each_family_once_across_models() {
    let on = settings(&["histogram_latencies=true", "summary_latencies=true", "summary_quantiles=0.5:0.05"]).unwrap();
    let config = ModelConfig { name: "m".into(), ..Default::default() };
    let a = crate::stats::ModelStats::new(Latency::new(&on, &config, false).unwrap(), 0);
    let b = crate::stats::ModelStats::new(Latency::new(&on, &config, false).unwrap(), 0);
    a.record_request(true, Duration::from_millis(150), 0, true);
    a.record_queue(Duration::from_micros(40));
    b.record_request(false, Duration::from_millis(3), 0, true);
    let text = render(&[(model_labels("a", 1), &a), (model_labels("b\"q", 2), &b)]);
    assert_eq!(text.matches("# TYPE nv_inference_first_response_histogram_ms histogram").count(), 1);
    assert!(text.contains("nv_inference_first_response_histogram_ms_bucket{model=\"a\",version=\"1\",le=\"500\"} 1"));
    // A failed request has no response: b's histogram is empty.
    assert!(text.contains("nv_inference_first_response_histogram_ms_count{model=\"b\\\"q\",version=\"2\"} 0"));
    assert!(text.contains("tessera_inference_queue_histogram_us_bucket{model=\"a\",version=\"1\",le=\"50\"} 1"));
    assert!(text.contains("nv_inference_request_summary_us{model=\"a\",version=\"1\",quantile=\"0.5\"} 150000"));
    assert!(text.contains("nv_inference_queue_summary_us{model=\"b\\\"q\",version=\"2\",quantile=\"0.5\"} NaN"));
    assert!(!text.contains("nv_cache_hit_summary_per_model"), "no model caches: no cache summary family");
}
