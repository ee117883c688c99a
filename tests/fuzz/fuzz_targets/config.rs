#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wisp_fuzz::config::check(data));
