#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| vrampool_fuzz::engine_ops(data));
