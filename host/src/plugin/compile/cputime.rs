//! CPU time of the calling thread: what a plugin call's deadline is measured in, so a call that
//! waits for a core (many plugins, few cores) is not cut for time it did not run.

use std::time::Duration;

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`); `None` where the
/// clock gives a negative time.
pub fn thread_cpu_time() -> Option<Duration> {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_accrues_cpu_time_and_a_sleeping_one_does_not() {
        let t0 = thread_cpu_time().expect("thread CPU time is readable here");
        // Spin until the thread has run 20 ms (on a loaded machine that takes longer than 20 ms
        // of wall time, so the bound is generous).
        let start = std::time::Instant::now();
        let mut t1 = t0;
        while t1 - t0 < Duration::from_millis(20) && start.elapsed() < Duration::from_secs(20) {
            std::hint::black_box(0u64);
            t1 = thread_cpu_time().unwrap();
        }
        assert!(t1 - t0 >= Duration::from_millis(20), "{:?}", t1 - t0);
        std::thread::sleep(Duration::from_millis(50));
        let t2 = thread_cpu_time().unwrap();
        assert!(t2 - t1 < Duration::from_millis(20), "{:?}", t2 - t1);
    }
}
