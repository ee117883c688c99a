//! A valid component of another world (it exports `run`, not `wisp:plugin/listener`): the host
//! must refuse it with a clear error.

wit_bindgen::generate!({
    inline: "
        package test:other;
        world other {
            export run: func() -> u32;
        }
    ",
});

struct Other;

impl Guest for Other {
    fn run() -> u32 {
        42
    }
}

export!(Other);
