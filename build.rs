//! One name for "a lease engine is built": `cfg(lease)` is any of the
//! engine features, so that adding an engine is a feature line here and in
//! `Cargo.toml`, not an edit of every `cfg`.

fn main() {
    cfg_aliases::cfg_aliases! {
        lease: { any(feature = "postgres-lease", feature = "redis") },
    }
}
