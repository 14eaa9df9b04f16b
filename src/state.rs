//! The only place the disk is touched: the state directory, the per-shard
//! lock file, and the state file with its atomic replacement.
//!
//! Two files per shard live in the state directory:
//!
//! - `shard-N.lock`: never renamed or removed. A generator holds an
//!   exclusive `flock` on it (through `fs2`) for its whole life and writes
//!   its pid into it, so a second generator for the shard is refused with
//!   the holder's pid.
//! - `shard-N.state`: a small text file, replaced atomically (a temporary
//!   file in the same directory, `fsync`, `rename`, `fsync` of the directory).
//!
//! The state file looks like this (seconds are Unix seconds):
//!
//! ```text
//! # idutil state file for shard 7. ...
//! version = 1
//! layout = seconds:32 clock:0 sequence:16 shard:5 epoch:946684800
//! shard = 7
//! clock_id = 0
//! seen_max = 1763751234
//! seen_last_run = 1763751234
//! high_water = 0:1763751239
//! last = 1763751236 17
//! end
//! ```
//!
//! `high_water` lists, per clock value, the highest second an ID may have
//! been issued in; `last` (present only after a clean close) is the exact
//! last second and sequence issued. `end` marks a complete file.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::clock::wall_now;
use crate::error::{Error, Result};
use crate::host_lock::HostLock;
use crate::layout::Layout;

/// Environment variable that sets the state directory.
pub const STATE_DIR_ENV: &str = "IDUTIL_STATE_DIR";

/// The version of the state file format this crate reads and writes.
pub const STATE_VERSION: u32 = 1;

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
    let absolute = |dir: PathBuf| {
        if dir.is_absolute() {
            Ok(dir)
        } else {
            Err(Error::RelativeStateDir { path: dir })
        }
    };
    if let Some(dir) = explicit {
        return absolute(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(STATE_DIR_ENV) {
        if dir.is_empty() {
            return Err(Error::InvalidEnv {
                var: STATE_DIR_ENV,
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

/// Path of a shard's state file in `dir`.
pub fn state_path(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("shard-{shard}.state"))
}

fn lock_path(dir: &Path, shard: u32) -> PathBuf {
    dir.join(format!("shard-{shard}.lock"))
}

/// What a state file records. Seconds are Unix seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateFile {
    /// The layout the IDs were issued under.
    pub layout: Layout,
    /// The shard.
    pub shard: u32,
    /// The persistent clock id: bumped whenever a generator opened and found
    /// the wall clock behind the highest second the previous run saw.
    pub clock_id: u64,
    /// The highest wall-clock second any run on this shard has seen.
    pub seen_max: u64,
    /// The highest wall-clock second the last run saw.
    pub seen_last_run: u64,
    /// Per clock value, the highest second an ID may have been issued in.
    pub high_water: BTreeMap<u32, u64>,
    /// After a clean close: the exact last second and sequence issued,
    /// under clock value `clock_id mod 2^clock_bits`.
    pub last: Option<(u64, u32)>,
}

impl StateFile {
    /// The clock value IDs carry: `clock_id` modulo the layout's clock values.
    pub fn clock_value(&self) -> u32 {
        (self.clock_id % u64::from(self.layout.clock_values())) as u32
    }

    fn render(&self) -> String {
        let marks: Vec<String> = self
            .high_water
            .iter()
            .map(|(c, s)| format!("{c}:{s}"))
            .collect();
        let mut out = format!(
            "# idutil state file for shard {shard}. Replaced atomically by the generator that \
             holds shard-{shard}.lock; do not edit.\n\
             # If it is damaged, run: idutil state recover --shard {shard} --state-dir <this directory>\n\
             version = {STATE_VERSION}\n\
             layout = {layout}\n\
             shard = {shard}\n\
             clock_id = {clock_id}\n\
             seen_max = {seen_max}\n\
             seen_last_run = {seen_last_run}\n\
             high_water = {marks}\n",
            shard = self.shard,
            layout = self.layout.fingerprint(),
            clock_id = self.clock_id,
            seen_max = self.seen_max,
            seen_last_run = self.seen_last_run,
            marks = marks.join(" "),
        );
        if let Some((sec, seq)) = self.last {
            out.push_str(&format!("last = {sec} {seq}\n"));
        }
        out.push_str("end\n");
        out
    }

    /// Parses a state file's text. The error is the reason, for
    /// [`Error::BadState`].
    fn parse(text: &str) -> std::result::Result<StateFile, String> {
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        let mut ended = false;
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if ended {
                return Err("text after the end marker".into());
            }
            if line == "end" {
                ended = true;
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("malformed line {line:?}"))?;
            if fields.insert(key.trim(), value.trim()).is_some() {
                return Err(format!("{} appears twice", key.trim()));
            }
        }
        if fields.is_empty() {
            return Err("the file is empty".into());
        }
        let version = fields.remove("version").ok_or("no version")?;
        if version != STATE_VERSION.to_string() {
            return Err(format!(
                "unknown version {version:?} (this idutil reads version {STATE_VERSION})"
            ));
        }
        if !ended {
            return Err("truncated: no end marker".into());
        }
        let mut take = |key: &str| fields.remove(key).ok_or(format!("no {key}"));
        let layout = parse_layout(take("layout")?)?;
        let shard = number(take("shard")?, "shard")?;
        let clock_id = number(take("clock_id")?, "clock_id")?;
        let seen_max = number(take("seen_max")?, "seen_max")?;
        let seen_last_run = number(take("seen_last_run")?, "seen_last_run")?;
        let mut high_water = BTreeMap::new();
        for mark in take("high_water")?.split_whitespace() {
            let (c, s) = mark
                .split_once(':')
                .ok_or_else(|| format!("malformed high_water entry {mark:?}"))?;
            let c: u32 = number(c, "high_water clock value")?;
            if c >= layout.clock_values() {
                return Err(format!(
                    "high_water clock value {c} does not fit the layout"
                ));
            }
            high_water.insert(c, number(s, "high_water second")?);
        }
        let last = match fields.remove("last") {
            None => None,
            Some(v) => {
                let (sec, seq) = v
                    .split_once(' ')
                    .ok_or_else(|| format!("malformed last {v:?}"))?;
                Some((
                    number(sec, "last second")?,
                    number(seq.trim(), "last sequence")?,
                ))
            }
        };
        if let Some(key) = fields.keys().next() {
            return Err(format!("unknown field {key:?}"));
        }
        Ok(StateFile {
            layout,
            shard,
            clock_id,
            seen_max,
            seen_last_run,
            high_water,
            last,
        })
    }
}

fn number<T: std::str::FromStr>(text: &str, what: &str) -> std::result::Result<T, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} is not a number: {text:?}"));
    }
    text.parse()
        .map_err(|_| format!("{what} is out of range: {text:?}"))
}

fn parse_layout(text: &str) -> std::result::Result<Layout, String> {
    let mut widths = [None; 5];
    let names = ["seconds", "clock", "sequence", "shard", "epoch"];
    for part in text.split_whitespace() {
        let (name, value) = part
            .split_once(':')
            .ok_or_else(|| format!("malformed layout {text:?}"))?;
        let i = names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("malformed layout {text:?}"))?;
        widths[i] = Some(number::<u64>(value, "layout field")?);
    }
    let [Some(sec), Some(clk), Some(seq), Some(sh), Some(epoch)] = widths else {
        return Err(format!("incomplete layout {text:?}"));
    };
    let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    Layout::new(narrow(sec), narrow(clk), narrow(seq), narrow(sh), epoch)
        .map_err(|e| format!("invalid layout {text:?}: {e}"))
}

/// A locked shard in a state directory: the exclusive right to read and
/// replace its state file, for as long as the value lives.
///
/// The directory and the lock file are held open. Every file in the
/// directory is opened relative to the directory's descriptor, without
/// following symbolic links, and checked to be a regular file of ours
/// before it is read; every write first checks that the directory and
/// the lock file are still the ones at their paths (see [`Store::save`]).
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    path: PathBuf,
    lock_path: PathBuf,
    shard: u32,
    dir_fd: OwnedFd,
    dir_id: (u64, u64),
    // Held for the `flock`; closing it releases the lock.
    lock: File,
    lock_id: (u64, u64),
    /// Whether a state file was ever written for this shard in this
    /// directory, as the lock file records.
    had_state: AtomicBool,
    /// The per-host hold on the shard, for generators.
    _host: Option<HostLock>,
}

impl Store {
    /// Takes the shard's per-host lock in `id_space` (see
    /// [`host_lock`](crate::host_lock)), then its lock in `dir`.
    pub(crate) fn open_for_generator(dir: &Path, shard: u32, id_space: &str) -> Result<Store> {
        let host = HostLock::acquire(id_space, shard)?;
        let mut store = Store::open(dir, shard)?;
        store._host = Some(host);
        Ok(store)
    }

    /// Creates the directory if needed (mode 0700), checks it, and takes
    /// the shard's lock in it.
    pub(crate) fn open(dir: &Path, shard: u32) -> Result<Store> {
        let dir_fd = open_dir(dir, true)?.ok_or_else(|| {
            Error::io(
                "open the state directory",
                dir,
                io::ErrorKind::NotFound.into(),
            )
        })?;
        let dir_id = file_id(&dir_fd).map_err(|e| Error::io("examine", dir, e))?;
        let lock_path = lock_path(dir, shard);
        let lock_name = lock_name(shard);
        let lock = match open_in(
            &dir_fd,
            &lock_path,
            &lock_name,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL,
        ) {
            Ok(Some(file)) => {
                // Ours: 0600 whatever the umask.
                rfs::fchmod(&file, Mode::from_raw_mode(0o600))
                    .map_err(|e| Error::io("set the mode of", &lock_path, e.into()))?;
                file
            }
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::AlreadyExists => {
                open_in(&dir_fd, &lock_path, &lock_name, OFlags::RDWR)?.ok_or_else(|| {
                    Error::io(
                        "open the lock file",
                        &lock_path,
                        io::ErrorKind::NotFound.into(),
                    )
                })?
            }
            Err(e) => return Err(e),
            // Only when the directory vanished under us.
            Ok(None) => {
                return Err(Error::io(
                    "create the lock file",
                    &lock_path,
                    io::ErrorKind::NotFound.into(),
                ))
            }
        };
        check_file(&lock, &lock_path)?;
        let lock_id = file_id(&lock).map_err(|e| Error::io("examine", &lock_path, e))?;
        if let Err(e) = try_lock_exclusive(&lock) {
            if e.kind() == fs2::lock_contended_error().kind() {
                return Err(Error::Locked {
                    shard,
                    dir: dir.to_path_buf(),
                    pid: read_lock_file(&lock).0,
                });
            }
            return Err(Error::io("lock", &lock_path, e));
        }
        remove_stale_temporaries(&dir_fd, shard);
        let had_state = read_lock_file(&lock).1;
        // The pid is advice for error messages; the lock is what protects.
        let _ = write_lock_file(&lock, had_state);
        Ok(Store {
            dir: dir.to_path_buf(),
            path: state_path(dir, shard),
            lock_path,
            shard,
            dir_fd,
            dir_id,
            lock,
            lock_id,
            had_state: AtomicBool::new(had_state),
            _host: None,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the state file: `None` if there is none yet.
    ///
    /// A missing state file for a shard that had one in this directory is
    /// [`Error::BadState`], never a fresh start.
    pub(crate) fn load(&self) -> Result<Option<StateFile>> {
        let state = load_at(&self.dir_fd, &self.path, self.shard)?;
        if state.is_none() && self.had_state.load(Relaxed) {
            return Err(missing_state(&self.path, self.shard));
        }
        Ok(state)
    }

    /// The state file's bytes and modification time (Unix seconds), as
    /// checked and capped as [`Store::load`] reads them: `None` if there
    /// is none.
    pub(crate) fn read_raw(&self) -> Result<Option<(Vec<u8>, Option<u64>)>> {
        let Some(mut file) = open_in(
            &self.dir_fd,
            &self.path,
            &state_name(self.shard),
            OFlags::RDONLY,
        )?
        else {
            return Ok(None);
        };
        let stat = check_file(&file, &self.path)?;
        let bytes = read_capped(&mut file, &self.path)?;
        Ok(Some((bytes, u64::try_from(stat.st_mtime).ok())))
    }

    /// Keeps `bytes` (a damaged state file) beside the state file as
    /// `shard-N.state.bad`, replacing whatever had that name (a symbolic
    /// link itself, never its target).
    pub(crate) fn keep_bad(&self, bytes: &[u8]) -> Result<()> {
        let name = format!("{}.bad", state_name(self.shard));
        let kept = self.dir.join(&name);
        self.check_ground()?;
        self.replace(&name, bytes)
            .map_err(|e| Error::io("keep a copy of the old state as", &kept, e))
    }

    /// Replaces the state file atomically and durably.
    ///
    /// First checks that the state directory and the lock file are still
    /// the ones this store opened: if either was deleted or replaced,
    /// writes nothing and returns [`Error::Fenced`]. Records in the lock
    /// file that the shard has a state file, after the first write.
    pub(crate) fn save(&self, state: &StateFile) -> Result<()> {
        self.check_ground()?;
        if let Err(e) = self.replace(&state_name(self.shard), state.render().as_bytes()) {
            // A directory removed under the write makes it fail: say why.
            self.check_ground()?;
            return Err(Error::io("write the state file in", &self.dir, e));
        }
        if !self.had_state.load(Relaxed) {
            match write_lock_file(&self.lock, true).and_then(|()| self.lock.sync_all()) {
                Ok(()) => self.had_state.store(true, Relaxed),
                Err(e) => log::warn!(
                    "cannot record in {} that shard {} has a state file ({e}); \
                     retrying at the next write",
                    self.lock_path.display(),
                    self.shard
                ),
            }
        }
        if let Some(host) = &self._host {
            host.drain();
        }
        Ok(())
    }

    /// `Err(Error::Fenced)` unless the directory and lock file paths still
    /// name the directory and file this store holds open.
    fn check_ground(&self) -> Result<()> {
        let fenced = |reason: String| Error::Fenced {
            shard: self.shard,
            reason,
        };
        match fs::symlink_metadata(&self.dir) {
            Ok(m) if (m.dev(), m.ino()) == self.dir_id => {}
            Ok(_) => {
                return Err(fenced(format!(
                    "the state directory {} was replaced",
                    self.dir.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(fenced(format!(
                    "the state directory {} was deleted",
                    self.dir.display()
                )))
            }
            Err(e) => return Err(Error::io("examine", &self.dir, e)),
        }
        match fs::symlink_metadata(&self.lock_path) {
            Ok(m) if (m.dev(), m.ino()) == self.lock_id => Ok(()),
            Ok(_) => Err(fenced(format!(
                "the lock file {} was replaced",
                self.lock_path.display()
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(fenced(format!(
                "the lock file {} was deleted",
                self.lock_path.display()
            ))),
            Err(e) => Err(Error::io("examine", &self.lock_path, e)),
        }
    }

    /// Writes `bytes` to a new temporary file in the directory (0600,
    /// created exclusively), syncs it, renames it over `name` and syncs the
    /// directory, all relative to the directory's descriptor: a directory
    /// deleted meanwhile makes this fail, and one recreated at the same
    /// path is never written to.
    fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".shard-{}.", self.shard))
            .suffix(".tmp")
            .make_in(&self.dir, |path| {
                let name = path
                    .file_name()
                    .ok_or_else(|| io::Error::other("no file name"))?;
                let fd = rfs::openat(
                    &self.dir_fd,
                    name,
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                rfs::fchmod(&fd, Mode::from_raw_mode(0o600))?;
                Ok(File::from(fd))
            })?;
        let (mut file, mut temp_path) = tmp.into_parts();
        // Removed by name relative to the directory below, never by path.
        temp_path.disable_cleanup(true);
        let tmp_name = temp_path
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| io::Error::other("no file name"))?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| {
                rfs::renameat(&self.dir_fd, &*tmp_name, &self.dir_fd, name).map_err(io::Error::from)
            });
        if let Err(e) = written {
            let _ = rfs::unlinkat(&self.dir_fd, &*tmp_name, AtFlags::empty());
            return Err(e);
        }
        rfs::fsync(&self.dir_fd).map_err(io::Error::from)
    }
}

/// The most a state, lock or damaged file may hold: far more than any of
/// them needs, little enough that a huge file or a device is refused
/// rather than read.
pub const MAX_FILE_SIZE: u64 = 64 * 1024;

fn state_name(shard: u32) -> String {
    format!("shard-{shard}.state")
}

fn lock_name(shard: u32) -> String {
    format!("shard-{shard}.lock")
}

fn missing_state(path: &Path, shard: u32) -> Error {
    Error::BadState {
        path: path.to_path_buf(),
        shard,
        reason: format!(
            "the state file is missing although this shard had one in this directory \
             (shard-{shard}.lock records it), so starting again at the clock could re-issue \
             IDs; if IDs may have been issued ahead of the clock, add --after with the \
             latest time they may have reached"
        ),
    }
}

/// `(device, inode)` of an open file or directory.
fn file_id(fd: impl AsFd) -> io::Result<(u64, u64)> {
    let st = rfs::fstat(fd)?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Ok((st.st_dev as u64, st.st_ino as u64))
}

/// Opens `dir` as a directory without following a symbolic link, after
/// creating it (and its missing parents) with mode 0700 when `create`;
/// checks its owner and mode. `None` if it does not exist and `create` is
/// false.
fn open_dir(dir: &Path, create: bool) -> Result<Option<OwnedFd>> {
    if !dir.is_absolute() {
        return Err(Error::RelativeStateDir {
            path: dir.to_path_buf(),
        });
    }
    if create {
        create_private_dirs(dir)?;
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rfs::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) if !create => return Ok(None),
        Err(Errno::LOOP | Errno::NOTDIR) => {
            let link = fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            let reason = if link {
                "it is a symbolic link, and the state directory itself must not be one (its \
                 parents may be); name the directory the link points to"
            } else {
                "it is not a directory"
            };
            return Err(Error::Untrusted {
                path: dir.to_path_buf(),
                reason: reason.to_string(),
            });
        }
        Err(e) => return Err(Error::io("open the state directory", dir, e.into())),
    };
    let st = rfs::fstat(&fd).map_err(|e| Error::io("examine", dir, e.into()))?;
    check_owner_and_mode(dir, &st, true)?;
    Ok(Some(fd))
}

/// Creates `dir` and its missing parents, each with mode 0700 whatever the
/// umask.
fn create_private_dirs(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    loop {
        match fs::symlink_metadata(at) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(at);
                match at.parent() {
                    Some(parent) => at = parent,
                    None => break,
                }
            }
            Err(e) => return Err(Error::io("create the state directory", at, e)),
        }
    }
    for path in missing.into_iter().rev() {
        match fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {
                // The umask may have taken bits away; set them, on the
                // directory just made (not on what a link might name).
                let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                rfs::open(path, flags, Mode::empty())
                    .and_then(|fd| rfs::fchmod(fd, Mode::from_raw_mode(0o700)))
                    .map_err(|e| Error::io("set the mode of", path, e.into()))?;
            }
            // Made by someone else meanwhile: checked when opened.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("create the state directory", path, e)),
        }
    }
    Ok(())
}

/// Refuses what sshd refuses for `~/.ssh`: a directory or file that
/// another user owns, or that group or others may write.
fn check_owner_and_mode(path: &Path, st: &rfs::Stat, is_dir: bool) -> Result<()> {
    let euid = rustix::process::geteuid().as_raw();
    let uid = st.st_uid;
    let what = if is_dir { "directory" } else { "file" };
    if uid != euid {
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "the {what} belongs to uid {uid}, not to uid {euid} that runs the generator, so \
                 another user could delete or replace the shard's state; use a state directory \
                 of your own, or run as its owner, or give it to this user (chown -R {euid} {})",
                path.display()
            ),
        });
    }
    #[allow(clippy::unnecessary_cast)]
    let mode = st.st_mode as u32 & 0o7777;
    if mode & 0o022 != 0 {
        let fix = if is_dir { "700" } else { "600" };
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "the {what} is writable by group or others (mode {mode:04o}), so another user \
                 could delete or replace the shard's state; run: chmod {fix} {}",
                path.display()
            ),
        });
    }
    Ok(())
}

/// Opens `name` in the directory without following a symbolic link and
/// without blocking (a FIFO must not hang the caller): `None` if it does
/// not exist.
fn open_in(dir_fd: &OwnedFd, path: &Path, name: &str, flags: OFlags) -> Result<Option<File>> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    match rfs::openat(dir_fd, name, flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => Ok(Some(File::from(fd))),
        Err(Errno::NOENT) => Ok(None),
        Err(Errno::LOOP) => Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "it is a symbolic link, and idutil follows none in the state directory; \
                 remove it (rm {})",
                path.display()
            ),
        }),
        Err(e) => Err(Error::io("open", path, e.into())),
    }
}

/// Checks an opened file: a regular file of ours, not writable by others,
/// no larger than [`MAX_FILE_SIZE`].
fn check_file(file: &File, path: &Path) -> Result<rfs::Stat> {
    let st = rfs::fstat(file).map_err(|e| Error::io("examine", path, e.into()))?;
    if rfs::FileType::from_raw_mode(st.st_mode) != rfs::FileType::RegularFile {
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "it is not a regular file (a FIFO, device, socket or directory), and idutil \
                 reads and writes only regular files; remove it (rm {})",
                path.display()
            ),
        });
    }
    check_owner_and_mode(path, &st, false)?;
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > MAX_FILE_SIZE {
        return Err(too_large(path));
    }
    Ok(st)
}

fn too_large(path: &Path) -> Error {
    Error::Untrusted {
        path: path.to_path_buf(),
        reason: format!(
            "it is larger than {} KiB, far more than idutil ever writes; move it away",
            MAX_FILE_SIZE / 1024
        ),
    }
}

/// Reads at most [`MAX_FILE_SIZE`] bytes; a longer file is refused.
fn read_capped(file: &mut File, path: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    (&mut *file)
        .take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(too_large(path));
    }
    Ok(bytes)
}

/// Takes the exclusive lock without blocking. `inspect` holds a shared lock
/// for an instant to see whether a generator runs, so a contended lock is
/// retried for a few milliseconds before it counts as held.
fn try_lock_exclusive(file: &File) -> io::Result<()> {
    let mut attempts = 0;
    loop {
        match fs2::FileExt::try_lock_exclusive(file) {
            Err(e) if e.kind() == fs2::lock_contended_error().kind() && attempts < 10 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            result => return result,
        }
    }
}

/// Removes temporary files left by writers of this shard that were killed
/// between creating and renaming them. Only the lock holder calls this, so
/// none of them is in use.
fn remove_stale_temporaries(dir_fd: &OwnedFd, shard: u32) {
    let prefix = format!(".shard-{shard}.");
    let Ok(entries) = rfs::Dir::read_from(dir_fd) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".tmp") {
            let _ = rfs::unlinkat(dir_fd, entry.file_name(), AtFlags::empty());
        }
    }
}

/// The lock file's contents: the holder's pid, and whether the shard ever
/// had a state file in this directory (a line `state`).
fn read_lock_file(file: &File) -> (Option<u32>, bool) {
    let mut bytes = vec![0; 256];
    let n = file.read_at(&mut bytes, 0).unwrap_or(0);
    let text = String::from_utf8_lossy(&bytes[..n]);
    let mut lines = text.lines().map(str::trim);
    let pid = lines.next().and_then(|l| l.parse().ok());
    (pid, lines.any(|l| l == "state"))
}

fn write_lock_file(file: &File, had_state: bool) -> io::Result<()> {
    let mut text = format!("{}\n", std::process::id());
    if had_state {
        text.push_str("state\n");
    }
    file.write_all_at(text.as_bytes(), 0)?;
    file.set_len(text.len() as u64)
}

fn load_at(dir_fd: &OwnedFd, path: &Path, shard: u32) -> Result<Option<StateFile>> {
    let name = state_name(shard);
    let Some(mut file) = open_in(dir_fd, path, &name, OFlags::RDONLY)? else {
        return Ok(None);
    };
    check_file(&file, path)?;
    let bytes = read_capped(&mut file, path)?;
    let bad = |reason: String| Error::BadState {
        path: path.to_path_buf(),
        shard,
        reason,
    };
    let text = String::from_utf8(bytes).map_err(|_| bad("not text".into()))?;
    let state = StateFile::parse(&text).map_err(bad)?;
    if state.shard != shard {
        return Err(bad(format!("it is for shard {}", state.shard)));
    }
    Ok(Some(state))
}

/// Checks a loaded state file against the layout a generator uses.
pub(crate) fn check_layout(path: &Path, state: &StateFile, layout: &Layout) -> Result<()> {
    if state.layout != *layout {
        return Err(Error::BadState {
            path: path.to_path_buf(),
            shard: state.shard,
            reason: format!(
                "it was written for layout {}, not {}",
                state.layout.fingerprint(),
                layout.fingerprint()
            ),
        });
    }
    Ok(())
}

/// What `idutil state` shows: the state file as it is on disk, read without
/// taking the lock, and who holds the lock.
#[derive(Clone, Debug)]
pub struct StateReport {
    /// The state file's path.
    pub path: PathBuf,
    /// The shard.
    pub shard: u32,
    /// The file's contents; `None` if there is no state file yet.
    pub state: Option<StateFile>,
    /// The pid of the live generator holding the shard, if one does.
    pub holder: Option<u32>,
    /// Whether some process holds the lock (the pid may be unreadable).
    pub locked: bool,
}

/// Reads a shard's state and lock without disturbing a running generator.
///
/// Nothing is created, no symbolic link is followed, and a FIFO or device
/// in place of a file is refused at once rather than waited on.
///
/// # Errors
///
/// [`Error::BadState`] if the file cannot be trusted (or is missing
/// although the shard had one), [`Error::Untrusted`] if the directory or a
/// file fails the checks described in the crate docs (*Security*),
/// [`Error::Io`] if it cannot be read.
pub fn inspect(dir: &Path, shard: u32) -> Result<StateReport> {
    let path = state_path(dir, shard);
    let Some(dir_fd) = open_dir(dir, false)? else {
        return Ok(StateReport {
            path,
            shard,
            state: None,
            holder: None,
            locked: false,
        });
    };
    let lock_path = lock_path(dir, shard);
    let (locked, holder, had_state) =
        match open_in(&dir_fd, &lock_path, &lock_name(shard), OFlags::RDONLY)? {
            Some(f) => {
                check_file(&f, &lock_path)?;
                let (pid, had_state) = read_lock_file(&f);
                match fs2::FileExt::try_lock_shared(&f) {
                    Ok(()) => {
                        let _ = fs2::FileExt::unlock(&f);
                        (false, None, had_state)
                    }
                    Err(_) => (true, pid, had_state),
                }
            }
            None => (false, None, false),
        };
    let state = load_at(&dir_fd, &path, shard)?;
    if state.is_none() && had_state {
        return Err(missing_state(&path, shard));
    }
    Ok(StateReport {
        path,
        shard,
        state,
        holder,
        locked,
    })
}

/// What [`recover`] did.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// The state file written.
    pub path: PathBuf,
    /// The second after which the shard resumes issuing (Unix seconds).
    pub resume_after: u64,
    /// The clock id written.
    pub clock_id: u64,
    /// Why the file was replaced: what was wrong with the old one, or that
    /// there was none.
    pub previous: String,
}

/// Restarts a shard's state conservatively, for when the state file is
/// damaged or was written for another layout.
///
/// The new state resumes after the latest second anything could imply: every
/// plausible Unix second still legible in the old file, the old file's
/// modification time plus `window` seconds of reservation, the current wall
/// clock, and `after` if given (use it when the old file is gone and the
/// shard may have borrowed further ahead than that). The clock id is bumped.
/// The old file, if any, is kept beside the new one as `shard-N.state.bad`.
///
/// # Errors
///
/// [`Error::Locked`] if a generator holds the shard; [`Error::Io`] if the
/// directory cannot be written.
pub fn recover(
    dir: &Path,
    shard: u32,
    layout: &Layout,
    window: u64,
    after: Option<u64>,
) -> Result<Recovery> {
    let store = Store::open(dir, shard)?;
    let path = store.path().to_path_buf();
    let now = wall_now();
    let mut resume_after = now.max(after.unwrap_or(0));
    let mut clock_id = 0;
    let previous = match store.read_raw()? {
        None => "there was no state file".to_string(),
        Some((bytes, mtime)) => {
            let text = String::from_utf8_lossy(&bytes);
            let plausible = layout.epoch()..=layout.last_unix_second();
            for word in text.split(|c: char| !c.is_ascii_digit()) {
                if let Ok(n) = word.parse::<u64>() {
                    if plausible.contains(&n) {
                        resume_after = resume_after.max(n);
                    }
                }
            }
            if let Some(mtime) = mtime {
                resume_after = resume_after.max(mtime + window);
            }
            let reason = match StateFile::parse(&text) {
                Ok(old) => {
                    clock_id = old.clock_id;
                    if old.layout == *layout {
                        "the old file was readable".to_string()
                    } else {
                        format!("the old file was for layout {}", old.layout.fingerprint())
                    }
                }
                Err(reason) => {
                    let legible = text
                        .lines()
                        .find_map(|l| l.trim().strip_prefix("clock_id"))
                        .and_then(|v| v.trim().trim_start_matches('=').trim().parse().ok());
                    clock_id = legible.unwrap_or(0);
                    format!("the old file was damaged ({reason})")
                }
            };
            store.keep_bad(&bytes)?;
            reason
        }
    };
    let resume_after = resume_after.min(layout.last_unix_second());
    let clock_id = clock_id + 1;
    let state = StateFile {
        layout: *layout,
        shard,
        clock_id,
        seen_max: now,
        seen_last_run: now,
        high_water: (0..layout.clock_values())
            .map(|c| (c, resume_after))
            .collect(),
        last: None,
    };
    store.save(&state)?;
    Ok(Recovery {
        path,
        resume_after,
        clock_id,
        previous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StateFile {
        StateFile {
            layout: Layout::DEFAULT,
            shard: 7,
            clock_id: 3,
            seen_max: 1_763_751_234,
            seen_last_run: 1_763_751_200,
            high_water: [(0, 1_763_751_239)].into_iter().collect(),
            last: Some((1_763_751_236, 17)),
        }
    }

    #[test]
    fn round_trips() {
        let s = sample();
        assert_eq!(StateFile::parse(&s.render()).unwrap(), s);
        let s = StateFile { last: None, ..s };
        assert_eq!(StateFile::parse(&s.render()).unwrap(), s);
    }

    #[test]
    fn rejects_damage() {
        let good = sample().render();
        let truncated = &good[..good.len() - 4];
        let cases = [
            ("", "empty"),
            ("garbage", "malformed"),
            (truncated, "truncated"),
            (
                &good.replace("version = 1", "version = 2"),
                "unknown version",
            ),
            (&good.replace("clock_id = 3", "clock_id = x"), "clock_id"),
            (
                &good.replace("clock_id = 3", "clock_id = 3\nclock_id = 4"),
                "twice",
            ),
            (&good.replace("end", "end\nshard = 1"), "after the end"),
            (&good.replace("seen_max", "seen_maxx"), "seen_max"),
            (&good.replace("0:1763751239", "0;1763751239"), "high_water"),
            (&good.replace("0:1763751239", "1:1763751239"), "clock value"),
        ];
        for (text, want) in cases {
            let err = StateFile::parse(text).unwrap_err();
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn taking_the_lock_removes_stale_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".shard-3.abc123.tmp");
        let other_shard = dir.path().join(".shard-31.abc123.tmp");
        fs::write(&stale, "half a state").unwrap();
        fs::write(&other_shard, "someone else's").unwrap();
        let store = Store::open(dir.path(), 3).unwrap();
        assert!(!stale.exists());
        assert!(other_shard.exists());
        store.save(&sample_for(3)).unwrap();
        assert_eq!(store.load().unwrap(), Some(sample_for(3)));
    }

    fn sample_for(shard: u32) -> StateFile {
        StateFile { shard, ..sample() }
    }

    #[test]
    fn dir_precedence() {
        let explicit = Path::new("/x/y");
        assert_eq!(state_dir(Some(explicit)).unwrap(), explicit);
    }
}
