#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tessera::fuzzing::tensor_pack(data));
