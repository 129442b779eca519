//! Validation and normalisation of a ModelConfig, following Triton's `ValidateModelConfig` and
//! `NormalizeModelConfig` for the parts Tessera implements.

use std::collections::HashSet;

use super::pb::{self, model_instance_group::Kind, model_version_policy::PolicyChoice};
use super::{ConfigError, ModelConfig, TensorConfig, datatype_from_config};

/// Fills defaults the way Triton does before validation: one instance group when none is given
/// (KIND_AUTO), count 1 for groups that say 0, group names, every GPU for a KIND_GPU group that
/// lists none, KIND_AUTO as KIND_CPU on a machine without GPUs (with GPUs, the model's backend
/// decides at load: see `LoadedModel::load`), latest-1 version policy.
pub fn normalize(config: &mut ModelConfig) {
    normalize_for(config, &crate::gpu::device_ids());
}

/// [`normalize`] for a machine whose GPUs are `gpus`.
pub fn normalize_for(config: &mut ModelConfig, gpus: &[u32]) {
    // An ensemble has no instances of its own (Triton leaves its instance_group empty).
    if config.instance_group.is_empty() && config.platform != "ensemble" {
        config.instance_group.push(pb::ModelInstanceGroup { count: 1, kind: Kind::Auto as i32, ..Default::default() });
    }
    let model_name = config.name.clone();
    for (index, group) in config.instance_group.iter_mut().enumerate() {
        if group.name.is_empty() {
            group.name = format!("{model_name}_{index}");
        }
        if group.count == 0 {
            group.count = 1;
        }
        if group.kind == Kind::Auto as i32 && gpus.is_empty() {
            group.kind = Kind::Cpu as i32;
        }
        if group.kind == Kind::Gpu as i32 && group.gpus.is_empty() {
            group.gpus = gpus.iter().map(|&g| g as i32).collect();
        }
    }
    if config.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref()).is_none() {
        config.version_policy = Some(pb::ModelVersionPolicy {
            policy_choice: Some(PolicyChoice::Latest(pb::model_version_policy::Latest { num_versions: 1 })),
        });
    }
}

/// A file name from a config (or an upload): it must name a file inside the model's
/// directory, whatever is on disk. Checked on the text alone, before any file is opened, so
/// the answer is the same whether such a path exists or not, and the value is not echoed.
pub fn check_file_name(field: &str, name: &str) -> Result<(), String> {
    use std::path::{Component, Path};
    let inside = name.len() <= 1024
        && !name.contains(['\0', '\\'])
        && Path::new(name).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        && Path::new(name).components().any(|c| matches!(c, Component::Normal(_)));
    if inside {
        Ok(())
    } else {
        Err(format!(
            "invalid {field}: it must name a file inside the model's directory (a relative path of at most 1024 \
             bytes, without '..')"
        ))
    }
}

/// [`check_file_name`] on every config field that names a file: `default_model_filename`,
/// the outputs' `label_filename`, warmup `input_data_file` and sequence `initial_state`
/// `data_file`, for every backend.
pub fn check_file_names(config: &ModelConfig) -> Result<(), ConfigError> {
    use pb::model_sequence_batching::initial_state::StateData;
    use pb::model_warmup::input::InputDataType;
    let mut names: Vec<(&str, &str)> = Vec::new();
    if !config.default_model_filename.is_empty() {
        names.push(("default_model_filename", &config.default_model_filename));
    }
    for output in config.output.iter().filter(|o| !o.label_filename.is_empty()) {
        names.push(("label_filename", &output.label_filename));
    }
    for input in config.model_warmup.iter().flat_map(|w| w.inputs.values()) {
        if let Some(InputDataType::InputDataFile(file)) = &input.input_data_type {
            names.push(("model_warmup input_data_file", file));
        }
    }
    if let Some(pb::model_config::SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
        for init in sb.state.iter().flat_map(|s| &s.initial_state) {
            if let Some(StateData::DataFile(file)) = &init.state_data {
                names.push(("initial_state data_file", file));
            }
        }
    }
    names.into_iter().try_for_each(|(field, name)| check_file_name(field, name).map_err(ConfigError::Invalid))
}

/// Checks a normalised config. `dir_name` is the model's directory in the repository.
pub fn validate(config: &ModelConfig, dir_name: &str) -> Result<(), ConfigError> {
    validate_for(config, dir_name, &crate::gpu::device_ids())
}

/// [`validate`] for a machine whose GPUs are `gpus`.
pub fn validate_for(config: &ModelConfig, dir_name: &str, gpus: &[u32]) -> Result<(), ConfigError> {
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    check_file_names(config)?;
    if config.name != dir_name {
        return invalid(format!(
            "unexpected model name '{}' in config.pbtxt: it must match the model directory name '{dir_name}'",
            config.name
        ));
    }
    if config.max_batch_size < 0 {
        return invalid(format!("max_batch_size must be >= 0, got {}", config.max_batch_size));
    }
    let batching = config.max_batch_size > 0;
    let ensemble_scheduling =
        matches!(config.scheduling_choice, Some(pb::model_config::SchedulingChoice::EnsembleScheduling(_)));
    if config.platform == "ensemble" && !ensemble_scheduling {
        return invalid(format!(
            "ensemble scheduling must be set for ensemble {} whose platform is ensemble",
            config.name
        ));
    }
    if config.platform != "ensemble" && ensemble_scheduling {
        return invalid(format!(
            "ensemble scheduling cannot be set for model '{}' whose platform is not ensemble",
            config.name
        ));
    }

    let mut names = HashSet::new();
    for input in &config.input {
        if !names.insert(input.name.as_str()) {
            return invalid(format!("duplicate input name '{}' in model configuration", input.name));
        }
        check_io("input", input, batching)?;
    }
    let mut names = HashSet::new();
    for output in &config.output {
        if !names.insert(output.name.as_str()) {
            return invalid(format!("duplicate output name '{}' in model configuration", output.name));
        }
        check_io("output", output, batching)?;
    }

    for group in &config.instance_group {
        if group.count < 0 {
            return invalid(format!("instance group '{}' must specify count >= 1, got {}", group.name, group.count));
        }
        match Kind::try_from(group.kind) {
            Ok(Kind::Cpu | Kind::Auto) => {}
            Ok(Kind::Gpu) if gpus.is_empty() => {
                return invalid(format!(
                    "instance group '{}' of model '{}' specifies KIND_GPU but no GPU is available to this server",
                    group.name, config.name
                ));
            }
            Ok(Kind::Gpu) => {
                if let Some(bad) = group.gpus.iter().find(|&&g| u32::try_from(g).map_or(true, |g| !gpus.contains(&g))) {
                    let available: Vec<String> = gpus.iter().map(u32::to_string).collect();
                    return invalid(format!(
                        "instance group {} of model {} specifies invalid or unsupported gpu id {bad}. GPUs with at \
                        least the minimum required CUDA compute compatibility of 6.0 are: {}",
                        group.name,
                        config.name,
                        available.join(" ")
                    ));
                }
            }
            Ok(Kind::Model) => {}
            Err(_) => return invalid(format!("instance group '{}' has an unknown kind {}", group.name, group.kind)),
        }
    }

    match config.version_policy.as_ref().and_then(|p| p.policy_choice.as_ref()) {
        Some(PolicyChoice::Latest(latest)) if latest.num_versions < 1 => {
            return invalid(format!("version_policy latest must have num_versions >= 1, got {}", latest.num_versions));
        }
        Some(PolicyChoice::Specific(specific)) if specific.versions.is_empty() => {
            return invalid("version_policy specific must list at least one version".into());
        }
        _ => {}
    }
    Ok(())
}

fn check_io(role: &str, tensor: &impl TensorConfig, batching: bool) -> Result<(), ConfigError> {
    let (name, data_type, dims, reshape) = (tensor.name(), tensor.data_type(), tensor.dims(), tensor.reshape());
    let invalid = |m: String| Err(ConfigError::Invalid(m));
    if name.is_empty() {
        return invalid(format!("model {role} must specify 'name'"));
    }
    if datatype_from_config(data_type).is_none() {
        return invalid(format!("model {role} '{name}' must specify 'data_type'"));
    }
    if dims.is_empty() && reshape.is_none() && !batching {
        return invalid(format!("model {role} '{name}' must specify 'dims'"));
    }
    if let Some(bad) = dims.iter().find(|&&d| d == 0 || d < -1) {
        return invalid(format!(
            "model {role} '{name}' dimension {bad} is invalid: dims must be >= 1, or -1 for a variable-size dimension"
        ));
    }
    if let Some(reshape) = reshape {
        if let Some(bad) = reshape.shape.iter().find(|&&d| d == 0 || d < -1) {
            return invalid(format!("model {role} '{name}' reshape dimension {bad} is invalid"));
        }
        // Same number of variable dims, and the same element count over the fixed ones.
        let variable = |s: &[i64]| s.iter().filter(|&&d| d == -1).count();
        let fixed = |s: &[i64]| s.iter().filter(|&&d| d > 0).try_fold(1i64, |acc, &d| acc.checked_mul(d));
        let (dims_size, reshape_size) = (fixed(dims), fixed(&reshape.shape));
        if dims_size.is_none() || reshape_size.is_none() {
            return invalid(format!("model {role} '{name}' has dims or reshape too large to represent"));
        }
        if variable(dims) != variable(&reshape.shape) || dims_size != reshape_size {
            return invalid(format!(
                "model {role} '{name}' has different size for dims {dims:?} and reshape {:?}",
                reshape.shape
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::parse_pbtxt;

    /// Loads a config as on a machine without GPUs.
    fn load(text: &str) -> Result<ModelConfig, ConfigError> {
        load_with_gpus(text, &[])
    }

    fn load_with_gpus(text: &str, gpus: &[u32]) -> Result<ModelConfig, ConfigError> {
        let mut cfg = parse_pbtxt(text, Path::new("config.pbtxt"))?;
        normalize_for(&mut cfg, gpus);
        validate_for(&cfg, "m", gpus)?;
        Ok(cfg)
    }

    const IO: &str = concat!(
        r#"input [ { name: "i" data_type: TYPE_FP32 dims: [ 16 ] } ] "#,
        r#"output [ { name: "o" data_type: TYPE_FP32 dims: [ 16 ] } ]"#
    );

    #[test]
    fn normalisation_fills_triton_defaults() {
        let cfg = load(&format!("name: \"m\" {IO}")).unwrap();
        assert_eq!(cfg.instance_group.len(), 1);
        assert_eq!(cfg.instance_group[0].count, 1);
        assert_eq!(cfg.instance_group[0].name, "m_0");
        assert!(matches!(
            cfg.version_policy.unwrap().policy_choice,
            Some(PolicyChoice::Latest(l)) if l.num_versions == 1
        ));
    }

    #[test]
    fn file_names_stay_inside_the_model_directory_and_are_never_echoed() {
        for good in ["model.py", "./model.onnx", "sub/dir/model.pt", "a..b"] {
            assert_eq!(check_file_name("default_model_filename", good), Ok(()), "{good}");
        }
        let refused = check_file_name("default_model_filename", "../x").expect_err("refused");
        for bad in ["/etc/passwd", "../../etc/passwd", "a/../../b", "..", ".", "", "a\\..\\b", "m\0.py", "sub/.."] {
            let err = check_file_name("default_model_filename", bad).expect_err(bad);
            assert_eq!(err, refused, "one answer whatever the path: {bad}");
        }
        assert!(!refused.contains("../x"), "{refused}");
        let config = format!(
            r#"name: "m" default_model_filename: "model.onnx" {IO}
            model_warmup [ {{ name: "w" batch_size: 1 inputs {{ key: "x" value: {{ data_type: TYPE_FP32 dims: [ 1 ]
              input_data_file: "../../../etc/passwd" }} }} }} ]"#
        );
        let err = load(&config).unwrap_err().to_string();
        assert!(err.contains("invalid model_warmup input_data_file") && !err.contains("passwd"), "{err}");
    }

    #[test]
    fn rejects_name_mismatch() {
        let err = load(&format!("name: \"other\" {IO}")).unwrap_err().to_string();
        assert!(err.contains("'other'") && err.contains("'m'"), "{err}");
    }

    #[test]
    fn rejects_duplicates_bad_types_and_dims() {
        let dup = concat!(
            r#"name: "m" input [ { name: "i" data_type: TYPE_FP32 dims: [1] }, "#,
            r#"{ name: "i" data_type: TYPE_FP32 dims: [1] } ]"#
        );
        assert!(load(dup).unwrap_err().to_string().contains("duplicate input name 'i'"));
        let no_type = r#"name: "m" input [ { name: "i" dims: [1] } ]"#;
        assert!(load(no_type).unwrap_err().to_string().contains("'data_type'"));
        let zero = r#"name: "m" input [ { name: "i" data_type: TYPE_FP32 dims: [0] } ]"#;
        assert!(load(zero).unwrap_err().to_string().contains("dimension 0"));
        let no_dims = r#"name: "m" input [ { name: "i" data_type: TYPE_FP32 } ]"#;
        assert!(load(no_dims).unwrap_err().to_string().contains("'dims'"));
        let neg_batch = format!("name: \"m\" max_batch_size: -1 {IO}");
        assert!(load(&neg_batch).unwrap_err().to_string().contains("max_batch_size"));
    }

    #[test]
    fn checks_reshape_sizes() {
        let ok = r#"name: "m" input [ { name: "i" data_type: TYPE_FP32 dims: [4, 4] reshape { shape: [16] } } ]"#;
        assert!(load(ok).is_ok());
        let bad = r#"name: "m" input [ { name: "i" data_type: TYPE_FP32 dims: [4, 4] reshape { shape: [15] } } ]"#;
        assert!(load(bad).unwrap_err().to_string().contains("different size"));
        let var = r#"name: "m" input [ { name: "i" data_type: TYPE_FP32 dims: [-1, 4] reshape { shape: [4, -1] } } ]"#;
        assert!(load(var).is_ok());
    }

    #[test]
    fn rejects_gpu_groups_and_empty_policies() {
        let gpu = format!("name: \"m\" {IO} instance_group [ {{ kind: KIND_GPU }} ]");
        let err = load(&gpu).unwrap_err().to_string();
        assert!(err.contains("specifies KIND_GPU but no GPU is available"), "{err}");
        let auto = load(&format!("name: \"m\" {IO}")).unwrap();
        assert_eq!(auto.instance_group[0].kind, Kind::Cpu as i32, "KIND_AUTO is KIND_CPU without GPUs");
        let latest0 = format!("name: \"m\" {IO} version_policy {{ latest {{ num_versions: 0 }} }}");
        assert!(load(&latest0).unwrap_err().to_string().contains("num_versions"));
    }

    #[test]
    fn gpu_groups_on_a_machine_with_gpus() {
        let all =
            load_with_gpus(&format!("name: \"m\" {IO} instance_group [ {{ kind: KIND_GPU count: 2 }} ]"), &[0, 1])
                .unwrap();
        assert_eq!(all.instance_group[0].gpus, [0, 1], "a KIND_GPU group without gpus uses every GPU");
        let one =
            load_with_gpus(&format!("name: \"m\" {IO} instance_group [ {{ kind: KIND_GPU gpus: [1] }} ]"), &[0, 1]);
        assert_eq!(one.unwrap().instance_group[0].gpus, [1]);
        let bad =
            load_with_gpus(&format!("name: \"m\" {IO} instance_group [ {{ kind: KIND_GPU gpus: [3] }} ]"), &[0, 1]);
        let err = bad.unwrap_err().to_string();
        assert!(err.contains("specifies invalid or unsupported gpu id 3") && err.contains("are: 0 1"), "{err}");
        let auto = load_with_gpus(&format!("name: \"m\" {IO}"), &[0]).unwrap();
        assert_eq!(auto.instance_group[0].kind, Kind::Auto as i32, "the backend decides KIND_AUTO at load");
    }
}
