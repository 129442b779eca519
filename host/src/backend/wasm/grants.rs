//! What a model's config and the operator grant its guests beyond models: the values
//! `wasi:config` serves (`config.` parameters and granted secrets) and the key-value store
//! `wasi:keyvalue` serves. The interfaces themselves: `config_store`, `keyvalue`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::kv_store::ModelStore;
use super::secrets::{GuestSecrets, Secret, valid_key};
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};

/// What a model's guests may reach through standard WASI interfaces.
#[derive(Default)]
pub(super) struct Capabilities {
    /// `wasi:config`: the model's `config.` parameters and its granted secrets.
    pub(super) config: ConfigValues,
    /// `wasi:keyvalue`: the model's store, if its config asks for one.
    pub(super) keyvalue: Option<Arc<ModelStore>>,
}

/// The prefix of the config parameters a guest reads through wasi:config.
pub(super) const PARAMETER_PREFIX: &str = "config.";

/// What one model's guests read through wasi:config.
#[derive(Clone, Debug, Default)]
pub(super) struct ConfigValues {
    pub(super) values: BTreeMap<String, Secret>,
}

impl ConfigValues {
    /// The values of `config`'s `config.` parameters and of the secrets `secrets` grants to it.
    /// Errors never quote a value, nor a key the config gave that is not a valid key.
    pub(super) fn for_model(config: &ModelConfig, secrets: &GuestSecrets) -> CoreResult<Self> {
        let mut values = BTreeMap::new();
        for (key, parameter) in &config.parameters {
            let Some(name) = key.strip_prefix(PARAMETER_PREFIX) else { continue };
            if !valid_key(name) {
                return Err(CoreError::invalid_arg(format!(
                    "a '{PARAMETER_PREFIX}' parameter's key is not 1 to 128 letters, digits, '_', '-' and '.'"
                )));
            }
            values.insert(name.to_string(), Secret::new(parameter.string_value.clone()));
        }
        for (name, secret) in secrets.for_model(&config.name).map_err(CoreError::unavailable)? {
            if values.insert(name.clone(), secret).is_some() {
                return Err(CoreError::invalid_arg(format!(
                    "parameter '{PARAMETER_PREFIX}{name}' has the name of a secret the operator grants this model"
                )));
            }
        }
        Ok(Self { values })
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    #[cfg(test)]
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(Secret::expose)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::wasm::sandbox::tests::config;

    #[test]
    fn reads_config_parameters_and_refuses_bad_keys_unquoted() {
        let values = ConfigValues::for_model(
            &config(&[("config.endpoint", "http://x"), ("other", "y")]),
            &GuestSecrets::default(),
        )
        .expect("values");
        assert_eq!(values.get("endpoint"), Some("http://x"));
        assert_eq!(values.get("other"), None, "only config. parameters");
        let e = ConfigValues::for_model(&config(&[("config.a b<script>", "v")]), &GuestSecrets::default())
            .expect_err("bad key");
        assert!(e.message.starts_with("a 'config.' parameter's key is not"), "{}", e.message);
        assert!(!e.message.contains("script"), "{}", e.message);
        assert!(ConfigValues::for_model(&config(&[]), &GuestSecrets::default()).expect("none").is_empty());
    }

    #[test]
    fn serves_granted_secrets_and_refuses_a_parameter_in_a_secrets_name() {
        let tmp = crate::backend::wasm::test_support::TempDir::new("config-secrets");
        let value = tmp.0.join("value");
        std::fs::write(&value, "MARKER-9").expect("write");
        let file = tmp.0.join("s.toml");
        let grant = format!("[secrets.token]\nfile = \"{}\"\nmodels = [\"test\"]\n", value.display());
        std::fs::write(&file, grant).expect("write");
        let secrets = GuestSecrets::load(&file, &[]).expect("load");
        let mut granted = config(&[]);
        granted.name = "test".into();
        assert_eq!(ConfigValues::for_model(&granted, &secrets).expect("values").get("token"), Some("MARKER-9"));
        let mut shadow = config(&[("config.token", "mine")]);
        shadow.name = "test".into();
        let e = ConfigValues::for_model(&shadow, &secrets).expect_err("a parameter in a secret's name");
        assert!(e.message.contains("has the name of a secret"), "{}", e.message);
        assert!(!e.message.contains("MARKER") && !e.message.contains("mine"), "{}", e.message);
        let mut other = config(&[]);
        other.name = "other".into();
        assert!(ConfigValues::for_model(&other, &secrets).expect("values").is_empty());
    }
}
