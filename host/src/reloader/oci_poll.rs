//! Tags looked up again every `oci.poll`: when one moved, the new module is pulled (digests and
//! signature checked as at start) and reloaded through the same check and probation as a changed
//! module file. A failed pull or a refused module leaves the running version running; the
//! failure is logged and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Reloader;

/// Tag look-ups that failed (registry unreachable, refused, bad content or signature).
pub static POLL_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Moved tags whose new module was pulled.
pub static TAGS_MOVED: AtomicU64 = AtomicU64::new(0);

/// Looks tags up every `interval` of the reloader's config (`oci.poll`; 0: never) until
/// `shutdown`.
pub async fn run(reloader: Arc<Reloader>, shutdown: impl std::future::Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        // Read again each round: a config reload can add tags, or change `oci.poll`.
        let interval = reloader.oci_poll_interval();
        let wait = if interval.is_zero() { IDLE } else { interval };
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(wait) => {
                if !interval.is_zero() {
                    reloader.poll_oci().await;
                }
            }
        }
    }
}

/// How often a host with no tag to look up checks whether a config reload brought one.
const IDLE: Duration = Duration::from_secs(10);

/// Counts a failure.
pub fn failed() {
    POLL_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// Counts a moved tag.
pub fn moved() {
    TAGS_MOVED.fetch_add(1, Ordering::Relaxed);
}

/// The default poll interval when `oci.poll` is not set: tags are looked up every 5 minutes.
pub const DEFAULT_POLL: Duration = Duration::from_secs(300);
