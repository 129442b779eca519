//! The model's key-value store, through the standard `wasi:keyvalue` interfaces (`store`,
//! `atomics`): buckets of byte values kept between requests, in memory or on the server's disk,
//! within a byte quota, apart per tenant (the server's docs/capabilities.md). Granted by the
//! model's config (`keyvalue` = `memory` or `persistent`); without it every call fails with
//! `unavailable`.
//!
//! ```ignore
//! let cache = tessera_guest::keyvalue::Bucket::open("lookups")?;
//! let calls = cache.increment("calls", 1)?;
//! ```

use crate::Error;
use crate::bindings::wasi::keyvalue::{atomics, store};

fn error(e: store::Error) -> Error {
    match e {
        store::Error::AccessDenied => Error::unavailable(
            "this model has no key-value store: its config grants none (parameter 'keyvalue')",
        ),
        store::Error::NoSuchStore => Error::not_found("no such key-value store"),
        store::Error::Other(m) => Error::internal(format!("key-value store: {m}")),
    }
}

/// An open bucket of the model's store.
pub struct Bucket(store::Bucket);

impl Bucket {
    /// Opens the bucket `name` (created on its first write).
    pub fn open(name: &str) -> Result<Bucket, Error> {
        store::open(name).map(Bucket).map_err(error)
    }

    /// The value of `key`, if it has one.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        self.0.get(key).map_err(error)
    }

    /// Sets `key` to `value`; refused, changing nothing, past the model's quota.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        self.0.set(key, value).map_err(error)
    }

    /// Removes `key` (nothing happens if it has no value).
    pub fn delete(&self, key: &str) -> Result<(), Error> {
        self.0.delete(key).map_err(error)
    }

    /// Whether `key` has a value.
    pub fn exists(&self, key: &str) -> Result<bool, Error> {
        self.0.exists(key).map_err(error)
    }

    /// Every key of the bucket, in order.
    pub fn keys(&self) -> Result<Vec<String>, Error> {
        let mut keys = Vec::new();
        let mut cursor = None;
        loop {
            let page = self.0.list_keys(cursor).map_err(error)?;
            keys.extend(page.keys);
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(keys),
            }
        }
    }

    /// Adds `delta` to the decimal number `key` holds (0 when it has none) and returns the sum,
    /// in one step no other request can interleave with.
    pub fn increment(&self, key: &str, delta: u64) -> Result<u64, Error> {
        atomics::increment(&self.0, key, delta).map_err(error)
    }
}
