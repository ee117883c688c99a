//! A plugin of ABI 0.2 written with wit-bindgen alone (from `wit/v0.2`: the host's loading of
//! 0.2 components is tested with it), for the host's delivery tests: it logs
//! every batch it receives byte for byte, as hex (`batch LEN PART/PARTS HEX`, lines of at most
//! 2,048 bytes of the batch), and answers `ok` for each notification. The test compares the
//! bytes with the host's encoding of the same batch: what the guest's memory held is what the
//! host meant to write (every byte, at the place and length the call said).
//!
//! Settings: `{"quiet": true}` logs only `batch LEN` (for batches too large to log).
//!
//! Built twice: `test_raw_batch` gets objects whole, `test_raw_batch_meta` (feature
//! `metadata-only`) describes itself metadata-only.

wit_bindgen::generate!({
    path: "../../wit/v0.2",
    world: "plugin",
});

use std::sync::atomic::{AtomicBool, Ordering};

use exports::wisp::plugin::listener::Guest;
use wisp::plugin::host;
use wisp::plugin::types::{Level, Outcome, PluginInfo};

/// Bytes of the batch per log line (4,096 hex digits: under the host's line bound).
const PART: usize = 2048;

struct Raw;

/// Settings said `quiet`.
static QUIET: AtomicBool = AtomicBool::new(false);

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

impl Guest for Raw {
    fn describe() -> PluginInfo {
        PluginInfo {
            name: "test-raw-batch".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            informers: Vec::new(),
            replay_on_reload: false,
            metadata_only: cfg!(feature = "metadata-only"),
        }
    }

    fn init(settings: String) -> Result<(), String> {
        let compact: String = settings.split_whitespace().collect();
        QUIET.store(compact.contains("\"quiet\":true"), Ordering::Relaxed);
        Ok(())
    }

    fn handle(batch: Vec<u8>) -> Vec<Outcome> {
        if QUIET.load(Ordering::Relaxed) {
            host::log(Level::Info, &format!("batch {}", batch.len()));
        } else {
            let parts = batch.len().div_ceil(PART).max(1);
            for (i, part) in batch.chunks(PART).enumerate() {
                let line = format!("batch {} {}/{parts} {}", batch.len(), i + 1, hex(part));
                host::log(Level::Info, &line);
            }
        }
        // The notification count: the header's u32 at offset 4 (docs/abi.md, "Batch").
        let n = batch
            .get(4..8)
            .map_or(0, |c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        (0..n).map(|_| Outcome::Ok).collect()
    }

    fn snapshot() -> Option<Vec<u8>> {
        None
    }

    fn restore(_state: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

export!(Raw);
