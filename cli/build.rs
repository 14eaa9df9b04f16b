//! One name for "the command is built with a lease engine": `cfg(lease)`
//! is any of the engine features.

fn main() {
    cfg_aliases::cfg_aliases! {
        lease: { any(feature = "postgres-lease", feature = "redis") },
    }
}
