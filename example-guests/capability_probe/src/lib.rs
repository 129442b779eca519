//! A test guest for wasi:config and wasi:keyvalue (tests/test_capabilities.py; the Python
//! probe, tests/guests/capability_py, answers the same operations). `OP` (BYTES, one element) is
//! one of:
//!
//! - `config:<key>`: the value of `<key>` reversed (so a test reads it without the value itself
//!   ever crossing the wire), or `<absent>`;
//! - `config-keys`: every key, comma-separated;
//! - `count:<bucket>`: key `n` of `<bucket>` incremented by one, in decimal;
//! - `set:<bucket>:<key>:<value>`, `get:<bucket>:<key>` (or `<absent>`), `keys:<bucket>`;
//! - `calls`: how many requests this instance has served, this one included (1 every time under
//!   `isolation = fresh`).
//!
//! `OUT` (BYTES, one element) is the answer; a failed call is the request's error.

use tessera_guest::keyvalue::Bucket;
use tessera_guest::{Error, InitializeArgs, Model, Request, Tensor, export_model, wasi_config};

/// The requests this instance has served.
struct Probe {
    calls: u64,
}

fn answer(op: &str) -> Result<String, Error> {
    let (verb, rest) = op.split_once(':').unwrap_or((op, ""));
    Ok(match verb {
        "config" => wasi_config::get(rest)?.map_or("<absent>".into(), |v| v.chars().rev().collect()),
        "config-keys" => wasi_config::get_all()?.into_iter().map(|(k, _)| k).collect::<Vec<_>>().join(","),
        "count" => Bucket::open(rest)?.increment("n", 1)?.to_string(),
        "set" => {
            let mut parts = rest.splitn(3, ':');
            let (bucket, key, value) = (parts.next(), parts.next(), parts.next());
            let (Some(bucket), Some(key), Some(value)) = (bucket, key, value) else {
                return Err(Error::invalid_arg("set:<bucket>:<key>:<value>"));
            };
            Bucket::open(bucket)?.set(key, value.as_bytes())?;
            "ok".into()
        }
        "get" => {
            let (bucket, key) = rest.split_once(':').ok_or_else(|| Error::invalid_arg("get:<bucket>:<key>"))?;
            Bucket::open(bucket)?.get(key)?.map_or("<absent>".into(), |v| String::from_utf8_lossy(&v).into_owned())
        }
        "keys" => Bucket::open(rest)?.keys()?.join(","),
        _ => return Err(Error::invalid_arg("unknown operation")),
    })
}

impl Model for Probe {
    fn initialize(_args: InitializeArgs) -> Result<Self, Error> {
        Ok(Probe { calls: 0 })
    }

    fn execute_request(&mut self, request: &Request) -> Result<Vec<Tensor>, Error> {
        self.calls += 1;
        let op = request.input("OP")?.as_strings()?.into_iter().next().unwrap_or_default();
        let out = if op == "calls" { self.calls.to_string() } else { answer(&op)? };
        Ok(vec![Tensor::from_strings("OUT", &[1], &[out])?])
    }
}

export_model!(Probe);
