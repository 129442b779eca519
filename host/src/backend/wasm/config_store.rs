//! `wasi:config/store@0.2.0-rc.1` per model: the values a guest reads with `get` / `get-all`.
//!
//! - A config parameter `config.<key>` gives key `<key>` its string value. These sit in the
//!   model's config, which `/config` shows: settings, not secrets.
//! - The operator's secrets granted to the model (`--guest-secrets`, see `secrets`) give their
//!   names as keys. A secret and a `config.` parameter of the same key fail the load.
//! - Nothing else: a key no one set reads as absent, and a model given nothing reads nothing.
//!
//! Keys are 1 to 128 letters, digits, '_', '-' and '.'. The values are read once, when the
//! instance is created (`grants::ConfigValues`); a rotated secret reaches a model when it is
//! loaded again. No value is ever logged, traced, counted or put in an error message: the only
//! way out of the host is the guest's own call.

use super::bindings::wasi::config::store;
use super::state::CapabilityView;

impl store::Host for CapabilityView<'_> {
    fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, store::Error>> {
        Ok(Ok(self.shared.capabilities.config.values.get(&key).map(|v| v.expose().to_string())))
    }

    fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, store::Error>> {
        let values = &self.shared.capabilities.config.values;
        Ok(Ok(values.iter().map(|(k, v)| (k.clone(), v.expose().to_string())).collect()))
    }
}
