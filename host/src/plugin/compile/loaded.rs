//! What a load gives: a compiled component ([`LoadedComponent`]), where it came from
//! ([`LoadSource`]), which compiler made its code ([`Tier`]), or why there is none
//! ([`LoadError`]).

use std::time::Duration;

use wasmtime::component::Component;

/// How many bytes start a WebAssembly file: the magic and the version.
pub const WASM_HEADER: usize = 8;

/// Whether `bytes` start as a WebAssembly file does (`\0asm` and a 4-byte version).
pub fn is_wasm_header(bytes: &[u8]) -> bool {
    bytes.len() >= WASM_HEADER && bytes.starts_with(b"\0asm")
}

/// Where a component came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadSource {
    /// Already compiled in this process.
    Memory,
    /// Loaded from the on-disk cache of precompiled artifacts.
    Disk,
    /// Compiled now.
    Compiled,
}

impl LoadSource {
    /// How a load came about, as the CLI says it (`compiled`, `loaded from the module cache`).
    pub fn how(self) -> &'static str {
        match self {
            Self::Compiled => "compiled",
            Self::Disk => "loaded from the module cache",
            Self::Memory => "loaded from memory",
        }
    }
}

/// Which compiler a component's code comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tier {
    /// Cranelift, optimizing: what the module cache holds.
    #[default]
    Optimized,
    /// Winch, the first-load tier, until the Cranelift compile lands.
    Baseline,
}

impl Tier {
    /// As `/plugins` and the log say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Optimized => "optimized",
            Self::Baseline => "baseline",
        }
    }
}

/// A compiled component and how it was obtained.
#[derive(Clone)]
pub struct LoadedComponent {
    /// The component.
    pub component: Component,
    /// Where it came from.
    pub source: LoadSource,
    /// How long loading took.
    pub elapsed: Duration,
    /// SHA-256 of the module bytes, hex.
    pub hash: String,
    /// Its compiler.
    pub tier: Tier,
}

/// Why bytes could not become a component (the caller adds the plugin and path).
#[derive(Clone, Debug)]
pub enum LoadError {
    /// No `\0asm` header.
    NotWasm,
    /// A core module.
    NotComponent,
    /// Invalid component.
    Invalid(String),
    /// Its compile ran over the engine's `compile_timeout`: that much CPU time, or (`wall`)
    /// its wall-clock backstop, [`WALL_BACKSTOP`](super::config::WALL_BACKSTOP) times as long.
    TooSlow {
        /// The bound (`compile_timeout`).
        limit: Duration,
        /// How the user sets it ([`BoundNames`](super::config::BoundNames)).
        setting: &'static str,
        /// The wall-clock backstop ended it, not its CPU time.
        wall: bool,
    },
    /// Its compile needed more than the engine's `compile_memory` bytes.
    TooBig {
        /// The bound, bytes.
        limit: u64,
        /// How the user sets it ([`BoundNames`](super::config::BoundNames)).
        setting: &'static str,
    },
    /// The compiler process failed otherwise (what it said, or how it ended).
    Crashed(String),
}

impl LoadError {
    /// Whether compiling again may succeed: the wall-clock backstop (a machine too busy) or a
    /// compiler that crashed; not a module over its CPU or memory bound, nor an invalid one.
    pub fn may_pass(&self) -> bool {
        matches!(self, Self::TooSlow { wall: true, .. } | Self::Crashed(_))
    }
}
