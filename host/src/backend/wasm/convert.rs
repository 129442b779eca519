//! Conversions between the core types and their WIT counterparts. The enums match one to one;
//! parameters lose only the unsigned variant, which the contract does not have.

use super::bindings::wit;
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::infer::{ParamValue, Parameters};
use crate::tensor::DataType;

pub(super) fn kind_from_wit(code: wit::ErrorCode) -> ErrorKind {
    match code {
        wit::ErrorCode::Unknown => ErrorKind::Unknown,
        wit::ErrorCode::Internal => ErrorKind::Internal,
        wit::ErrorCode::NotFound => ErrorKind::NotFound,
        wit::ErrorCode::InvalidArg => ErrorKind::InvalidArg,
        wit::ErrorCode::Unavailable => ErrorKind::Unavailable,
        wit::ErrorCode::Unsupported => ErrorKind::Unsupported,
        wit::ErrorCode::AlreadyExists => ErrorKind::AlreadyExists,
        wit::ErrorCode::Cancelled => ErrorKind::Cancelled,
    }
}

pub(super) fn wit_error(e: CoreError) -> wit::Error {
    let code = match e.kind {
        ErrorKind::Unknown => wit::ErrorCode::Unknown,
        ErrorKind::Internal => wit::ErrorCode::Internal,
        ErrorKind::NotFound => wit::ErrorCode::NotFound,
        ErrorKind::InvalidArg => wit::ErrorCode::InvalidArg,
        ErrorKind::Unavailable => wit::ErrorCode::Unavailable,
        ErrorKind::Unsupported => wit::ErrorCode::Unsupported,
        ErrorKind::AlreadyExists => wit::ErrorCode::AlreadyExists,
        ErrorKind::Cancelled => wit::ErrorCode::Cancelled,
    };
    wit::Error { code, message: e.message }
}

pub(super) fn datatype_to_wit(d: DataType) -> wit::DataType {
    match d {
        DataType::Bool => wit::DataType::Bool,
        DataType::Uint8 => wit::DataType::Uint8,
        DataType::Uint16 => wit::DataType::Uint16,
        DataType::Uint32 => wit::DataType::Uint32,
        DataType::Uint64 => wit::DataType::Uint64,
        DataType::Int8 => wit::DataType::Int8,
        DataType::Int16 => wit::DataType::Int16,
        DataType::Int32 => wit::DataType::Int32,
        DataType::Int64 => wit::DataType::Int64,
        DataType::Fp16 => wit::DataType::Fp16,
        DataType::Bf16 => wit::DataType::Bf16,
        DataType::Fp32 => wit::DataType::Fp32,
        DataType::Fp64 => wit::DataType::Fp64,
        DataType::Bytes => wit::DataType::Bytes,
    }
}

pub(super) fn datatype_from_wit(d: wit::DataType) -> DataType {
    match d {
        wit::DataType::Bool => DataType::Bool,
        wit::DataType::Uint8 => DataType::Uint8,
        wit::DataType::Uint16 => DataType::Uint16,
        wit::DataType::Uint32 => DataType::Uint32,
        wit::DataType::Uint64 => DataType::Uint64,
        wit::DataType::Int8 => DataType::Int8,
        wit::DataType::Int16 => DataType::Int16,
        wit::DataType::Int32 => DataType::Int32,
        wit::DataType::Int64 => DataType::Int64,
        wit::DataType::Fp16 => DataType::Fp16,
        wit::DataType::Bf16 => DataType::Bf16,
        wit::DataType::Fp32 => DataType::Fp32,
        wit::DataType::Fp64 => DataType::Fp64,
        wit::DataType::Bytes => DataType::Bytes,
    }
}

pub(super) fn params_to_wit(params: &Parameters) -> Vec<wit::Parameter> {
    params
        .iter()
        .map(|(key, value)| wit::Parameter {
            key: key.clone(),
            value: match value {
                ParamValue::Bool(b) => wit::ParamValue::Bool(*b),
                ParamValue::Int(i) => wit::ParamValue::Int(*i),
                ParamValue::Double(d) => wit::ParamValue::Double(*d),
                // The contract has no unsigned variant; a value above i64::MAX travels exactly as text.
                ParamValue::Uint(u) => wit::ParamValue::String(u.to_string()),
                ParamValue::String(s) => wit::ParamValue::String(s.clone()),
            },
        })
        .collect()
}

pub(super) fn params_from_wit(params: Vec<wit::Parameter>) -> Parameters {
    params
        .into_iter()
        .map(|p| {
            let value = match p.value {
                wit::ParamValue::Bool(b) => ParamValue::Bool(b),
                wit::ParamValue::Int(i) => ParamValue::Int(i),
                wit::ParamValue::Double(d) => ParamValue::Double(d),
                wit::ParamValue::String(s) => ParamValue::String(s),
            };
            (p.key, value)
        })
        .collect()
}

/// The most response parameters a guest gives one response, and the most bytes of a key and of a
/// string value: what the server buffers and encodes for every response stays bounded.
pub(super) const MAX_RESPONSE_PARAMETERS: usize = 64;
pub(super) const MAX_RESPONSE_PARAMETER_KEY: usize = 1 << 10;
pub(super) const MAX_RESPONSE_PARAMETER_VALUE: usize = 64 << 10;

/// A key as an error names it: at most 64 characters, escaped (a guest's text, echoed to a client).
fn shown_key(key: &str) -> String {
    let short: String = key.chars().take(64).collect();
    let more = if short.len() < key.len() { "..." } else { "" };
    format!("'{}{more}'", short.escape_debug())
}

/// A guest's response parameters (Triton's `InferenceResponse(parameters=...)`), checked: at most
/// [`MAX_RESPONSE_PARAMETERS`], keys and string values within their bounds, bool, int or string
/// values only (Triton's python backend takes no others), no key twice, and no key starting with
/// `triton_` (Triton's own, such as the `triton_final_response` of a gRPC stream).
pub(super) fn response_params_from_wit(params: Vec<wit::Parameter>) -> CoreResult<Parameters> {
    let refuse = |what: String| Err(CoreError::invalid_arg(format!("invalid response parameters: {what}")));
    if params.len() > MAX_RESPONSE_PARAMETERS {
        return refuse(format!("{} given, at most {MAX_RESPONSE_PARAMETERS} are allowed", params.len()));
    }
    let mut checked = Parameters::new();
    for wit::Parameter { key, value } in params {
        if key.len() > MAX_RESPONSE_PARAMETER_KEY {
            return refuse(format!("a key of {} bytes, at most {MAX_RESPONSE_PARAMETER_KEY} are allowed", key.len()));
        }
        if key.starts_with("triton_") {
            return refuse(format!("key {} starts with 'triton_', which Triton reserves", shown_key(&key)));
        }
        let value = match value {
            wit::ParamValue::Bool(b) => ParamValue::Bool(b),
            wit::ParamValue::Int(i) => ParamValue::Int(i),
            wit::ParamValue::String(s) if s.len() > MAX_RESPONSE_PARAMETER_VALUE => {
                return refuse(format!(
                    "the value of {} has {} bytes, at most {MAX_RESPONSE_PARAMETER_VALUE} are allowed",
                    shown_key(&key),
                    s.len()
                ));
            }
            wit::ParamValue::String(s) => ParamValue::String(s),
            wit::ParamValue::Double(_) => {
                return refuse(format!("the value of {} is a double; values are bool, int or string", shown_key(&key)));
            }
        };
        if checked.contains_key(&key) {
            return refuse(format!("key {} is given twice", shown_key(&key)));
        }
        checked.insert(key, value);
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: [ErrorKind; 8] = [
        ErrorKind::Unknown,
        ErrorKind::Internal,
        ErrorKind::NotFound,
        ErrorKind::InvalidArg,
        ErrorKind::Unavailable,
        ErrorKind::Unsupported,
        ErrorKind::AlreadyExists,
        ErrorKind::Cancelled,
    ];

    #[test]
    fn every_datatype_round_trips() {
        let mut seen = Vec::new();
        for d in DataType::ALL {
            let w = datatype_to_wit(d);
            assert_eq!(datatype_from_wit(w), d);
            assert!(!seen.contains(&w), "{d:?} maps to a WIT type another datatype maps to");
            seen.push(w);
        }
        // 14 distinct images of 14 types: every WIT type is covered, so the mapping is a bijection.
        assert_eq!(seen.len(), 14);
    }

    #[test]
    fn every_error_kind_round_trips_with_its_message() {
        let mut seen = Vec::new();
        for kind in KINDS {
            let w = wit_error(CoreError::new(kind, format!("{kind:?} happened")));
            assert_eq!(w.message, format!("{kind:?} happened"));
            assert_eq!(kind_from_wit(w.code), kind);
            assert!(!seen.contains(&w.code), "{kind:?} maps to a code another kind maps to");
            seen.push(w.code);
        }
        for code in seen {
            let kind = kind_from_wit(code);
            assert_eq!(wit_error(CoreError::new(kind, "")).code, code);
        }
    }

    #[test]
    fn parameters_round_trip() {
        let params = Parameters::from([
            ("b".to_string(), ParamValue::Bool(true)),
            ("i".to_string(), ParamValue::Int(i64::MIN)),
            ("d".to_string(), ParamValue::Double(0.25)),
            ("s".to_string(), ParamValue::String("text".into())),
            ("empty".to_string(), ParamValue::String(String::new())),
        ]);
        assert_eq!(params_from_wit(params_to_wit(&params)), params);
        assert!(params_to_wit(&Parameters::new()).is_empty());
    }

    #[test]
    fn unsigned_parameters_travel_as_text() {
        let big = u64::MAX - 1;
        assert!(big > i64::MAX as u64);
        let sent = params_to_wit(&Parameters::from([("corr".to_string(), ParamValue::Uint(big))]));
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].key, "corr");
        assert!(matches!(&sent[0].value, wit::ParamValue::String(s) if s == "18446744073709551614"));
        // Back in the core it stays text: the guest decides what the string means.
        assert_eq!(params_from_wit(sent).get("corr"), Some(&ParamValue::String(big.to_string())));
    }

    #[test]
    fn repeated_wit_keys_keep_the_last_value() {
        let sent = vec![
            wit::Parameter { key: "k".into(), value: wit::ParamValue::Int(1) },
            wit::Parameter { key: "k".into(), value: wit::ParamValue::Int(2) },
        ];
        assert_eq!(params_from_wit(sent), Parameters::from([("k".to_string(), ParamValue::Int(2))]));
    }

    fn param(key: &str, value: wit::ParamValue) -> wit::Parameter {
        wit::Parameter { key: key.into(), value }
    }

    #[test]
    fn response_parameters_within_bounds_pass() {
        let given = vec![
            param("flag", wit::ParamValue::Bool(true)),
            param("count", wit::ParamValue::Int(-3)),
            param(&"k".repeat(MAX_RESPONSE_PARAMETER_KEY), wit::ParamValue::String("v".repeat(64 << 10))),
        ];
        let checked = response_params_from_wit(given).expect("within bounds");
        assert_eq!(checked.get("flag"), Some(&ParamValue::Bool(true)));
        assert_eq!(checked.get("count"), Some(&ParamValue::Int(-3)));
        assert_eq!(checked.len(), 3);
        let most = (0..MAX_RESPONSE_PARAMETERS).map(|i| param(&format!("p{i}"), wit::ParamValue::Int(0))).collect();
        assert_eq!(response_params_from_wit(most).expect("64").len(), MAX_RESPONSE_PARAMETERS);
        assert!(response_params_from_wit(Vec::new()).expect("none").is_empty());
    }

    #[test]
    fn response_parameters_past_bounds_are_refused_with_a_clear_error() {
        let refused = |given: Vec<wit::Parameter>| {
            let e = response_params_from_wit(given).expect_err("refused");
            assert_eq!(e.kind, ErrorKind::InvalidArg);
            e.message
        };
        let many = (0..=MAX_RESPONSE_PARAMETERS).map(|i| param(&format!("p{i}"), wit::ParamValue::Int(0))).collect();
        assert!(refused(many).contains("65 given, at most 64"));
        let long_key = "k".repeat(MAX_RESPONSE_PARAMETER_KEY + 1);
        let message = refused(vec![param(&long_key, wit::ParamValue::Bool(true))]);
        assert!(message.contains("a key of 1025 bytes") && !message.contains(&long_key), "{message}");
        let long_value = wit::ParamValue::String("v".repeat(MAX_RESPONSE_PARAMETER_VALUE + 1));
        assert!(refused(vec![param("big", long_value)]).contains("the value of 'big' has 65537 bytes"));
        assert!(refused(vec![param("d", wit::ParamValue::Double(0.5))]).contains("bool, int or string"));
        let final_flag = refused(vec![param("triton_final_response", wit::ParamValue::Bool(true))]);
        assert!(final_flag.contains("'triton_final_response' starts with 'triton_'"), "{final_flag}");
        let twice = vec![param("k", wit::ParamValue::Int(1)), param("k", wit::ParamValue::Int(2))];
        assert!(refused(twice).contains("key 'k' is given twice"));
        // A key the error names is escaped and cut short.
        let odd = format!("triton_\n{}", "x".repeat(100));
        let message = refused(vec![param(&odd, wit::ParamValue::Int(1))]);
        assert!(message.contains("...'") && !message.contains(&odd), "{message}");
    }
}
