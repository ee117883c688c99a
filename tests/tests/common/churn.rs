//! Random churn on the test API server: creates, updates and deletes of pods.

use wisp_tests::{TestApiServer, pod};

use super::touched;

/// Deterministic pseudo-random numbers (no dependency, reproducible runs).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

pub struct Cluster {
    pub server: TestApiServer,
    pub live: Vec<(String, String)>,
    pub next_name: u64,
    pub rng: Lcg,
    pub deletes: u64,
    pub deleted: Vec<String>,
}

impl Cluster {
    /// Churn on `server`, whose pods are `live` (namespace, name), with random seed `seed`.
    pub fn new(server: TestApiServer, live: Vec<(String, String)>, seed: u64) -> Self {
        Self {
            server,
            live,
            next_name: 0,
            rng: Lcg(seed),
            deletes: 0,
            deleted: Vec::new(),
        }
    }

    /// One random change: update (60%), create (20%) or delete (20%).
    pub fn change(&mut self, n: u64) {
        let roll = self.rng.next(10);
        if roll < 6 && !self.live.is_empty() {
            let (ns, name) = self.live[self.rng.next(self.live.len() as u64) as usize].clone();
            self.server
                .update(touched(pod(&ns, &name), n))
                .expect("update");
        } else if roll < 8 || self.live.is_empty() {
            let ns = format!("ns-{}", self.rng.next(10));
            let name = format!("new-{}", self.next_name);
            self.next_name += 1;
            self.server.create(pod(&ns, &name)).expect("create");
            self.live.push((ns, name));
        } else {
            let i = self.rng.next(self.live.len() as u64) as usize;
            let (ns, name) = self.live.swap_remove(i);
            self.server
                .delete("v1", "Pod", Some(&ns), &name)
                .expect("delete");
            self.deletes += 1;
            self.deleted.push(format!("{ns}/{name}"));
        }
    }
}
