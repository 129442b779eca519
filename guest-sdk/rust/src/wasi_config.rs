//! The model's configuration values and the secrets the operator grants it, through the standard
//! `wasi:config/store` interface: a config parameter `config.<key>` gives `<key>`, and each secret
//! of `tessera serve --guest-secrets` granted to the model gives its name (the server's
//! docs/capabilities.md). A key nobody set reads as `None`.
//!
//! ```ignore
//! let api_key = tessera_guest::wasi_config::get("moderation_key")?
//!     .ok_or_else(|| Error::unavailable("no moderation_key granted"))?;
//! ```

use crate::Error;
use crate::bindings::wasi::config::store;

fn error(e: store::Error) -> Error {
    match e {
        store::Error::Upstream(m) | store::Error::Io(m) => Error::internal(format!("wasi:config: {m}")),
    }
}

/// The value of `key`, if the model has one.
pub fn get(key: &str) -> Result<Option<String>, Error> {
    store::get(key).map_err(error)
}

/// Every key and value the model has.
pub fn get_all() -> Result<Vec<(String, String)>, Error> {
    store::get_all().map_err(error)
}
