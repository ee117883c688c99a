//! The data of one plugin's `Store`: WASI context (nothing granted), resource limiter, and the
//! state behind the host API (grants, log level, status).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::clock::CallClock;
use super::output::LogStream;
use crate::actions::{HostServices, PluginActions};
use crate::informer::Cache;
use crate::plugin::spec::LogLevel;
use crate::plugin::status::PluginStatus;

/// What one table element costs in host memory (wasmtime keeps a pointer per element).
pub const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();
/// Most core instances, linear memories and tables one plugin instance may create: far more than
/// any toolchain makes (a Rust or C component has 1-3 of each, an interpreted one a handful),
/// few enough that their bookkeeping stays small. Their sizes are what [`MemoryLimiter`] bounds.
pub const MAX_INSTANCES: usize = 64;
/// See [`MAX_INSTANCES`].
pub const MAX_MEMORIES: usize = 16;
/// See [`MAX_INSTANCES`].
pub const MAX_TABLES: usize = 64;
/// Most entries in a plugin's WASI resource table (streams, pollables, ...): each is a host
/// allocation the plugin asks for.
pub const MAX_WASI_RESOURCES: usize = 10_000;

/// Most random bytes one `wasi:random` call may ask for (the host builds them in its memory).
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;
/// Most bytes (wasmtime's in-memory estimate) one `wasi:http` `fields` resource may hold
/// (wasmtime's default: 128 KiB). With the body bound below, what a plugin can make the host
/// hold through `wasi:http` is a few KiB per resource, within [`MAX_WASI_RESOURCES`].
pub const MAX_HTTP_FIELDS_BYTES: usize = 4 * 1024;
/// Largest write to an outgoing `wasi:http` body, of which the host buffers at most two per
/// body (they are never sent); wasmtime's default is 1 MiB.
pub const MAX_HTTP_BODY_CHUNK: usize = 4 * 1024;

/// One memory budget for a whole plugin instance: every linear memory it creates or grows, and
/// every table element (at [`TABLE_ELEMENT_BYTES`] each), counted together against the
/// plugin's `limits.memory`, from instantiation on (creating a memory asks for its initial
/// size). Remembers whether the budget was hit, to name the trap as out of memory.
pub struct MemoryLimiter {
    cap: usize,
    /// Bytes of linear memory and tables the instance holds now.
    pub used: usize,
    /// Set when a growth beyond the budget was refused.
    pub hit: bool,
}

impl MemoryLimiter {
    /// A budget of `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            used: 0,
            hit: false,
        }
    }

    /// The budget, in bytes.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Takes `current -> desired` bytes out of the budget, or refuses (and remembers it).
    fn grow(&mut self, current: usize, desired: usize) -> bool {
        let used = self.used.saturating_sub(current).saturating_add(desired);
        if used > self.cap {
            self.hit = true;
            return false;
        }
        self.used = used;
        true
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(current, desired))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(self.grow(
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        ))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
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

/// The `wasi:http` hooks of every plugin: each outgoing request is refused with
/// `HTTP-request-denied` before any connection is made. Plugins get no network; `wasi:http` is
/// linked only so that components whose toolchain imports it (a default ComponentizeJS build)
/// load.
pub struct DenyHttp;

/// What an outgoing request of a plugin gets: the future its `handle` returns.
type SendResult = wasmtime_wasi_http::Result<(
    http::Response<wasmtime_wasi_http::WasiBody>,
    Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
)>;

impl wasmtime_wasi_http::WasiHttpHooks for DenyHttp {
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        MAX_HTTP_BODY_CHUNK
    }

    fn send_request(
        &mut self,
        _request: http::Request<wasmtime_wasi_http::WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn std::future::Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn std::future::Future<Output = SendResult> + Send> {
        Box::new(std::future::ready(Err(
            wasmtime_wasi_http::Error::HttpRequestDenied,
        )))
    }
}

/// Everything a plugin's `Store` holds.
pub struct StoreData {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    http_hooks: DenyHttp,
    table: ResourceTable,
    /// Memory cap.
    pub limiter: MemoryLimiter,
    /// Host API state.
    pub api: HostApi,
    /// The time the current call has used of its deadline.
    pub clock: CallClock,
    /// An `admit` call is running: `policy` keeps no verdict and `actions` does nothing (an
    /// admission call has no side effects).
    pub admitting: bool,
}

impl StoreData {
    /// Store data for a plugin: WASI with nothing granted (no files, env, args or sockets;
    /// stdout/stderr to the host log; every `wasi:http` request refused), a memory budget of `memory` bytes, calls cut at
    /// `deadline`.
    pub fn new(api: HostApi, memory: u64, deadline: Duration) -> Self {
        let out = LogStream::new(api.plugin.clone(), "stdout", api.status.clone());
        let err = LogStream::new(api.plugin.clone(), "stderr", api.status.clone());
        let wasi = WasiCtxBuilder::new()
            .stdout(out)
            .stderr(err)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .max_random_size(MAX_RANDOM_BYTES)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_WASI_RESOURCES);
        Self {
            wasi,
            http: {
                let mut http = WasiHttpCtx::new();
                http.set_field_size_limit(MAX_HTTP_FIELDS_BYTES);
                http
            },
            http_hooks: DenyHttp,
            table,
            limiter: MemoryLimiter::new(usize::try_from(memory).unwrap_or(usize::MAX)),
            api,
            clock: CallClock::new(deadline),
            admitting: false,
        }
    }
}

impl StoreData {
    /// The WASI resource table and the call's clock, apart.
    pub fn table_and_clock(&mut self) -> (&mut ResourceTable, &mut CallClock) {
        (&mut self.table, &mut self.clock)
    }
}

impl WasiHttpView for StoreData {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_budget_counts_every_memory_and_table_together() {
        let mut l = MemoryLimiter::new(64 << 20);
        // Three memories of 20 MiB fit, a fourth does not, however small each is.
        for _ in 0..3 {
            assert!(l.memory_growing(0, 20 << 20, None).unwrap());
        }
        assert!(!l.memory_growing(0, 20 << 20, None).unwrap());
        assert!(l.hit);
        // Growing one of them counts only the growth.
        assert!(l.memory_growing(20 << 20, 24 << 20, None).unwrap());
        // Table elements count too.
        let left = (64 << 20) - l.used;
        assert!(
            !l.table_growing(0, left / TABLE_ELEMENT_BYTES + 1, None)
                .unwrap()
        );
        assert!(
            l.table_growing(0, left / TABLE_ELEMENT_BYTES, None)
                .unwrap()
        );
        assert_eq!(l.used, 64 << 20);
    }
}
