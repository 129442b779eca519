use std::path::Path;

use super::*;
use crate::error::ErrorKind;

fn sandbox(params: &[(&str, &str)]) -> Sandbox {
    let config = super::super::sandbox::tests::config(params);
    Sandbox::from_config(&config, Path::new("/models/guest/1")).expect("sandbox")
}

#[test]
fn time_limit_traps_name_the_limit() {
    let s = sandbox(&[("max_execute_ms", "250")]);
    let e = trap_error("m", "execute", &wasmtime::Error::from(Trap::Interrupt), &s, &[]);
    assert_eq!(e.kind, ErrorKind::Internal);
    assert_eq!(e.message, "WebAssembly model 'm' execute exceeded its time limit of 250 ms (max_execute_ms)");
}

#[test]
fn memory_traps_name_the_limit() {
    let s = sandbox(&[("max_memory_bytes", "1048576")]);
    let e = trap_error("m", "execute", &wasmtime::Error::from(Trap::AllocationTooLarge), &s, &[]);
    assert_eq!(
        e.message,
        "WebAssembly model 'm' execute exceeded its memory limit of 1048576 bytes (max_memory_bytes)"
    );
    // The limiter's refusal arrives as a plain error mentioning the grow.
    let refused = wasmtime::Error::msg("linear memory would grow to 2000000 bytes, beyond the model's limit");
    let e = trap_error("m", "initialize", &refused, &s, &[]);
    assert_eq!(
        e.message,
        "WebAssembly model 'm' initialize exceeded its memory limit of 1048576 bytes (max_memory_bytes): \
         linear memory would grow to 2000000 bytes, beyond the model's limit"
    );
    // Under wasmtime's backtrace (function names the guest chose) the message quotes the
    // limiter's own link, and a name that merely mentions a grow is not a memory trap.
    let backtrace = "error while executing at wasm backtrace:\n 0: linear memory would grow to";
    let wrapped = refused.context(backtrace);
    assert_eq!(trap_kind(&wrapped), TrapKind::Memory);
    assert!(
        trap_error("m", "execute", &wrapped, &s, &[])
            .message
            .ends_with("(max_memory_bytes): linear memory would grow to 2000000 bytes, beyond the model's limit")
    );
    let named = wasmtime::Error::msg("wasm trap: unreachable").context(backtrace);
    assert_eq!(trap_kind(&named), TrapKind::Fault, "a guest's function name is not the limiter's refusal");
}

#[test]
fn hostcall_fuel_traps_name_the_limit() {
    let s = sandbox(&[("max_memory_bytes", "1048576")]);
    // wasmtime 48's message (its `HostcallFuelExhausted`), under the call's context.
    let exhausted = wasmtime::Error::msg(
        "too much data is being copied between the host and the guest: \
         fuel allocated for hostcalls has been exhausted",
    )
    .context("error while executing at wasm backtrace");
    assert_eq!(trap_kind(&exhausted), TrapKind::Memory);
    let e = trap_error("m", "execute", &exhausted, &s, &[]);
    assert_eq!(e.kind, ErrorKind::Internal);
    assert_eq!(
        e.message,
        "WebAssembly model 'm' execute passed more than 2097152 bytes to the host in one call \
         (2 x max_memory_bytes)"
    );
}

#[test]
fn other_errors_are_traps_with_the_last_log_line() {
    let s = sandbox(&[]);
    let panic = wasmtime::Error::msg("guest panicked").context("error while executing at wasm backtrace");
    let log = ["first".to_string(), "panicked at src/lib.rs:3".to_string()];
    let e = trap_error("m", "execute", &panic, &s, &log);
    assert_eq!(e.kind, ErrorKind::Internal);
    assert_eq!(
        e.message,
        "WebAssembly model 'm' execute trapped: error while executing at wasm backtrace: guest panicked \
         (last guest log: panicked at src/lib.rs:3)"
    );
    let e = trap_error("m", "execute", &wasmtime::Error::from(Trap::UnreachableCodeReached), &s, &[]);
    assert!(e.message.starts_with("WebAssembly model 'm' execute trapped: "), "{}", e.message);
    assert!(!e.message.contains("last guest log"));
}

#[test]
fn a_cxx_exception_in_a_guests_numpy_is_named() {
    let s = sandbox(&[]);
    // what wasmtime reports when the guest's numpy throws: the trap under its backtrace
    let thrown = wasmtime::Error::from(Trap::UnreachableCodeReached)
        .context("error while executing at wasm backtrace:\n    0: 0x1c2d - tessera_numpy_cxx_exception");
    let e = trap_error("m", "execute", &thrown, &s, &[]);
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(
        e.message.starts_with("WebAssembly model 'm' execute trapped: numpy threw a C++ exception"),
        "{}",
        e.message
    );
}

#[test]
fn deadlines_round_down_to_ticks_plus_one() {
    assert_eq!(ticks_for(sandbox(&[("max_execute_ms", "1")]).max_execute), 2, "at least one whole tick");
    assert_eq!(ticks_for(sandbox(&[("max_execute_ms", "12")]).max_execute), 3);
    assert_eq!(ticks_for(sandbox(&[]).max_execute), 10_000 / 5 + 1);
}

#[test]
fn recycling_starts_past_three_quarters_of_the_cap() {
    assert!(!near_memory_limit(0, 1 << 20));
    assert!(!near_memory_limit(786_432, 1 << 20));
    assert!(near_memory_limit(786_433, 1 << 20));
}
