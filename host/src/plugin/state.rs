//! The data of one plugin's `Store`: WASI context (nothing granted), resource limiter, and the
//! state behind the host API (grants, log level, status).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::output::LogStream;
use super::spec::LogLevel;
use super::status::PluginStatus;
use crate::actions::{HostServices, PluginActions};
use crate::informer::Cache;

/// Most table elements an instance may have.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Caps linear memory; remembers whether the cap was hit (to name an OOM trap as such).
pub struct MemoryLimiter {
    cap: usize,
    /// Set when a growth beyond the cap was refused.
    pub hit: bool,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        64
    }
}

/// What a plugin may reach: the caches of its informers, by name, and the host's shared
/// services (verdict store, action sink, audit log), which its spec further limits.
#[derive(Clone, Default)]
pub struct Grants {
    /// Informers it may read.
    pub caches: Arc<BTreeMap<String, Cache>>,
    /// Verdicts and actions.
    pub services: HostServices,
}

impl Grants {
    /// Grants of these caches, with services of no API server.
    pub fn caches(caches: BTreeMap<String, Cache>) -> Self {
        Self {
            caches: Arc::new(caches),
            services: HostServices::default(),
        }
    }
}

/// State behind the `host` interface.
pub struct HostApi {
    /// The plugin's name (log and metric tag).
    pub plugin: Arc<str>,
    /// Informers it may read.
    pub grants: Grants,
    /// Lowest level kept.
    pub log_level: LogLevel,
    /// Where counters, gauges and logs go.
    pub status: Arc<PluginStatus>,
    /// Its actions (grants, rate limit, sender) and the verdict store.
    pub actions: Arc<PluginActions>,
    /// Record new violations as Kubernetes Events too.
    pub verdict_events: bool,
}

/// Everything a plugin's `Store` holds.
pub struct StoreData {
    wasi: WasiCtx,
    table: ResourceTable,
    /// Memory cap.
    pub limiter: MemoryLimiter,
    /// Host API state.
    pub api: HostApi,
    /// When the current call started: the thread's CPU time and the wall clock.
    pub call_start: Option<(Duration, Instant)>,
}

impl StoreData {
    /// Store data for a plugin: WASI with nothing granted (no files, env, args or sockets;
    /// stdout/stderr to the host log), a memory cap of `memory` bytes.
    pub fn new(api: HostApi, memory: u64) -> Self {
        let out = LogStream::new(api.plugin.clone(), "stdout", api.status.logs.clone());
        let err = LogStream::new(api.plugin.clone(), "stderr", api.status.logs.clone());
        let wasi = WasiCtxBuilder::new()
            .stdout(out)
            .stderr(err)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                cap: usize::try_from(memory).unwrap_or(usize::MAX),
                hit: false,
            },
            api,
            call_start: None,
        }
    }
}

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
