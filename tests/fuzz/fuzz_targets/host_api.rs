#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wisp_fuzz::host_api::check(data));
