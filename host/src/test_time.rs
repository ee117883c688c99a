//! How long a unit test waits for a condition before it gives up: every such bound goes through
//! [`patience`], scaled by `WISP_TEST_TIME_SCALE` (a positive number, default 1) as the
//! integration tests' are. A test asserts the condition, never that a busy machine was quick.

use std::sync::OnceLock;
use std::time::Duration;

/// `d` times `WISP_TEST_TIME_SCALE`.
pub fn patience(d: Duration) -> Duration {
    static SCALE: OnceLock<f64> = OnceLock::new();
    d.mul_f64(
        *SCALE.get_or_init(|| match std::env::var("WISP_TEST_TIME_SCALE") {
            Err(_) => 1.0,
            Ok(v) => match v.trim().parse::<f64>() {
                Ok(s) if s > 0.0 && s.is_finite() => s,
                _ => panic!("WISP_TEST_TIME_SCALE={v:?}: expected a positive number"),
            },
        }),
    )
}
