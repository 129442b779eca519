//! Triton's `ModelConfig`: parsing config.pbtxt (protobuf text format, by prost-reflect), JSON in and out
//! (the `/config` endpoint and the load endpoint's `config` override), validation and normalisation.
//!
//! The schema is Triton's own `model_config.proto` (host/proto), so any real config.pbtxt parses; fields
//! Tessera does not implement yet are accepted and logged once as ignored.

mod validate;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{LazyLock, Mutex};

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};

pub use validate::{check_file_name, check_file_names, normalize, validate};

/// Types generated from Triton's model_config.proto (package `inference`).
pub use crate::proto::inference as pb;

pub use pb::ModelConfig;

use crate::tensor::DataType;

static DESCRIPTORS: LazyLock<DescriptorPool> = LazyLock::new(|| {
    #[allow(clippy::expect_used)]
    DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/model_config_descriptor.bin"))[..])
        .expect("the descriptor set embedded at build time decodes")
});

fn model_config_descriptor() -> MessageDescriptor {
    #[allow(clippy::expect_used)]
    DESCRIPTORS.get_message_by_name("inference.ModelConfig").expect("inference.ModelConfig is in the embedded schema")
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}:{line}:{column}: {message}")]
    Syntax { path: String, line: usize, column: usize, message: String },
    #[error("invalid model configuration JSON: {0}")]
    Json(String),
    #[error("{0}")]
    Invalid(String),
}

/// Parses config.pbtxt text. `path` only labels error messages.
pub fn parse_pbtxt(text: &str, path: &Path) -> Result<ModelConfig, ConfigError> {
    let (prepared, inserted) = insert_list_colons(text);
    let message = DynamicMessage::parse_text_format(model_config_descriptor(), &prepared).map_err(|err| {
        let offset = error_offset(&err).map(|o| o - inserted.iter().filter(|&&i| i < o).count()).unwrap_or(0);
        let (line, column) = line_column(text, offset);
        ConfigError::Syntax { path: path.display().to_string(), line, column, message: err.to_string() }
    })?;
    log_ignored_fields(&message);
    message.transcode_to::<ModelConfig>().map_err(|e| ConfigError::Invalid(e.to_string()))
}

/// Parses a ModelConfig from protobuf JSON (accepts proto field names and lowerCamelCase).
pub fn parse_json(text: &str) -> Result<ModelConfig, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let message = DynamicMessage::deserialize(model_config_descriptor(), &mut de)
        .and_then(|m| de.end().map(|()| m))
        .map_err(|e| ConfigError::Json(e.to_string()))?;
    log_ignored_fields(&message);
    message.transcode_to::<ModelConfig>().map_err(|e| ConfigError::Invalid(e.to_string()))
}

/// The config as Triton's `/v2/models/{m}/config` prints it: proto field names, default values
/// included, enums by name, 64-bit integers as JSON numbers.
pub fn to_json(config: &ModelConfig) -> serde_json::Value {
    let mut message = DynamicMessage::new(model_config_descriptor());
    if message.transcode_from(config).is_err() {
        // Cannot happen: the generated type and the descriptor come from the same .proto.
        return serde_json::Value::Null;
    }
    let options =
        SerializeOptions::new().use_proto_field_name(true).skip_default_fields(false).stringify_64_bit_integers(false);
    message.serialize_with_options(serde_json::value::Serializer, &options).unwrap_or(serde_json::Value::Null)
}

/// What a configured input and output have in common, so checks and auto-complete are written once.
pub trait TensorConfig {
    fn new(name: String, data_type: pb::DataType, dims: Vec<i64>) -> Self;
    fn name(&self) -> &str;
    fn data_type(&self) -> i32;
    fn dims(&self) -> &[i64];
    fn reshape(&self) -> Option<&pb::ModelTensorReshape>;
    /// Fills a missing datatype and missing dims (auto-complete).
    fn complete(&mut self, data_type: pb::DataType, dims: Vec<i64>);
}

macro_rules! tensor_config {
    ($ty:ty) => {
        impl TensorConfig for $ty {
            fn new(name: String, data_type: pb::DataType, dims: Vec<i64>) -> Self {
                Self { name, data_type: data_type as i32, dims, ..Default::default() }
            }
            fn name(&self) -> &str {
                &self.name
            }
            fn data_type(&self) -> i32 {
                self.data_type
            }
            fn dims(&self) -> &[i64] {
                &self.dims
            }
            fn reshape(&self) -> Option<&pb::ModelTensorReshape> {
                self.reshape.as_ref()
            }
            fn complete(&mut self, data_type: pb::DataType, dims: Vec<i64>) {
                if self.data_type == pb::DataType::TypeInvalid as i32 {
                    self.data_type = data_type as i32;
                }
                if self.dims.is_empty() && self.reshape.is_none() {
                    self.dims = dims;
                }
            }
        }
    };
}
tensor_config!(pb::ModelInput);
tensor_config!(pb::ModelOutput);

/// An input or output as the config declares it.
#[derive(Debug, Clone)]
pub struct IoSpec {
    pub name: String,
    pub datatype: DataType,
    /// Dims without the batch dimension, as written in the config.
    pub dims: Vec<i64>,
    /// The shape the model itself uses, when the config reshapes.
    pub reshape: Option<Vec<i64>>,
    pub optional: bool,
}

impl IoSpec {
    pub fn from_config(tensor: &impl TensorConfig, optional: bool) -> crate::error::CoreResult<Self> {
        Ok(Self {
            name: tensor.name().to_string(),
            datatype: config_datatype(tensor.name(), tensor.data_type())?,
            dims: tensor.dims().to_vec(),
            reshape: tensor.reshape().map(|r| r.shape.clone()),
            optional,
        })
    }
}

/// A config datatype as a tensor datatype, or the error naming the tensor.
pub fn config_datatype(name: &str, value: i32) -> crate::error::CoreResult<DataType> {
    datatype_from_config(value)
        .ok_or_else(|| crate::error::CoreError::invalid_arg(format!("tensor '{name}' has no valid data_type")))
}

/// Maps Triton's config enum (`TYPE_FP32`) to the protocol datatype (`FP32`).
pub fn datatype_from_config(value: i32) -> Option<DataType> {
    use pb::DataType as C;
    Some(match C::try_from(value).ok()? {
        C::TypeBool => DataType::Bool,
        C::TypeUint8 => DataType::Uint8,
        C::TypeUint16 => DataType::Uint16,
        C::TypeUint32 => DataType::Uint32,
        C::TypeUint64 => DataType::Uint64,
        C::TypeInt8 => DataType::Int8,
        C::TypeInt16 => DataType::Int16,
        C::TypeInt32 => DataType::Int32,
        C::TypeInt64 => DataType::Int64,
        C::TypeFp16 => DataType::Fp16,
        C::TypeBf16 => DataType::Bf16,
        C::TypeFp32 => DataType::Fp32,
        C::TypeFp64 => DataType::Fp64,
        C::TypeString => DataType::Bytes,
        C::TypeInvalid => return None,
    })
}

pub fn datatype_to_config(datatype: DataType) -> pb::DataType {
    use pb::DataType as C;
    match datatype {
        DataType::Bool => C::TypeBool,
        DataType::Uint8 => C::TypeUint8,
        DataType::Uint16 => C::TypeUint16,
        DataType::Uint32 => C::TypeUint32,
        DataType::Uint64 => C::TypeUint64,
        DataType::Int8 => C::TypeInt8,
        DataType::Int16 => C::TypeInt16,
        DataType::Int32 => C::TypeInt32,
        DataType::Int64 => C::TypeInt64,
        DataType::Fp16 => C::TypeFp16,
        DataType::Bf16 => C::TypeBf16,
        DataType::Fp32 => C::TypeFp32,
        DataType::Fp64 => C::TypeFp64,
        DataType::Bytes => C::TypeString,
    }
}

/// A config `parameters` entry that must be a positive integer (sandbox limits, quotas): `None`
/// when it is absent, else its value, or a message that names the key and the value.
pub fn positive_parameter(config: &ModelConfig, key: &str) -> Result<Option<u64>, String> {
    let Some(p) = config.parameters.get(key) else { return Ok(None) };
    let v = p.string_value.trim();
    v.parse::<u64>()
        .ok()
        .filter(|n| *n > 0)
        .map(Some)
        .ok_or_else(|| format!("parameter '{key}' must be a positive integer, got '{v}'"))
}

/// Top-level fields Tessera reads today; any other field that is set is logged once as ignored.
const IMPLEMENTED_FIELDS: &[&str] = &[
    "name",
    "platform",
    "backend",
    "runtime",
    "version_policy",
    "max_batch_size",
    "input",
    "output",
    "instance_group",
    "default_model_filename",
    "parameters",
    "model_transaction_policy",
    "dynamic_batching",
    "response_cache",
    "model_warmup",
    "sequence_batching",
    "ensemble_scheduling",
];

fn log_ignored_fields(message: &DynamicMessage) {
    static LOGGED: LazyLock<Mutex<HashSet<String>>> = LazyLock::new(Default::default);
    for (field, _) in message.fields() {
        let name = field.name();
        if IMPLEMENTED_FIELDS.contains(&name) {
            continue;
        }
        let first_time = LOGGED.lock().map(|mut set| set.insert(name.to_string())).unwrap_or(false);
        if first_time {
            tracing::warn!(field = name, "model config field is not implemented yet and is ignored");
        }
    }
}

fn error_offset(err: &prost_reflect::text_format::ParseError) -> Option<usize> {
    use miette::Diagnostic;
    err.labels()?.map(|label| label.offset()).min()
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Triton configs write message lists as `input [ { .. }, { .. } ]` without a colon. That is legal
/// text format (C++ protobuf accepts it) but prost-reflect requires `input: [`. Insert the colon
/// wherever `[` directly follows a field name, skipping strings and comments. Returns the new text
/// and the byte offsets (in the new text) of inserted characters, to map error positions back.
fn insert_list_colons(text: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(text.len() + 16);
    let mut inserted = Vec::new();
    // Whether the last significant token was an identifier (a candidate field name).
    let mut after_ident = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '#' => {
                out.push(c);
                for c in chars.by_ref() {
                    out.push(c);
                    if c == '\n' {
                        break;
                    }
                }
            }
            '"' | '\'' => {
                out.push(c);
                let mut escaped = false;
                for s in chars.by_ref() {
                    out.push(s);
                    if escaped {
                        escaped = false;
                    } else if s == '\\' {
                        escaped = true;
                    } else if s == c || s == '\n' {
                        break;
                    }
                }
                after_ident = false;
            }
            '[' => {
                if after_ident {
                    inserted.push(out.len());
                    out.push(':');
                }
                out.push(c);
                after_ident = false;
            }
            c if c.is_whitespace() => out.push(c),
            c if c.is_alphanumeric() || c == '_' => {
                out.push(c);
                while let Some(&n) = chars.peek() {
                    if n.is_alphanumeric() || n == '_' || n == '.' || n == '-' || n == '+' {
                        out.push(n);
                        chars.next();
                    } else {
                        break;
                    }
                }
                after_ident = c.is_alphabetic() || c == '_';
            }
            _ => {
                out.push(c);
                after_ident = false;
            }
        }
    }
    (out, inserted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ModelConfig, ConfigError> {
        parse_pbtxt(text, Path::new("m/config.pbtxt"))
    }

    #[test]
    fn parses_real_world_styles() {
        let text = r#"
# a comment with [ brackets ] and "quotes
name: "simple"   # trailing comment
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  {
    name: "INPUT1"
    data_type: TYPE_INT32
    dims: [16]
  }
]
output {
  name: "OUTPUT0"
  data_type: TYPE_FP32
  dims: [3,224,224]
  label_filename: "labels.txt"
}
output { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] reshape { shape: [ ] } }
instance_group [ { count: 2, kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters [ { key: "x[y]" value { string_value: "a [b] #c" } } ]
version_policy: { latest { num_versions: 2 } }
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
"#;
        let cfg = parse(text).expect("parses");
        assert_eq!(cfg.name, "simple");
        assert_eq!(cfg.max_batch_size, 8);
        assert_eq!(cfg.input.len(), 2);
        assert_eq!(cfg.input[1].dims, vec![16]);
        assert_eq!(cfg.output.len(), 2);
        assert_eq!(cfg.output[0].dims, vec![3, 224, 224]);
        assert_eq!(cfg.output[0].label_filename, "labels.txt");
        assert_eq!(cfg.instance_group[0].count, 2);
        assert_eq!(cfg.parameters["x[y]"].string_value, "a [b] #c");
        assert_eq!(cfg.parameters["intra_op_thread_count"].string_value, "1");
        assert!(matches!(cfg.scheduling_choice, Some(pb::model_config::SchedulingChoice::DynamicBatching(_))));
        assert!(matches!(
            cfg.version_policy.and_then(|p| p.policy_choice),
            Some(pb::model_version_policy::PolicyChoice::Latest(l)) if l.num_versions == 2
        ));
    }

    #[test]
    fn syntax_errors_name_file_line_and_column() {
        let text = "name: \"a\"\ninput [\n  { name: \"x\" data_type: TYPE_FP32 dims: [ 1 }\n]\n";
        let err = parse(text).unwrap_err();
        let ConfigError::Syntax { path, line, column, .. } = &err else { panic!("{err:?}") };
        assert_eq!(path, "m/config.pbtxt");
        assert_eq!(*line, 3, "{err}");
        assert!(*column > 30, "{err}");
        assert!(err.to_string().starts_with("m/config.pbtxt:3:"), "{err}");
    }

    #[test]
    fn unknown_fields_and_bad_enums_are_errors() {
        let err = parse("name: \"a\"\nmax_batch_sise: 8\n").unwrap_err();
        assert!(err.to_string().contains("max_batch_sise"), "{err}");
        assert!(err.to_string().contains(":2:"), "{err}");
        let err = parse("input { data_type: TYPE_FLOAT99 }").unwrap_err();
        assert!(err.to_string().contains("TYPE_FLOAT99"), "{err}");
    }

    #[test]
    fn json_round_trip_prints_defaults_and_numbers() {
        let cfg =
            parse("name: \"a\" max_batch_size: 4 input { name: \"i\" data_type: TYPE_FP32 dims: [ -1, 3 ] }").unwrap();
        let json = to_json(&cfg);
        assert_eq!(json["name"], "a");
        assert_eq!(json["max_batch_size"], 4);
        assert_eq!(json["input"][0]["data_type"], "TYPE_FP32");
        assert_eq!(json["input"][0]["dims"], serde_json::json!([-1, 3]));
        assert_eq!(json["platform"], "");
        let back = parse_json(&json.to_string()).unwrap();
        assert_eq!(back, cfg);
        assert!(matches!(parse_json("{\"name\": 3}"), Err(ConfigError::Json(_))));
        assert!(matches!(parse_json("{\"name\": \"a\"} x"), Err(ConfigError::Json(_))));
    }

    #[test]
    fn datatype_mapping_is_total() {
        for d in DataType::ALL {
            assert_eq!(datatype_from_config(datatype_to_config(d) as i32), Some(d));
        }
        assert_eq!(datatype_from_config(0), None);
    }
}
