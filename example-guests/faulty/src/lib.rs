//! `faulty`: a guest that misbehaves on request, for the sandbox tests.
//!
//! Inputs: `MODE` BYTES (its first element picks the behaviour) and `INPUT0` FP32 (any shape).
//! Output: `OUTPUT0` FP32, `INPUT0`'s shape.
//!
//! | MODE               | behaviour                                                           |
//! |--------------------|---------------------------------------------------------------------|
//! | `ok`               | OUTPUT0 = INPUT0 (the same host tensor, renamed: no copy)           |
//! | `log`              | one log line at each level, then like `ok`                          |
//! | `panic`            | panics with a message (the SDK's hook logs it, then a trap)         |
//! | `trap`             | executes `unreachable` (a trap with no message)                     |
//! | `loop`             | spins forever (stopped by the host's time limit)                    |
//! | `oom`              | allocates (and touches) 1 MiB blocks until memory runs out          |
//! | `bls_forbidden`    | BLS call to `simple`, which is not on its allow-list: the host's    |
//! |                    | error becomes this request's error (`internal` if it succeeded)     |
//! | `bad_dtype`        | OUTPUT0 as INT32 instead of FP32                                    |
//! | `bls_stream`       | BLS `infer-stream` to the decoupled `repeat` model with IN =        |
//! |                    | `[1, 2, 3]`: OUTPUT0 = the OUT values received, as FP32 `[3]`       |
//! | `bad_shape`        | OUTPUT0 of shape `[1, n + 1]` (a rank the config does not declare)  |
//! | `missing_output`   | no output tensors at all                                            |
//! | `alias_strings`    | BLS `infer` to `repeat` whose requested outputs are one string of   |
//! |                    | `INPUT0[1]` bytes named `INPUT0[0]` times (the list holds only      |
//! |                    | pointers to it): the host would copy it that many times. If the     |
//! |                    | host takes the call, an `invalid-arg` error saying so               |
//! | `stream_big`       | decoupled configs only: `INPUT0[0]` responses, each an OUTPUT0 of    |
//! |                    | `INPUT0[1]` floats, then the final flag                             |
//! | `log_flood`        | one log line of `INPUT0[0]` bytes, then a trap (whose message       |
//! |                    | quotes the last log line)                                           |
//! | `wrong_count`      | the batch gets one result more than it has requests                 |
//! | `wrong_count_zero` | the batch gets no results at all                                    |
//! | anything else      | an `invalid-arg` error for that request                             |
//!
//! `wrong_count*` apply to the whole batch when any of its requests asks for them.
//!
//! Config for the tests: `allowed_models` = `repeat` (so `bls_stream` may call it and
//! `bls_forbidden` may not call `simple`), a small `max_execute_ms` and `max_memory_bytes`.
//!
//! Initialization: a config parameter named `fail_initialize` (any value) makes `initialize`
//! return an error; one named `panic_initialize` makes it panic.

use tessera_guest::{
    Error, InitializeArgs, Model, Request, Tensor, TensorsExt, export_model, infer, infer_stream,
};

struct Faulty;

fn mode(request: &Request) -> Result<String, Error> {
    let modes = request.input("MODE")?.as_strings()?;
    modes
        .into_iter()
        .next()
        .ok_or_else(|| Error::invalid_arg("MODE is empty"))
}

#[inline(never)]
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

#[inline(never)]
fn memory_bomb() -> usize {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; 1 << 20];
        for page in block.chunks_mut(4096) {
            page[0] = 1;
        }
        blocks.push(std::hint::black_box(block));
        if blocks.len() == usize::MAX {
            return blocks.len();
        }
    }
}

#[cfg(target_arch = "wasm32")]
fn trap() -> ! {
    core::arch::wasm32::unreachable()
}

#[cfg(not(target_arch = "wasm32"))]
fn trap() -> ! {
    std::process::abort()
}

fn run(request: &Request, mode: &str) -> Result<Vec<Tensor>, Error> {
    let input = request.input("INPUT0")?;
    match mode {
        "ok" => Ok(vec![input.with_name("OUTPUT0")]),
        "log" => {
            tessera_guest::error!("faulty: error line for request '{}'", request.id());
            tessera_guest::warn!("faulty: warn line");
            tessera_guest::info!("faulty: info line");
            tessera_guest::verbose!("faulty: verbose line");
            Ok(vec![input.with_name("OUTPUT0")])
        }
        "panic" => panic!("faulty guest: panic requested (request '{}')", request.id()),
        "trap" => trap(),
        "loop" => spin(),
        "oom" => {
            let n = memory_bomb();
            Err(Error::internal(format!(
                "allocated {n} MiB without running out"
            )))
        }
        "bls_forbidden" => {
            let a = Tensor::from_i32("INPUT0", &[1, 16], &[1; 16])?;
            let b = a.with_name("INPUT1");
            match infer("simple", &[&a, &b], &["OUTPUT0"]) {
                Err(host_error) => Err(host_error),
                Ok(mut outputs) => {
                    let n = outputs
                        .take_named("OUTPUT0")
                        .map(|t| t.byte_size())
                        .unwrap_or(0);
                    Err(Error::internal(format!(
                        "BLS call to 'simple' was allowed ({n} bytes back); expected the allow-list to refuse it"
                    )))
                }
            }
        }
        "bad_dtype" => {
            let values: Vec<i32> = input.as_f32()?.iter().map(|v| *v as i32).collect();
            Ok(vec![Tensor::from_i32("OUTPUT0", &input.shape(), &values)?])
        }
        "bad_shape" => {
            let mut values = input.as_f32()?;
            values.push(0.0);
            Ok(vec![Tensor::from_f32(
                "OUTPUT0",
                &[1, values.len() as i64],
                &values,
            )?])
        }
        "bls_stream" => {
            let ins = Tensor::from_i32("IN", &[3], &[1, 2, 3])?;
            let mut got = Vec::new();
            for response in infer_stream("repeat", &[&ins], &["OUT"])? {
                let mut outputs = response?;
                if outputs.is_empty() {
                    continue; // a final flag without a response
                }
                got.extend(
                    outputs
                        .take_named("OUT")?
                        .as_i32()?
                        .into_iter()
                        .map(|v| v as f32),
                );
            }
            Ok(vec![Tensor::from_f32(
                "OUTPUT0",
                &[got.len() as i64],
                &got,
            )?])
        }
        "missing_output" => Ok(Vec::new()),
        "alias_strings" => {
            let sizes = input.as_f32()?;
            let (count, len) = match sizes.as_slice() {
                [count, len, ..] => (*count as usize, *len as usize),
                _ => return Err(Error::invalid_arg("alias_strings needs INPUT0 = [count, bytes]")),
            };
            let taken = alias::infer_with_aliased_outputs("repeat", count, len);
            Err(Error::invalid_arg(format!(
                "the host took a call naming one {len}-byte string {count} times (returned {taken})"
            )))
        }
        "stream_big" => {
            let sizes = input.as_f32()?;
            let (count, floats) = match sizes.as_slice() {
                [count, floats, ..] => (*count as usize, *floats as usize),
                _ => return Err(Error::invalid_arg("stream_big needs INPUT0 = [count, floats]")),
            };
            let values = vec![0.5f32; floats];
            let sender = request.sender();
            for _ in 0..count {
                sender.send(vec![Tensor::from_f32("OUTPUT0", &[floats as i64], &values)?], false)?;
            }
            sender.finish()?;
            Ok(Vec::new())
        }
        "log_flood" => {
            let len = input.as_f32()?.first().map_or(0, |n| *n as usize);
            tessera_guest::error!("{}", "x".repeat(len));
            trap()
        }
        "wrong_count" | "wrong_count_zero" => Ok(vec![input.with_name("OUTPUT0")]),
        other => Err(Error::invalid_arg(format!("unknown MODE '{other}'"))),
    }
}

/// A BLS call made through the raw import, below the SDK: its `outputs` list is `count`
/// pointers to one string, which no safe binding can build (each `String` owns its bytes).
mod alias {
    /// A `string` in a list: pointer and length, as the canonical ABI lays it out.
    #[cfg(target_arch = "wasm32")]
    #[derive(Clone, Copy)]
    #[repr(C)]
    struct Str {
        ptr: *const u8,
        len: usize,
    }

    #[cfg(target_arch = "wasm32")]
    #[link(wasm_import_module = "tessera:model/host@0.1.0")]
    unsafe extern "C" {
        /// `infer(model: string, version: option<s64>, inputs: list<borrow<tensor>>,
        /// outputs: list<string>, parameters: list<parameter>) -> result<list<tensor>, error>`,
        /// flattened by the canonical ABI; the result goes to `ret`.
        #[link_name = "infer"]
        fn infer(
            model: *const u8,
            model_len: usize,
            has_version: i32,
            version: i64,
            inputs: *const u32,
            inputs_len: usize,
            outputs: *const Str,
            outputs_len: usize,
            parameters: *const u8,
            parameters_len: usize,
            ret: *mut u8,
        );
    }

    /// Makes the call and returns the result's discriminant (0 ok, 1 error).
    #[cfg(target_arch = "wasm32")]
    pub(super) fn infer_with_aliased_outputs(model: &str, count: usize, len: usize) -> u8 {
        let name = "x".repeat(len);
        let outputs = vec![Str { ptr: name.as_ptr(), len: name.len() }; count];
        // result<list<tensor>, error>: a discriminant byte, then at most 16 bytes of payload.
        let mut ret = [0u32; 4];
        let no_inputs: [u32; 0] = [];
        // A `parameter` is 8-aligned (its value may be an s64 or f64); so must its list be.
        let no_parameters: [u64; 0] = [];
        // SAFETY: every pointer/length pair names live memory of its length; `ret` is 4-aligned
        // and large enough for the result; the host writes nothing else.
        unsafe {
            infer(
                model.as_ptr(),
                model.len(),
                0,
                0,
                no_inputs.as_ptr(),
                0,
                outputs.as_ptr(),
                outputs.len(),
                no_parameters.as_ptr().cast(),
                0,
                ret.as_mut_ptr().cast(),
            );
        }
        ret[0].to_le_bytes()[0]
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub(super) fn infer_with_aliased_outputs(_model: &str, _count: usize, _len: usize) -> u8 {
        unreachable!("faulty runs as a WebAssembly guest only")
    }
}

impl Model for Faulty {
    fn initialize(args: InitializeArgs) -> Result<Self, Error> {
        // The config is JSON; a substring test is enough to find these parameter names.
        if args.model_config.contains("\"panic_initialize\"") {
            panic!(
                "faulty guest: panic_initialize is set in the config of '{}'",
                args.model_name
            );
        }
        if args.model_config.contains("\"fail_initialize\"") {
            return Err(Error::invalid_arg(
                "faulty guest: fail_initialize is set in the config",
            ));
        }
        Ok(Faulty)
    }

    fn execute(&mut self, requests: Vec<Request>) -> Vec<Result<Vec<Tensor>, Error>> {
        let modes: Vec<Result<String, Error>> = requests.iter().map(mode).collect();
        let any = |m: &str| modes.iter().any(|r| matches!(r, Ok(s) if s == m));
        let (extra, none) = (any("wrong_count"), any("wrong_count_zero"));
        let mut results: Vec<Result<Vec<Tensor>, Error>> = requests
            .iter()
            .zip(modes.iter())
            .map(|(request, mode)| mode.clone().and_then(|m| run(request, &m)))
            .collect();
        if none || any("stream_big") {
            // stream_big answered through its sender: a decoupled model returns no results.
            results.clear();
        } else if extra {
            results.push(Err(Error::internal(
                "faulty guest: a result for no request",
            )));
        }
        results
    }
}

export_model!(Faulty);
