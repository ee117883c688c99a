//! A plugin of the right world that also imports an interface the host does not provide
//! (`wasi:keyvalue/store@0.2.0-draft`): the host must refuse it naming that import, not the
//! world.

use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result};

mod extra {
    wit_bindgen::generate!({
        inline: "
            package test:missing;
            world extra {
                import wasi:keyvalue/store@0.2.0-draft;
            }
            package wasi:keyvalue@0.2.0-draft {
                interface store {
                    get: func(key: string) -> option<list<u8>>;
                }
            }
        ",
        generate_all,
    });
}

struct Missing;

impl Plugin for Missing {
    fn describe() -> PluginInfo {
        wisp_sdk::info("test-missing-import", env!("CARGO_PKG_VERSION"), &[])
    }

    fn init(_settings: &str) -> Result<Self> {
        Ok(Self)
    }

    fn on_add(&mut self, _cx: &Context, obj: &Object, _initial: bool) -> Result<()> {
        // Used, so the import stays in the component.
        let _ = extra::wasi::keyvalue::store::get(obj.name());
        Ok(())
    }
}

wisp_sdk::export_plugin!(Missing);
