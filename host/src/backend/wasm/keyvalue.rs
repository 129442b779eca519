//! `wasi:keyvalue/store` and `wasi:keyvalue/atomics` (`@0.2.0-draft`) per model: buckets of
//! byte values a guest keeps between requests (a cache of lookups, counters), in the store
//! `kv_store` keeps for its model.
//!
//! Granted by the model's config, within the operator's bounds:
//! - `keyvalue`: `none` (the default: every call fails with `access-denied`), `memory` (kept
//!   while the model is loaded), or `persistent` (also written to the server's
//!   `--guest-keyvalue-dir`, and read back when the model is loaded again).
//! - `keyvalue_max_bytes` (default 1 MiB): the quota of each space, at most the server's
//!   `--guest-keyvalue-max-bytes` (default 64 MiB; 0 refuses every grant).
//!
//! Which space a call reaches is decided at each call, not when the bucket was opened, from the
//! requests of the `execute` call it runs in: a tenant's own space when they all run as one
//! tenant of the tenants file, the model's common space when none runs as a tenant (and outside
//! `execute`), and an error when one batch mixes them. So a bucket handle kept across calls never
//! carries one tenant's data into another's request.
//!
//! Bounds: a bucket name of at most 256 bytes, keys of at most 4 KiB, `list-keys` pages of 1000
//! keys; each open bucket handle is held on the guest's account (`Handles::hold`).

use wasmtime::component::Resource;

use super::bindings::wasi::keyvalue::{atomics, store};
use super::kv_store::{KeyValueStores, ModelStore, Refused, SpaceKey};
use super::resources::KvBucket;
use super::state::{CapabilityView, table_error};
use crate::config::ModelConfig;
use crate::error::{CoreError, CoreResult};

const DEFAULT_QUOTA: u64 = 1 << 20;
const MAX_BUCKET_NAME: usize = 256;
const MAX_KEY: usize = 4096;
const PAGE: usize = 1000;
/// What a bucket handle costs the guest's account beyond its name.
const HANDLE_COST: usize = 64;

/// The operator's bounds on guests' key-value stores (`tessera serve --guest-keyvalue-*`).
#[derive(Clone, Debug)]
pub struct KeyValueOptions {
    /// The most `keyvalue_max_bytes` a model may ask for; 0 grants no store at all.
    pub max_bytes: u64,
    /// Where `persistent` stores are written; none refuses `persistent`.
    pub dir: Option<std::path::PathBuf>,
}

impl Default for KeyValueOptions {
    fn default() -> Self {
        Self { max_bytes: 64 << 20, dir: None }
    }
}

fn cost(bucket: &KvBucket) -> usize {
    bucket.name.len() + HANDLE_COST
}

/// The store `config` grants its guests, opened in `stores`; none when it grants none.
pub(super) fn grant(
    config: &ModelConfig,
    options: &KeyValueOptions,
    stores: &KeyValueStores,
) -> CoreResult<Option<std::sync::Arc<ModelStore>>> {
    let param = |key: &str| config.parameters.get(key).map(|p| p.string_value.trim().to_string());
    let persistent = match param("keyvalue").as_deref() {
        None | Some("" | "none") => return Ok(None),
        Some("memory") => false,
        Some("persistent") => true,
        Some(_) => return Err(CoreError::invalid_arg("parameter 'keyvalue' must be none, memory or persistent")),
    };
    let quota = crate::config::positive_parameter(config, "keyvalue_max_bytes")
        .map_err(CoreError::invalid_arg)?
        .unwrap_or(DEFAULT_QUOTA);
    if quota > options.max_bytes {
        return Err(CoreError::invalid_arg(format!(
            "parameter 'keyvalue_max_bytes' asks for {quota} bytes; this server grants at most {} \
             (--guest-keyvalue-max-bytes)",
            options.max_bytes
        )));
    }
    let dir = match (persistent, &options.dir) {
        (false, _) => None,
        (true, Some(dir)) => Some(dir.as_path()),
        (true, None) => {
            return Err(CoreError::invalid_arg(
                "parameter 'keyvalue' = persistent needs a server started with --guest-keyvalue-dir",
            ));
        }
    };
    stores.open(&config.name, quota, dir).map(Some).map_err(CoreError::unavailable)
}

fn other(message: impl Into<String>) -> store::Error {
    store::Error::Other(message.into())
}

impl From<Refused> for store::Error {
    fn from(Refused(message): Refused) -> Self {
        other(message)
    }
}

impl CapabilityView<'_> {
    /// The model's store and the space this call reaches in it.
    fn space(&self) -> Result<(&ModelStore, SpaceKey), store::Error> {
        let store = self.shared.capabilities.keyvalue.as_deref().ok_or(store::Error::AccessDenied)?;
        // One space per request (a tenant's, or the common one); a batch must agree on one.
        let mut tenants = self.principals.iter().map(|p| p.counters.is_some().then(|| p.flow.clone()));
        let first = tenants.next().flatten();
        if tenants.any(|t| t != first) || (self.unprincipaled && first.is_some()) {
            return Err(other("this batch holds requests of more than one tenant, which share no key-value space"));
        }
        Ok((store, first))
    }

    fn bucket_name(&self, bucket: &Resource<KvBucket>) -> wasmtime::Result<String> {
        Ok(self.handles.table.get(bucket).map_err(table_error)?.name.clone())
    }
}

fn check_key(key: &str) -> Result<(), store::Error> {
    if key.len() > MAX_KEY { Err(other(format!("a key is at most {MAX_KEY} bytes"))) } else { Ok(()) }
}

type KvResult<T> = wasmtime::Result<Result<T, store::Error>>;

impl store::Host for CapabilityView<'_> {
    fn open(&mut self, identifier: String) -> KvResult<Resource<KvBucket>> {
        if let Err(e) = self.space() {
            return Ok(Err(e));
        }
        if identifier.len() > MAX_BUCKET_NAME {
            return Ok(Err(other(format!("a bucket name is at most {MAX_BUCKET_NAME} bytes"))));
        }
        let bucket = KvBucket { name: identifier };
        if let Err(e) = self.handles.hold(cost(&bucket)) {
            return Ok(Err(other(e.message)));
        }
        Ok(Ok(self.handles.table.push(bucket).map_err(table_error)?))
    }
}

impl store::HostBucket for CapabilityView<'_> {
    fn get(&mut self, bucket: Resource<KvBucket>, key: String) -> KvResult<Option<Vec<u8>>> {
        let name = self.bucket_name(&bucket)?;
        Ok(self.space().map(|(store, space)| store.get(&space, &name, &key)))
    }

    fn set(&mut self, bucket: Resource<KvBucket>, key: String, value: Vec<u8>) -> KvResult<()> {
        let name = self.bucket_name(&bucket)?;
        Ok(check_key(&key).and_then(|()| {
            let (store, space) = self.space()?;
            Ok(store.set(&space, &name, key, value)?)
        }))
    }

    fn delete(&mut self, bucket: Resource<KvBucket>, key: String) -> KvResult<()> {
        let name = self.bucket_name(&bucket)?;
        Ok(self.space().map(|(store, space)| store.delete(&space, &name, &key)))
    }

    fn exists(&mut self, bucket: Resource<KvBucket>, key: String) -> KvResult<bool> {
        let name = self.bucket_name(&bucket)?;
        Ok(self.space().map(|(store, space)| store.exists(&space, &name, &key)))
    }

    fn list_keys(&mut self, bucket: Resource<KvBucket>, cursor: Option<u64>) -> KvResult<store::KeyResponse> {
        let name = self.bucket_name(&bucket)?;
        Ok(self.space().map(|(store, space)| {
            let (keys, cursor) = store.list(&space, &name, cursor.unwrap_or(0), PAGE);
            store::KeyResponse { keys, cursor }
        }))
    }

    fn drop(&mut self, bucket: Resource<KvBucket>) -> wasmtime::Result<()> {
        let bucket = self.handles.table.delete(bucket).map_err(table_error)?;
        self.handles.release(cost(&bucket));
        Ok(())
    }
}

impl atomics::Host for CapabilityView<'_> {
    fn increment(&mut self, bucket: Resource<KvBucket>, key: String, delta: u64) -> KvResult<u64> {
        let name = self.bucket_name(&bucket)?;
        Ok(check_key(&key).and_then(|()| {
            let (store, space) = self.space()?;
            Ok(store.increment(&space, &name, key, delta)?)
        }))
    }
}
