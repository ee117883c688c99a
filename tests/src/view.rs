//! The server's pods as test-faults' view of them (`view_size`, `view_checksum` gauges): one
//! reading for the tests and the benchmarks that ask whether a plugin ended with the server's
//! final state.

use std::collections::BTreeMap;

use crate::TestApiServer;

/// The server's pods as `namespace/name` -> resourceVersion.
pub fn server_state(server: &TestApiServer) -> BTreeMap<String, String> {
    server
        .objects("v1", "Pod")
        .iter()
        .map(|o| {
            let md = &o["metadata"];
            (
                format!(
                    "{}/{}",
                    md["namespace"].as_str().unwrap_or(""),
                    md["name"].as_str().unwrap_or("")
                ),
                md["resourceVersion"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// test-faults' hash of `key@rv` (52 bits, so a xor of them fits a gauge exactly).
pub fn fnv52(key: &str, rv: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key.bytes().chain(std::iter::once(b'@')).chain(rv.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h & ((1 << 52) - 1)
}

/// The server's pods as test-faults' `view_size` and `view_checksum` would show them.
pub fn server_checksum(server: &TestApiServer) -> (usize, f64) {
    let s = server_state(server);
    (
        s.len(),
        s.iter().fold(0u64, |acc, (k, rv)| acc ^ fnv52(k, rv)) as f64,
    )
}
