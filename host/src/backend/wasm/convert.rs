//! Conversions between the core types and their WIT counterparts. The enums match one to one;
//! parameters lose only the unsigned variant, which the contract does not have.

use super::wit;
use crate::error::{CoreError, ErrorKind};
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
}
