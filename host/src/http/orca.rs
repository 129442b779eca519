//! ORCA load reports (`endpoint-load-metrics`), as Triton 2.7x writes them on its generate
//! endpoint: a request that carries `endpoint-load-metrics-format: text` or `json` gets the
//! server's load in a response header, for load balancers that weigh endpoints by it (Envoy,
//! Gateway API inference extensions).
//!
//! Triton reports only TensorRT-LLM's KV-cache figures (`named_metrics.kv_cache_utilization`,
//! `named_metrics.max_token_capacity`) and writes no header without them. Tessera reports those
//! when a model publishes `nv_trt_llm_kv_cache_block_metrics`, and always ORCA's
//! `cpu_utilization` and `mem_utilization` (with `--allow-cpu-metrics`) and
//! `named_metrics.pending_requests`; on the infer endpoints too. Another format value gets no
//! header, as in Triton.

use axum::http::{HeaderMap, HeaderValue};

use crate::frontend::LoadReport;

pub const FORMAT_HEADER: &str = "endpoint-load-metrics-format";
pub const REPORT_HEADER: &str = "endpoint-load-metrics";

/// The header value for `format` (`text` or `json`), or `None` for another format.
pub fn header(format: &str, report: &LoadReport) -> Option<String> {
    let mut top: Vec<(&str, f64)> = Vec::new();
    if let Some(cpu) = report.cpu_utilization {
        top.push(("cpu_utilization", cpu));
    }
    if let Some(mem) = report.mem_utilization {
        top.push(("mem_utilization", mem));
    }
    let mut named: Vec<(&str, f64)> = vec![("pending_requests", report.pending_requests as f64)];
    if let Some((utilization, capacity)) = report.kv_cache {
        named.push(("kv_cache_utilization", utilization));
        named.push(("max_token_capacity", capacity.floor()));
    }
    match format {
        "text" => {
            let fields = top
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .chain(named.iter().map(|(k, v)| format!("named_metrics.{k}={v}")));
            Some(format!("TEXT {}", fields.collect::<Vec<_>>().join(", ")))
        }
        "json" => {
            let mut object = serde_json::Map::new();
            for (k, v) in &top {
                object.insert((*k).to_string(), serde_json::json!(v));
            }
            let named: serde_json::Map<String, serde_json::Value> =
                named.iter().map(|(k, v)| ((*k).to_string(), serde_json::json!(v))).collect();
            object.insert("named_metrics".into(), serde_json::Value::Object(named));
            Some(format!("JSON {}", serde_json::Value::Object(object)))
        }
        _ => None,
    }
}

/// Adds the report to `response` when `request` asks for one.
pub fn add(request: &HeaderMap, response: &mut HeaderMap, report: impl FnOnce() -> LoadReport) {
    let Some(format) = request.get(FORMAT_HEADER).and_then(|v| v.to_str().ok()) else { return };
    match header(format, &report()).and_then(|text| HeaderValue::from_str(&text).ok()) {
        Some(value) => {
            response.insert(REPORT_HEADER, value);
        }
        None => tracing::debug!("{FORMAT_HEADER}: '{format}' is not text or json; no load report"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_follow_orcas_spelling() {
        let report = LoadReport {
            cpu_utilization: Some(0.25),
            mem_utilization: Some(0.5),
            pending_requests: 3,
            kv_cache: Some((0.75, 4096.0)),
        };
        assert_eq!(
            header("text", &report).unwrap(),
            "TEXT cpu_utilization=0.25, mem_utilization=0.5, named_metrics.pending_requests=3, \
             named_metrics.kv_cache_utilization=0.75, named_metrics.max_token_capacity=4096"
        );
        let json = header("json", &report).unwrap();
        let value: serde_json::Value = serde_json::from_str(json.strip_prefix("JSON ").unwrap()).unwrap();
        assert_eq!(value["cpu_utilization"], 0.25);
        assert_eq!(value["named_metrics"]["max_token_capacity"], 4096.0);
        assert_eq!(header("yaml", &report), None);
        let bare = LoadReport::default();
        assert_eq!(header("text", &bare).unwrap(), "TEXT named_metrics.pending_requests=0");
    }
}
