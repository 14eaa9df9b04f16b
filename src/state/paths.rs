//! Where the state directory and a shard's files are.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Chooses the state directory: `explicit` if given, else
/// `IDUTIL_STATE_DIR`, else `$XDG_STATE_HOME/idutil`, else
/// `$HOME/.local/state/idutil`. Does not create it.
///
/// # Errors
///
/// [`Error::NoStateDir`] if none of these is set; [`Error::InvalidEnv`] if
/// `IDUTIL_STATE_DIR` is set but empty; [`Error::RelativeStateDir`] if the
/// directory given or set is not an absolute path.
pub fn state_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    let absolute = |dir: PathBuf| cleaned(&dir);
    if let Some(dir) = explicit {
        return absolute(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(crate::env::STATE_DIR) {
        if dir.is_empty() {
            return Err(Error::InvalidEnv {
                var: crate::env::STATE_DIR,
                value: String::new(),
                reason: "empty; unset it or name a directory",
            });
        }
        return absolute(dir.into());
    }
    // The XDG spec says relative paths are to be ignored.
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        if xdg.is_absolute() {
            return Ok(xdg.join("idutil"));
        }
    }
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if home.is_absolute() => Ok(home.join(".local/state/idutil")),
        _ => Err(Error::NoStateDir),
    }
}

/// `dir` as an absolute path without `.` components or trailing slashes
/// (`/state/link/.` and `/state/link/` would let a symbolic link pass for
/// the directory itself) and without `..` (which may climb out of where a
/// link points).
pub(super) fn cleaned(dir: &Path) -> Result<PathBuf> {
    if !dir.is_absolute() {
        return Err(Error::RelativeStateDir {
            path: dir.to_path_buf(),
        });
    }
    if dir
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(Error::Untrusted {
            path: dir.to_path_buf(),
            reason: "it contains \"..\"; name the directory without it".to_string(),
        });
    }
    Ok(dir.components().collect())
}

/// Whether `dir` is the platform's default state directory, used because
/// nothing named another: then a failure there is news to the user, who
/// may never have chosen a state directory (`HOME=/` in a container).
pub(super) fn is_default_dir(dir: &Path) -> bool {
    std::env::var_os(crate::env::STATE_DIR).is_none()
        && state_dir(None).is_ok_and(|default| cleaned(dir).is_ok_and(|d| d == default))
}

/// Path of a shard's state file in `dir`.
pub fn state_path(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("shard-{shard}.state"))
}

pub(super) fn lock_path(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("shard-{shard}.lock"))
}

pub(super) fn state_name(shard: u32) -> String {
    format!("shard-{shard}.state")
}

pub(super) fn lock_name(shard: u32) -> String {
    format!("shard-{shard}.lock")
}
