//! The hash ranges a replica serves, shared by its sources and its action fence. The hash
//! space itself (ranges, the `shardSelector` syntax, how replicas split it) is
//! [`wisp_kinds::shard`]'s; its names are re-exported here for the sources and `scale`.

pub use wisp_kinds::shard::{
    Ranges, SLOTS, SPACE, ShardField, assignment, fnv1a64, parse_selector,
};

/// The hash ranges a replica serves now, shared by its sources (which list and watch only
/// them) and its action fence. A change ends the sources' watches, so each relists with the
/// new ranges: objects that left are delivered as deletions, objects that came as additions.
#[derive(Debug)]
pub struct ShardView {
    field: ShardField,
    ranges: tokio::sync::watch::Sender<Ranges>,
    /// Cleared once a list came back without `shardInfo`: the server ignores `shardSelector`
    /// (its `ShardedListAndWatch` gate is off), and filtering is client-side only.
    server_side: std::sync::atomic::AtomicBool,
}

impl ShardView {
    pub fn new(field: ShardField, initial: Ranges) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            field,
            ranges: tokio::sync::watch::Sender::new(initial),
            server_side: std::sync::atomic::AtomicBool::new(true),
        })
    }

    pub fn field(&self) -> ShardField {
        self.field
    }

    /// The ranges served now.
    pub fn ranges(&self) -> Ranges {
        self.ranges.borrow().clone()
    }

    /// Serves `ranges` from now on (sources relist if they changed).
    pub fn set(&self, ranges: Ranges) {
        self.ranges.send_if_modified(|r| {
            if *r == ranges {
                false
            } else {
                *r = ranges;
                true
            }
        });
    }

    /// Changes of the ranges.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Ranges> {
        self.ranges.subscribe()
    }

    /// Whether `obj` falls in `ranges`.
    pub fn keeps(&self, ranges: &Ranges, obj: &crate::informer::Object) -> bool {
        let m = obj.meta();
        ranges.contains(self.field.hash_of(m.uid(), m.namespace().unwrap_or("")))
    }

    /// The `shardSelector` to send for `ranges`, unless the server was found to ignore it.
    pub fn selector(&self, ranges: &Ranges) -> Option<String> {
        if self.server_side.load(std::sync::atomic::Ordering::Relaxed) {
            ranges.selector(self.field)
        } else {
            None
        }
    }

    /// Records that a list sent with `selector` came back without the echo.
    pub fn not_applied_by_server(&self, selector: &str) {
        if self
            .server_side
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                selector,
                "the API server ignores shardSelector (ShardedListAndWatch off): filtering on this side"
            );
        }
    }

    /// Whether the server applies the selector (as far as known).
    pub fn server_side(&self) -> bool {
        self.server_side.load(std::sync::atomic::Ordering::Relaxed)
    }
}
