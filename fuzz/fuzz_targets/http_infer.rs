#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera::fuzzing::http_infer(data));
