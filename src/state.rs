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
//! version = 2
//! layout = seconds:32 clock:0 sequence:16 shard:5 epoch:946684800
//! shard = 7
//! clock_id = 0
//! seen_max = 1763751234
//! seen_last_run = 1763751234
//! high_water = 0:1763751239
//! last = 1763751236 17
//! checksum = 5d1c0e0a
//! end
//! ```
//!
//! `high_water` lists, per clock value, the highest second an ID may have
//! been issued in; `last` (present only after a clean close) is the exact
//! last second and sequence issued. `checksum` is the CRC-32 of every byte
//! before its line, so a changed digit that leaves the values plausible is
//! still caught. `end` marks a complete file. Version 1 files (the same
//! fields, no checksum) are still read.
//!
//! Every value is checked when the file is read, and a file that breaks any
//! rule is refused ([`Error::BadState`]), never repaired: every second lies
//! within the layout's range (its epoch to its last second); `high_water`
//! lists each clock value at most once and has a mark for the current one
//! (`clock_id` modulo the clock values), at or above `seen_last_run` and
//! `last`'s second; `seen_last_run` is at most `seen_max`, which is at most
//! the highest mark; `last`'s sequence fits the layout; `clock_id` can
//! still be bumped. Reasons name lines and fields, never the file's text.
//!
//! A file that cannot be trusted is restarted with [`recover`] (the command
//! `idutil state recover`), which resumes after everything the old file
//! still says for certain, and refuses when it cannot know. In a version 2
//! file whose checksum fails nothing is certain (the changed byte may be a
//! digit of the mark); in a version 1 file, a legible mark is certain only
//! if no legible second of the file lies above it.

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
pub const STATE_VERSION: u32 = 2;

/// The oldest state file format this crate still reads: version 1, the same
/// fields without a checksum.
const OLDEST_VERSION: u32 = 1;

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

/// `dir` as an absolute path without `.` components or trailing slashes
/// (`/state/link/.` and `/state/link/` would let a symbolic link pass for
/// the directory itself) and without `..` (which may climb out of where a
/// link points).
fn cleaned(dir: &Path) -> Result<PathBuf> {
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

/// Refuses a state directory that someone else could move or replace:
/// every directory above it must belong to this user or to root, and be
/// writable by no one else unless its sticky bit is set (as `/tmp`'s is).
fn check_ancestors(dir: &Path) -> Result<()> {
    let euid = rustix::process::geteuid().as_raw();
    for parent in dir.ancestors().skip(1) {
        let meta = fs::metadata(parent).map_err(|e| Error::io("examine", parent, e))?;
        let mode = meta.mode() & 0o7777;
        let owner_ok = meta.uid() == euid || meta.uid() == 0;
        let shared = mode & 0o022 != 0 && mode & 0o1000 == 0;
        if !owner_ok || shared {
            return Err(Error::Untrusted {
                path: dir.to_path_buf(),
                reason: format!(
                    "the directory above it, {}, belongs to uid {} with mode {mode:04o}, so \
                     another user could move the state directory away and a new one would \
                     start over; keep the state directory under directories owned by you or \
                     root and writable by no one else (or sticky, like /tmp)",
                    parent.display(),
                    meta.uid()
                ),
            });
        }
    }
    Ok(())
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
        let checksum = crc32fast::hash(out.as_bytes());
        out.push_str(&format!("checksum = {checksum:08x}\nend\n"));
        out
    }

    /// Parses a state file's text and checks every value against the
    /// file's own layout ([`StateFile::check`]). The error is the reason,
    /// for [`Error::BadState`]. It names lines and fields but never quotes
    /// the text: the file may not be a state file at all (a link to a
    /// secret, say), and error messages end up in logs.
    fn parse(text: &str) -> std::result::Result<StateFile, String> {
        let mut fields: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
        let mut ended = false;
        let mut summed = None;
        let mut at = 0;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            let (n, start) = (i + 1, at);
            at += line.len();
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if ended {
                return Err(format!("line {n} comes after the end marker"));
            }
            if line == "end" {
                ended = true;
                continue;
            }
            if summed.is_some() {
                return Err(format!("line {n} comes after the checksum"));
            }
            if line
                .split_once('=')
                .is_some_and(|(k, _)| k.trim() == "checksum")
            {
                summed = Some(&text[..start]);
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(format!("line {n} is malformed"));
            };
            let Some(&key) = FIELDS.iter().find(|f| **f == key.trim()) else {
                return Err(format!("line {n} has an unknown field"));
            };
            if fields.insert(key, (n, value.trim())).is_some() {
                return Err(format!("{key} appears twice (again on line {n})"));
            }
        }
        if fields.is_empty() {
            return Err("the file is empty".into());
        }
        let (n, version) = fields.remove("version").ok_or("no version line")?;
        let version = match version.parse::<u32>() {
            Ok(v)
                if (OLDEST_VERSION..=STATE_VERSION).contains(&v)
                    && version.bytes().all(|b| b.is_ascii_digit()) =>
            {
                v
            }
            _ => {
                return Err(format!(
                    "line {n} holds an unknown version (this idutil reads versions \
                     {OLDEST_VERSION} to {STATE_VERSION})"
                ))
            }
        };
        if !ended {
            return Err("truncated: no end marker".into());
        }
        let checksum = fields.remove("checksum");
        match (version, checksum) {
            (1, Some((n, _))) => return Err(format!("line {n} has an unknown field")),
            (1, None) => {}
            (_, None) => return Err("no checksum line".into()),
            (_, Some(_)) => {}
        }
        let mut take = |key: &str| fields.remove(key).ok_or(format!("no {key} line"));
        let layout = parse_layout(take("layout")?)?;
        let shard = number(take("shard")?, "shard")?;
        let clock_id = number(take("clock_id")?, "clock_id")?;
        let seen_max = number(take("seen_max")?, "seen_max")?;
        let seen_last_run = number(take("seen_last_run")?, "seen_last_run")?;
        let high_water = parse_marks(take("high_water")?, &layout)?;
        let last = match fields.remove("last") {
            None => None,
            Some((n, v)) => {
                let mut words = v.split_whitespace();
                let (Some(sec), Some(seq), None) = (words.next(), words.next(), words.next())
                else {
                    return Err(format!("last (line {n}) is malformed"));
                };
                Some((
                    number((n, sec), "last second")?,
                    number((n, seq), "last sequence")?,
                ))
            }
        };
        let state = StateFile {
            layout,
            shard,
            clock_id,
            seen_max,
            seen_last_run,
            high_water,
            last,
        };
        state.check()?;
        // Last, so a field that is wrong in itself is named. Version 1
        // files have none and are checked field by field only.
        if let (Some((n, value)), Some(summed)) = (checksum, summed) {
            if value != format!("{:08x}", crc32fast::hash(summed.as_bytes())) {
                return Err(format!(
                    "the checksum (line {n}) does not match the contents: the file was damaged \
                     or edited"
                ));
            }
        }
        Ok(state)
    }

    /// Checks the values against the file's layout and against each other,
    /// so that nothing read from a file can make a generator resume early or
    /// make its arithmetic overflow:
    ///
    /// - every second (`seen_max`, `seen_last_run`, each high-water mark,
    ///   `last`'s second) lies within the layout's range, from its epoch to
    ///   its last second; `last`'s sequence and the shard fit the layout;
    /// - `high_water` has a mark for the current clock value, and that mark
    ///   is at or above `seen_last_run` and `last`'s second;
    /// - `seen_last_run` is at most `seen_max`, and the highest mark is at
    ///   or above `seen_max`;
    /// - `clock_id` can still be bumped through every clock value.
    ///
    /// Repeated or out-of-range clock values in `high_water` are refused
    /// when parsing.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        let layout = &self.layout;
        let in_range = |what: &str, second: u64| {
            if (layout.epoch()..=layout.last_unix_second()).contains(&second) {
                Ok(())
            } else {
                Err(format!("{what} is outside the layout's range of seconds"))
            }
        };
        if self.shard > layout.max_shard() {
            return Err("the shard does not fit the layout".into());
        }
        if self
            .clock_id
            .checked_add(u64::from(layout.clock_values()))
            .is_none()
        {
            return Err("clock_id is too large to be bumped".into());
        }
        in_range("seen_max", self.seen_max)?;
        in_range("seen_last_run", self.seen_last_run)?;
        if self.seen_last_run > self.seen_max {
            return Err("seen_last_run is above seen_max".into());
        }
        for (&value, &mark) in &self.high_water {
            if value >= layout.clock_values() {
                return Err("a high_water clock value does not fit the layout".into());
            }
            in_range(&format!("the high_water mark of clock value {value}"), mark)?;
        }
        let value = self.clock_value();
        let Some(&current) = self.high_water.get(&value) else {
            return Err(format!(
                "high_water has no mark for the current clock value {value}"
            ));
        };
        if current < self.seen_last_run {
            return Err(format!(
                "the high_water mark of clock value {value} is below seen_last_run"
            ));
        }
        if let Some((second, sequence)) = self.last {
            in_range("the last issued second", second)?;
            if sequence > layout.max_sequence() {
                return Err("the last issued sequence does not fit the layout".into());
            }
            if current < second {
                return Err(format!(
                    "the high_water mark of clock value {value} is below the last issued second"
                ));
            }
        }
        if self.high_water.values().all(|&mark| mark < self.seen_max) {
            return Err("every high_water mark is below seen_max".into());
        }
        Ok(())
    }
}

/// The fields of a state file, in the order they are written.
const FIELDS: [&str; 9] = [
    "checksum",
    "version",
    "layout",
    "shard",
    "clock_id",
    "seen_max",
    "seen_last_run",
    "high_water",
    "last",
];

/// A field's line number and value.
type Field<'a> = (usize, &'a str);

fn number<T: std::str::FromStr>(
    (line, text): Field<'_>,
    what: &str,
) -> std::result::Result<T, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} (line {line}) is not a number"));
    }
    text.parse()
        .map_err(|_| format!("{what} (line {line}) is out of range"))
}

/// `high_water = 0:1763751239 1:1763700000`: at least one mark, no clock
/// value twice, every clock value within the layout's.
fn parse_marks(
    (line, text): Field<'_>,
    layout: &Layout,
) -> std::result::Result<BTreeMap<u32, u64>, String> {
    let mut marks = BTreeMap::new();
    for mark in text.split_whitespace() {
        let (value, second) = mark
            .split_once(':')
            .ok_or_else(|| format!("high_water (line {line}) is malformed"))?;
        let value: u32 = number((line, value), "a high_water clock value")?;
        if value >= layout.clock_values() {
            return Err(format!(
                "a high_water clock value (line {line}) does not fit the layout"
            ));
        }
        let second = number((line, second), "a high_water second")?;
        if marks.insert(value, second).is_some() {
            return Err(format!(
                "high_water (line {line}) lists clock value {value} twice"
            ));
        }
    }
    if marks.is_empty() {
        return Err(format!("high_water (line {line}) is empty"));
    }
    Ok(marks)
}

fn parse_layout((line, text): Field<'_>) -> std::result::Result<Layout, String> {
    let malformed = || format!("layout (line {line}) is malformed");
    let mut widths = [None; 5];
    let names = ["seconds", "clock", "sequence", "shard", "epoch"];
    for part in text.split_whitespace() {
        let (name, value) = part.split_once(':').ok_or_else(malformed)?;
        let i = names
            .iter()
            .position(|n| *n == name)
            .ok_or_else(malformed)?;
        if widths[i].is_some() {
            return Err(malformed());
        }
        widths[i] = Some(number::<u64>((line, value), "a layout field")?);
    }
    let [Some(sec), Some(clk), Some(seq), Some(sh), Some(epoch)] = widths else {
        return Err(format!("layout (line {line}) is incomplete"));
    };
    let narrow = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    Layout::new(narrow(sec), narrow(clk), narrow(seq), narrow(sh), epoch)
        .map_err(|e| format!("layout (line {line}) is invalid: {e}"))
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
        let dir = &cleaned(dir)?;
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
    let dir = &cleaned(dir)?;
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
    check_ancestors(dir)?;
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
    if st.st_nlink != 1 {
        // Writing it would write every other name it has.
        return Err(Error::Untrusted {
            path: path.to_path_buf(),
            reason: format!(
                "it has {} names (hard links), and idutil writes only files of its own; \
                 remove it (rm {})",
                st.st_nlink,
                path.display()
            ),
        });
    }
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
    parse_state(&bytes, path, shard).map(Some)
}

/// A state file's bytes as a state for `shard`, or why it cannot be
/// trusted.
fn parse_state(bytes: &[u8], path: &Path, shard: u32) -> Result<StateFile> {
    let bad = |reason: String| Error::BadState {
        path: path.to_path_buf(),
        shard,
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not text".into()))?;
    let state = StateFile::parse(text).map_err(bad)?;
    if state.shard != shard {
        return Err(bad(format!("it is for shard {}", state.shard)));
    }
    Ok(state)
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
    let peek = peek(dir, shard)?;
    let state = match peek.state {
        Some(bytes) => Some(parse_state(&bytes, &path, shard)?),
        None if peek.had_state => return Err(missing_state(&path, shard)),
        None => None,
    };
    Ok(StateReport {
        path,
        shard,
        state,
        holder: peek.holder.flatten(),
        locked: peek.holder.is_some(),
    })
}

/// A shard's files as seen from outside, without taking its lock or
/// changing anything: through the same checks as a generator's reads (no
/// symbolic links, regular files only, a size cap).
struct Peek {
    /// `Some` while a generator holds the lock, with its pid if legible.
    holder: Option<Option<u32>>,
    /// Whether the lock file says the shard has had a state file.
    had_state: bool,
    /// The state file's bytes, if there is one.
    state: Option<Vec<u8>>,
}

fn peek(dir: &Path, shard: u32) -> Result<Peek> {
    let Some(dir_fd) = open_dir(dir, false)? else {
        return Ok(Peek {
            holder: None,
            had_state: false,
            state: None,
        });
    };
    let lock_path = lock_path(dir, shard);
    let (holder, had_state) = match open_in(&dir_fd, &lock_path, &lock_name(shard), OFlags::RDONLY)?
    {
        Some(f) => {
            check_file(&f, &lock_path)?;
            let (pid, had_state) = read_lock_file(&f);
            match fs2::FileExt::try_lock_shared(&f) {
                Ok(()) => {
                    let _ = fs2::FileExt::unlock(&f);
                    (None, had_state)
                }
                Err(_) => (Some(pid), had_state),
            }
        }
        None => (None, false),
    };
    let path = state_path(dir, shard);
    let state = match open_in(&dir_fd, &path, &state_name(shard), OFlags::RDONLY)? {
        Some(mut file) => {
            check_file(&file, &path)?;
            Some(read_capped(&mut file, &path)?)
        }
        None => None,
    };
    Ok(Peek {
        holder,
        had_state,
        state,
    })
}

/// What [`plan_recovery`] found where the state file should be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OldState {
    /// There is no state file.
    Missing,
    /// A state file a generator can use as it is (replaced only when
    /// forced, [`RecoverOptions::force`]).
    Healthy,
    /// A sound state file written for another layout.
    OtherLayout(Layout),
    /// A state file that cannot be trusted as a whole.
    Damaged {
        /// What is wrong with it (never a quote of its contents).
        reason: String,
    },
}

impl std::fmt::Display for OldState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OldState::Missing => write!(f, "there is no state file"),
            OldState::Healthy => write!(f, "the state file is healthy"),
            OldState::OtherLayout(layout) => write!(
                f,
                "the state file was written for layout {}",
                layout.fingerprint()
            ),
            OldState::Damaged { reason } => write!(f, "the state file is damaged: {reason}"),
        }
    }
}

/// Settings for [`plan_recovery`] and [`recover`].
///
/// ```
/// use idutil::state::RecoverOptions;
///
/// // No ID of the shard is later than 2030-01-01T00:00:00Z.
/// let options = RecoverOptions::new().after(1_893_456_000);
/// # let _ = options;
/// ```
#[derive(Clone, Debug)]
pub struct RecoverOptions {
    after: Option<u64>,
    force: bool,
    window: u64,
}

impl Default for RecoverOptions {
    fn default() -> Self {
        RecoverOptions::new()
    }
}

impl RecoverOptions {
    /// No vouched-for time, no forcing, the default reservation window.
    pub fn new() -> Self {
        RecoverOptions {
            after: None,
            force: false,
            window: crate::generator::DEFAULT_WINDOW,
        }
    }

    /// A time (Unix seconds) that you vouch for: no ID of the shard carries
    /// a later second. Needed when the old high-water mark cannot be read
    /// with certainty, or there is no state file; otherwise it only moves
    /// the resumption later.
    pub fn after(mut self, unix_second: u64) -> Self {
        self.after = Some(unix_second);
        self
    }

    /// Replaces even a healthy state file.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// The reservation window added past the latest known second, in
    /// seconds (default: the generator's default window).
    pub fn window(mut self, seconds: u64) -> Self {
        self.window = seconds;
        self
    }
}

/// A recovery worked out by [`plan_recovery`]: what was found, where the
/// shard will resume, and why. [`Recovery::apply`] carries it out.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// The state file.
    pub path: PathBuf,
    /// The shard.
    pub shard: u32,
    /// What was found.
    pub found: OldState,
    /// The latest second (Unix seconds) that anything accounts for: the old
    /// file's legible fields, the wall clock, the vouched-for time.
    pub latest: u64,
    /// Where [`latest`](Recovery::latest) comes from, e.g. `"the high-water
    /// mark"` or `"the wall clock"`.
    pub latest_from: &'static str,
    /// The reservation window added to it, in seconds.
    pub window: u64,
    /// The second after which the shard resumes issuing (Unix seconds):
    /// `latest + window`. Every clock value's high-water mark is set to it.
    pub resume_after: u64,
    /// The clock id written: the old one (where legible, else 0) plus one.
    pub clock_id: u64,
    /// Where the old file is kept (`shard-N.state.bad`), if there is one.
    pub kept_as: Option<PathBuf>,
    dir: PathBuf,
    old: Option<Vec<u8>>,
    new_state: StateFile,
}

impl Recovery {
    /// The state file [`apply`](Recovery::apply) writes.
    pub fn new_state(&self) -> &StateFile {
        &self.new_state
    }

    /// Takes the shard's lock, checks that the state file is still exactly
    /// what the plan was made from, keeps the old file as
    /// `shard-N.state.bad` (replacing whatever is at that path, never
    /// writing through it) and writes the new state.
    ///
    /// # Errors
    ///
    /// [`Error::Locked`] if a generator holds the shard;
    /// [`Error::RecoveryRefused`] if the state file changed since the plan
    /// was made; [`Error::Io`] if the directory cannot be written.
    pub fn apply(&self) -> Result<()> {
        let store = Store::open(&self.dir, self.shard)?;
        if store.read_raw()?.map(|(bytes, _)| bytes) != self.old {
            return Err(Error::RecoveryRefused {
                path: self.path.clone(),
                shard: self.shard,
                reason: "the state file changed since the recovery was worked out; \
                         run the recovery again"
                    .into(),
            });
        }
        if let Some(bytes) = &self.old {
            store.keep_bad(bytes)?;
        }
        store.save(&self.new_state)
    }
}

/// Works out how to restart a shard's state conservatively, for when the
/// state file is damaged, written for another layout, or lost. Reads the
/// state file without taking the lock and changes nothing; see
/// [`Recovery::apply`], or [`recover`] for both steps at once.
///
/// The shard resumes after the latest second anything can justify, plus
/// the reservation window: every high-water mark, the last issued second
/// and the seen seconds that are still legible, the wall clock, and the
/// time vouched for with [`RecoverOptions::after`]. The clock id is bumped.
///
/// It never guesses. When the old high-water mark cannot be read with
/// certainty (no state file, a zero-length or truncated one, a missing,
/// garbled, empty or out-of-range `high_water` line, an unknown version,
/// a file for another shard), it refuses unless a time is vouched for.
///
/// # Errors
///
/// [`Error::Locked`] if a generator holds the shard;
/// [`Error::RecoveryRefused`] when the old high-water mark cannot be read
/// with certainty and no time is vouched for, when the state file is
/// healthy and the recovery is not forced, when the vouched-for time is past
/// the layout's last second, or when resuming would leave no second of the
/// layout; [`Error::Io`] if the state file cannot be read.
pub fn plan_recovery(
    dir: &Path,
    shard: u32,
    layout: &Layout,
    options: &RecoverOptions,
) -> Result<Recovery> {
    let peek = peek(dir, shard)?;
    if let Some(pid) = peek.holder {
        return Err(Error::Locked {
            shard,
            dir: dir.to_path_buf(),
            pid,
        });
    }
    plan_recovery_from(dir, shard, layout, options, peek.state, wall_now())
}

/// Restarts a shard's state conservatively: [`plan_recovery`], then
/// [`Recovery::apply`]. Returns what was done.
///
/// # Errors
///
/// As [`plan_recovery`] and [`Recovery::apply`].
pub fn recover(
    dir: &Path,
    shard: u32,
    layout: &Layout,
    options: &RecoverOptions,
) -> Result<Recovery> {
    let recovery = plan_recovery(dir, shard, layout, options)?;
    recovery.apply()?;
    Ok(recovery)
}

/// The recovery decision, given the old file's bytes and the clock.
fn plan_recovery_from(
    dir: &Path,
    shard: u32,
    layout: &Layout,
    options: &RecoverOptions,
    old: Option<Vec<u8>>,
    now: u64,
) -> Result<Recovery> {
    let path = state_path(dir, shard);
    let refuse = |reason: String| Error::RecoveryRefused {
        path: path.clone(),
        shard,
        reason,
    };
    let vouch = format!(
        "if you know a time no ID of shard {shard} is later than, recover with it: \
         idutil state recover --shard {shard} --state-dir {} --after TIME",
        dir.display()
    );
    let last_second = layout.last_unix_second();
    if options.after.is_some_and(|after| after > last_second) {
        return Err(refuse(format!(
            "the time vouched for is past the layout's last second ({last_second} s after the \
             Unix epoch): no ID can be issued after it"
        )));
    }
    let mut evidence: Vec<(&'static str, u64)> = vec![("the wall clock", now)];
    if let Some(after) = options.after {
        evidence.push(("the time vouched for", after));
    }
    let mut old_clock_id = None;
    let found = match &old {
        None => {
            if options.after.is_none() {
                return Err(refuse(format!(
                    "there is no state file, so nothing says how far the shard has issued; {vouch}"
                )));
            }
            OldState::Missing
        }
        Some(bytes) => {
            let parsed = std::str::from_utf8(bytes)
                .map_err(|_| "it is not text".to_string())
                .and_then(StateFile::parse);
            // A sound file for another shard says nothing about this one.
            let foreign = parsed
                .as_ref()
                .ok()
                .map(|s| s.shard)
                .filter(|&s| s != shard);
            let whole = match (parsed, foreign) {
                (_, Some(other)) => Err(format!("it is for shard {other}")),
                (parsed, None) => parsed,
            };
            match whole {
                Ok(s) => {
                    evidence.extend(s.high_water.values().map(|&m| ("the high-water mark", m)));
                    evidence.extend(s.last.map(|(sec, _)| ("the last issued ID", sec)));
                    evidence.push(("the highest wall clock seen", s.seen_max));
                    evidence.push(("the wall clock of the last run", s.seen_last_run));
                    old_clock_id = Some(s.clock_id);
                    if s.layout != *layout {
                        OldState::OtherLayout(s.layout)
                    } else if options.force {
                        OldState::Healthy
                    } else {
                        return Err(refuse(
                            "the state file is healthy: a generator resumes after everything it \
                             records by itself; to replace it anyway, force the recovery \
                             (--force)"
                                .into(),
                        ));
                    }
                }
                Err(reason) => {
                    let mut legible = Salvage::read(&String::from_utf8_lossy(bytes), layout);
                    if foreign.is_some() {
                        legible.marks = Err("its marks are another shard's".into());
                    }
                    match legible.marks {
                        Ok(marks) => {
                            evidence.extend(marks.into_iter().map(|m| ("the high-water mark", m)))
                        }
                        Err(why) if options.after.is_none() => {
                            return Err(refuse(format!(
                                "the state file is damaged ({reason}) and its high-water mark \
                                 cannot be read with certainty ({why}); {vouch}"
                            )))
                        }
                        Err(_) => {}
                    }
                    evidence.extend(legible.seconds);
                    old_clock_id = legible.clock_id;
                    OldState::Damaged { reason }
                }
            }
        }
    };
    // Ties go to the first: the wall clock, then the vouched-for time, then
    // the file's fields.
    let (latest_from, latest) = evidence
        .iter()
        .copied()
        .reduce(|best, e| if e.1 > best.1 { e } else { best })
        .unwrap_or(("the wall clock", now));
    let resume_after = latest
        .checked_add(options.window)
        .filter(|&r| r < last_second)
        .ok_or_else(|| {
            refuse(format!(
                "resuming after {latest} ({latest_from}) plus the {} s window would leave no \
                 second of the layout, whose last is {last_second} s after the Unix epoch",
                options.window
            ))
        })?;
    // Every clock value resumes after the same second, so any clock id is
    // safe; one that cannot be bumped further starts again from 1.
    let clock_id = old_clock_id
        .unwrap_or(0)
        .checked_add(1)
        .filter(|id| id.checked_add(u64::from(layout.clock_values())).is_some())
        .unwrap_or(1);
    let seen = now.clamp(layout.epoch(), resume_after);
    let new_state = StateFile {
        layout: *layout,
        shard,
        clock_id,
        seen_max: seen,
        seen_last_run: seen,
        high_water: (0..layout.clock_values())
            .map(|c| (c, resume_after))
            .collect(),
        last: None,
    };
    new_state.check().map_err(refuse)?;
    let kept_as = old
        .is_some()
        .then(|| dir.join(format!("shard-{shard}.state.bad")));
    Ok(Recovery {
        path,
        shard,
        found,
        latest,
        latest_from,
        window: options.window,
        resume_after,
        clock_id,
        kept_as,
        dir: dir.to_path_buf(),
        old,
        new_state,
    })
}

/// What a state file that failed [`StateFile::parse`] still says for
/// certain. Only complete (newline-terminated) lines count, so a file cut
/// short in the middle of a number does not pass off the shorter number.
#[derive(Debug)]
struct Salvage {
    /// The high-water marks, or why they cannot be trusted.
    marks: std::result::Result<Vec<u64>, String>,
    /// Other legible seconds within the layout's range, as evidence.
    seconds: Vec<(&'static str, u64)>,
    clock_id: Option<u64>,
}

impl Salvage {
    fn read(text: &str, layout: &Layout) -> Salvage {
        let mut lines: Vec<&str> = text.split('\n').collect();
        lines.pop(); // empty if the text ends in a newline, else incomplete
        let values = |key: &str| -> Vec<&str> {
            lines
                .iter()
                .filter_map(|line| line.trim().split_once('='))
                .filter(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim())
                .collect()
        };
        let plausible = |v: &str| {
            let n: u64 = v.parse().ok()?;
            (layout.epoch()..=layout.last_unix_second())
                .contains(&n)
                .then_some(n)
        };
        let marks = match (
            values("version").as_slice(),
            values("high_water").as_slice(),
        ) {
            ([], _) => Err("no legible version line".to_string()),
            ([v], _) if !["1", "2"].contains(v) => Err(format!(
                "an unknown version; this idutil reads versions {OLDEST_VERSION} to \
                 {STATE_VERSION}"
            )),
            ([_], []) => Err("no complete high_water line".to_string()),
            ([_], [marks]) => Salvage::marks(marks, &plausible),
            _ => Err("a field appears twice".to_string()),
        };
        // A checksum that fails says some byte changed, and it may be one of
        // the mark's digits: nothing in the file is certain then.
        let marks = match (Salvage::checksum(text), values("version").as_slice()) {
            (Some(false), _) => {
                Err("the file's checksum does not match, so none of its fields is certain".into())
            }
            (None, ["2"]) => {
                Err("its checksum line is gone, so none of its fields is certain".into())
            }
            _ => marks,
        };
        let one = |key: &str| match values(key).as_slice() {
            [v] => Some(*v),
            _ => None,
        };
        let mut seconds = Vec::new();
        for (key, what) in [
            ("seen_max", "the highest wall clock seen"),
            ("seen_last_run", "the wall clock of the last run"),
        ] {
            seconds.extend(one(key).and_then(plausible).map(|s| (what, s)));
        }
        seconds.extend(
            one("last")
                .and_then(|v| v.split_whitespace().next())
                .and_then(plausible)
                .map(|s| ("the last issued ID", s)),
        );
        // A mark below a second the file records as seen or issued is not
        // what a generator writes: a changed digit, perhaps.
        let marks = marks.and_then(|m| {
            let highest = m.iter().copied().max().unwrap_or(0);
            match seconds.iter().find(|(_, s)| *s > highest) {
                Some((what, _)) => Err(format!(
                    "the high-water marks are below {what}, which a generator never writes"
                )),
                None => Ok(m),
            }
        });
        Salvage {
            marks,
            seconds,
            clock_id: one("clock_id").and_then(|v| v.parse().ok()),
        }
    }

    /// Whether the file's checksum line matches what comes before it;
    /// `None` if it has no complete checksum line.
    fn checksum(text: &str) -> Option<bool> {
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            let start = at;
            at += line.len();
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if key.trim() == "checksum" && line.ends_with('\n') {
                let sum = crc32fast::hash(&text.as_bytes()[..start]);
                return Some(value.trim() == format!("{sum:08x}"));
            }
        }
        None
    }

    fn marks(
        text: &str,
        plausible: &dyn Fn(&str) -> Option<u64>,
    ) -> std::result::Result<Vec<u64>, String> {
        let mut values = std::collections::BTreeSet::new();
        let mut marks = Vec::new();
        for entry in text.split_whitespace() {
            let (value, second) = entry
                .split_once(':')
                .ok_or("the high_water line is malformed")?;
            let value: u32 = value
                .parse()
                .map_err(|_| "the high_water line is malformed")?;
            if !values.insert(value) {
                return Err("the high_water line lists a clock value twice".into());
            }
            if !second.bytes().all(|b| b.is_ascii_digit()) {
                return Err("the high_water line is malformed".into());
            }
            marks.push(plausible(second).ok_or("a high_water mark is outside the layout's range")?);
        }
        if marks.is_empty() {
            return Err("the high_water line is empty".into());
        }
        Ok(marks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::DEFAULT_WINDOW;
    use crate::layout::EPOCH_2000;

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
            ("garbage", "line 1 is malformed"),
            (truncated, "truncated"),
            (
                &good.replace("version = 2", "version = 3"),
                "unknown version",
            ),
            (&good.replace("clock_id = 3", "clock_id = x"), "clock_id"),
            (
                &good.replace("clock_id = 3", "clock_id = 3\nclock_id = 4"),
                "twice",
            ),
            (&good.replace("end", "end\nshard = 1"), "after the end"),
            (&good.replace("seen_max", "seen_maxx"), "unknown field"),
            (&good.replace("0:1763751239", "0;1763751239"), "high_water"),
            (&good.replace("0:1763751239", "1:1763751239"), "clock value"),
            (
                &good.replace("last = 1763751236 17", "last = 1763751236"),
                "last",
            ),
            (
                &good.replace("epoch:946684800", "epoch:18446744073709551615"),
                "too late",
            ),
        ];
        for (text, want) in cases {
            let err = StateFile::parse(text).unwrap_err();
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    /// The sample with one field changed, rendered, parsed and checked.
    fn refused(edit: impl FnOnce(&mut StateFile)) -> String {
        let mut s = sample();
        edit(&mut s);
        StateFile::parse(&s.render()).expect_err("refused")
    }

    fn text_refused(text: &str) -> String {
        StateFile::parse(text).expect_err("refused")
    }

    const LAST: u64 = 5_241_652_095; // 2136-02-07T06:28:15Z

    #[test]
    fn every_second_lies_within_the_layout() {
        let l = Layout::DEFAULT;
        assert_eq!(l.last_unix_second(), LAST);
        for bad in [0, l.epoch() - 1, LAST + 1, 300_000_000_000, u64::MAX] {
            let all_high = |s: &mut StateFile| {
                s.high_water.insert(0, bad);
                s.seen_max = bad;
                s.seen_last_run = bad;
                s.last = Some((bad, 0));
            };
            for (what, err) in [
                ("seen_max", refused(|s| s.seen_max = bad)),
                ("seen_last_run", refused(|s| s.seen_last_run = bad)),
                (
                    "high_water",
                    refused(|s| {
                        s.high_water.insert(0, bad);
                    }),
                ),
                ("last issued second", refused(|s| s.last = Some((bad, 0)))),
                ("range", refused(all_high)),
            ] {
                assert!(err.contains(what), "{bad}: {what}: {err}");
                assert!(err.contains("range"), "{bad}: {err}");
            }
        }
        // The ends of the range themselves are fine.
        for edge in [l.epoch(), LAST] {
            let s = StateFile {
                seen_max: edge,
                seen_last_run: edge,
                high_water: [(0, edge)].into_iter().collect(),
                last: Some((edge, u32::from(u16::MAX))),
                ..sample()
            };
            assert_eq!(StateFile::parse(&s.render()).unwrap(), s);
        }
    }

    #[test]
    fn the_mark_must_not_wrap_or_be_empty_or_zero() {
        let good = sample().render();
        for (mark, want) in [
            ("0:18446744073709551615", "range"),
            ("0:18446744073709551616", "out of range"),
            ("", "empty"),
            ("0:0", "range"),
            ("0:", "not a number"),
            (":1763751239", "not a number"),
            ("0:-5", "not a number"),
            ("0:1763751239 0:1000000000", "twice"),
            ("0:1000000000 0:1763751239", "twice"),
        ] {
            let text = good.replace("high_water = 0:1763751239", &format!("high_water = {mark}"));
            let err = text_refused(&text);
            assert!(err.contains(want), "{mark:?}: {err}");
        }
    }

    #[test]
    fn the_current_mark_covers_the_last_run_and_the_last_id() {
        let err = refused(|s| s.last = Some((1_763_751_240, 0)));
        assert!(err.contains("below the last issued second"), "{err}");
        let err = refused(|s| s.last = Some((0, 0)));
        assert!(err.contains("range"), "{err}");
        let err = refused(|s| {
            s.seen_max = 1_763_751_300;
            s.seen_last_run = 1_763_751_240;
        });
        assert!(err.contains("below seen_last_run"), "{err}");
        let err = refused(|s| s.seen_max = 1_763_751_240);
        assert!(err.contains("below seen_max"), "{err}");
        let err = refused(|s| s.seen_last_run = s.seen_max + 1);
        assert!(err.contains("seen_last_run is above seen_max"), "{err}");
        let err = refused(|s| s.last = Some((1_763_751_236, 65_536)));
        assert!(err.contains("sequence"), "{err}");
        let err = refused(|s| s.shard = 32);
        assert!(err.contains("shard"), "{err}");
    }

    #[test]
    fn clock_values_and_the_clock_id() {
        let l = Layout::new(30, 2, 16, 5, EPOCH_2000).unwrap();
        let t = 1_763_751_234;
        let clocked = StateFile {
            layout: l,
            clock_id: 6, // clock value 2
            seen_max: t + 100,
            seen_last_run: t,
            // Value 2 runs on real time after a rollback; value 0 holds the
            // highest second seen.
            high_water: [(0, t + 105), (2, t + 5)].into_iter().collect(),
            last: None,
            ..sample()
        };
        assert_eq!(StateFile::parse(&clocked.render()).unwrap(), clocked);

        let missing = StateFile {
            clock_id: 5,
            ..clocked.clone()
        };
        let err = StateFile::parse(&missing.render()).unwrap_err();
        assert!(
            err.contains("no mark for the current clock value 1"),
            "{err}"
        );

        let text = clocked.render().replace("2:", "4:");
        assert!(text_refused(&text).contains("does not fit"));

        for id in [u64::MAX, u64::MAX - 3] {
            let err = StateFile::parse(
                &StateFile {
                    clock_id: id,
                    ..clocked.clone()
                }
                .render(),
            )
            .unwrap_err();
            assert!(err.contains("too large to be bumped"), "{id}: {err}");
        }
        // The highest clock id that can still be bumped through all four
        // clock values.
        let highest = StateFile {
            clock_id: u64::MAX - 4,
            high_water: [(0, t + 105), (3, t + 5)].into_iter().collect(),
            ..clocked.clone()
        };
        assert_eq!(highest.clock_value(), 3);
        assert_eq!(StateFile::parse(&highest.render()).unwrap(), highest);
    }

    #[test]
    fn reasons_never_quote_the_file() {
        let secret = "hunter2-0123456789";
        let good = sample().render();
        let texts = [
            format!("{secret}\n"),
            format!("password = {secret}\n"),
            good.replace("version = 2", &format!("version = {secret}")),
            good.replace("shard = 7", &format!("shard = {secret}")),
            good.replace("clock_id = 3", &format!("clock_id = {secret}")),
            good.replace("0:1763751239", &format!("0:{secret}")),
            good.replace("0:1763751239", &format!("{secret}:1763751239")),
            good.replace("last = 1763751236 17", &format!("last = {secret}")),
            good.replace("epoch:946684800", &format!("epoch:{secret}")),
            good.replace("end\n", &format!("end\n{secret}\n")),
            good.replace("seen_max", secret),
        ];
        for text in &texts {
            let err = text_refused(text);
            assert!(!err.contains("hunter2"), "{err}");
            assert!(!err.contains("0123456789"), "{err}");
        }
    }

    // --- recovery -------------------------------------------------------

    const NOW: u64 = 1_763_751_300;

    fn plan_for(
        old: Option<&str>,
        options: &RecoverOptions,
    ) -> std::result::Result<Recovery, String> {
        let old = old.map(|t| t.as_bytes().to_vec());
        plan_recovery_from(Path::new("/state"), 7, &Layout::DEFAULT, options, old, NOW)
            .map_err(|e| e.to_string())
    }

    /// A state file as idutil wrote it before files carried a checksum:
    /// the case where a damaged file's legible fields are all there is.
    fn unsummed(text: &str) -> String {
        text.lines()
            .filter(|l| !l.starts_with("checksum ="))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            .replace("version = 2", "version = 1")
    }

    #[test]
    fn a_checksum_catches_a_changed_digit_and_makes_nothing_certain() {
        let good = borrowed().render();
        assert!(StateFile::parse(&good).is_ok());
        assert!(StateFile::parse(&unsummed(&good)).is_ok(), "older files");
        // One digit of the mark lowered: still a consistent file, but not
        // the one written.
        let edited = good.replace(&format!("0:{}", NOW + 3_000), &format!("0:{}", NOW + 1_000));
        let err = StateFile::parse(&edited).unwrap_err();
        assert!(err.contains("checksum"), "{err}");
        // So recovery cannot trust the mark, nor any other field.
        let err = plan_for(Some(&edited), &RecoverOptions::new()).unwrap_err();
        assert!(err.contains("checksum") && err.contains("--after"), "{err}");
        let r = plan_for(Some(&edited), &RecoverOptions::new().after(NOW + 5_000)).unwrap();
        assert!(r.resume_after >= NOW + 5_000);
        // Without a checksum, a mark below what the file says was seen is
        // not certain either.
        let seen = unsummed(&good).replace(
            &format!("seen_max = {NOW}"),
            &format!("seen_max = {}", NOW + 4_000),
        );
        let err = plan_for(Some(&seen), &RecoverOptions::new()).unwrap_err();
        assert!(err.contains("below"), "{err}");
    }

    /// A crashed, borrowed-ahead state: the mark is far past the clock.
    fn borrowed() -> StateFile {
        StateFile {
            seen_max: NOW,
            seen_last_run: NOW,
            high_water: [(0, NOW + 3_000)].into_iter().collect(),
            last: None,
            ..sample()
        }
    }

    #[test]
    fn recovery_refuses_without_a_certain_mark_unless_a_time_is_vouched_for() {
        let good = unsummed(&borrowed().render());
        let truncated_in_mark = &good[..good.find("high_water = ").unwrap() + 17];
        let truncated_before = &good[..good.find("high_water").unwrap()];
        let cases: Vec<(Option<String>, &str)> = vec![
            (None, "no state file"),
            (Some(String::new()), "no legible version"),
            (Some(truncated_in_mark.into()), "no complete high_water"),
            (Some(truncated_before.into()), "no complete high_water"),
            (
                Some(good.replace("version = 1", "version = 7")),
                "unknown version",
            ),
            (
                Some(good.replace("high_water", "high_wa\0er")),
                "no complete high_water",
            ),
            (
                Some(good.replace(&format!("0:{}", NOW + 3_000), "")),
                "empty",
            ),
            (
                Some(good.replace(&format!("0:{}", NOW + 3_000), "0:0")),
                "outside",
            ),
            (
                Some(good.replace(&format!("0:{}", NOW + 3_000), "0:18446744073709551615")),
                "outside",
            ),
            (
                Some(good.replace(&format!("0:{}", NOW + 3_000), "0:99999999999999999999")),
                "outside",
            ),
            (
                Some(good.replace(&format!("0:{}", NOW + 3_000), "0:1x")),
                "malformed",
            ),
            (
                Some(good.replace(
                    &format!("0:{}", NOW + 3_000),
                    &format!("0:{} 0:1000000000", NOW + 3_000),
                )),
                "twice",
            ),
            (
                Some(good.replace("shard = 7", "shard = 8")),
                "another shard",
            ),
        ];
        for (old, want) in cases {
            let err = plan_for(old.as_deref(), &RecoverOptions::new()).unwrap_err();
            assert!(err.contains(want), "{want}: {err}");
            assert!(err.contains("--after TIME"), "{want}: {err}");
            // Vouching for a time is enough, and the recovery resumes after it.
            let vouched = NOW + 10_000;
            let r = plan_for(old.as_deref(), &RecoverOptions::new().after(vouched)).unwrap();
            assert!(r.resume_after >= vouched + DEFAULT_WINDOW, "{want}");
            assert_eq!(r.kept_as.is_some(), old.is_some(), "{want}");
        }
    }

    #[test]
    fn recovery_resumes_after_every_legible_second_plus_the_window() {
        let good = unsummed(&borrowed().render());
        let mark = NOW + 3_000;
        // A damaged line elsewhere: the mark is certain and wins.
        let damaged = good.replace(&format!("seen_max = {NOW}"), "\0\0\0\0");
        let r = plan_for(Some(&damaged), &RecoverOptions::new()).unwrap();
        assert!(matches!(r.found, OldState::Damaged { .. }), "{:?}", r.found);
        assert_eq!((r.latest, r.latest_from), (mark, "the high-water mark"));
        assert_eq!(r.resume_after, mark + DEFAULT_WINDOW);
        assert_eq!(r.clock_id, 4, "bumped from 3");
        assert_eq!(r.new_state().high_water[&0], r.resume_after);

        // A last ID above the mark: a generator never writes that, so the
        // mark is not certain; a vouched-for time is needed.
        let above = good.replace("end\n", &format!("last = {} 5\nend\n", mark + 50));
        let err = plan_for(Some(&above), &RecoverOptions::new()).unwrap_err();
        assert!(err.contains("below the last issued ID"), "{err}");
        let r = plan_for(Some(&above), &RecoverOptions::new().after(mark + 50)).unwrap();
        assert!(matches!(r.found, OldState::Damaged { .. }));
        assert_eq!(r.latest, mark + 50);

        // `last = 0 0`: refused by a generator, ignored as evidence here.
        let zero = good.replace("end\n", "last = 0 0\nend\n");
        let r = plan_for(Some(&zero), &RecoverOptions::new()).unwrap();
        assert_eq!(r.latest, mark);

        // A later vouched-for time wins; an earlier one changes nothing.
        let r = plan_for(Some(&damaged), &RecoverOptions::new().after(mark + 99)).unwrap();
        assert_eq!(
            (r.latest, r.latest_from),
            (mark + 99, "the time vouched for")
        );
        let r = plan_for(Some(&damaged), &RecoverOptions::new().after(NOW - 99)).unwrap();
        assert_eq!(r.latest, mark);

        // Non-UTF-8 bytes in a comment do not hide the mark.
        let mut bytes = damaged.clone().into_bytes();
        bytes.splice(2..2, [0xff, 0xfe]);
        let r = plan_recovery_from(
            Path::new("/state"),
            7,
            &Layout::DEFAULT,
            &RecoverOptions::new(),
            Some(bytes),
            NOW,
        )
        .unwrap();
        assert_eq!(r.latest, mark);

        // The wall clock counts too, and the window is the caller's.
        let old_mark = good.replace(&format!("0:{mark}"), &format!("0:{}", NOW - 500));
        let old_mark = old_mark.replace(&format!("= {NOW}\n"), &format!("= {}\n", NOW - 600));
        let old_mark = old_mark.replace("version = 1", "version = 1\n\0");
        let r = plan_for(Some(&old_mark), &RecoverOptions::new().window(60)).unwrap();
        assert_eq!((r.latest, r.latest_from), (NOW, "the wall clock"));
        assert_eq!(r.resume_after, NOW + 60);
    }

    #[test]
    fn recovery_refuses_a_healthy_file_unless_forced() {
        let healthy = borrowed().render();
        let err = plan_for(Some(&healthy), &RecoverOptions::new()).unwrap_err();
        assert!(err.contains("healthy") && err.contains("--force"), "{err}");
        let r = plan_for(Some(&healthy), &RecoverOptions::new().force(true)).unwrap();
        assert_eq!(r.found, OldState::Healthy);
        assert_eq!(r.resume_after, NOW + 3_000 + DEFAULT_WINDOW);

        // A sound file for another layout needs no forcing; its marks count.
        let other = StateFile {
            layout: Layout::new(30, 2, 16, 5, EPOCH_2000).unwrap(),
            clock_id: 4, // clock value 0, which has the mark
            ..borrowed()
        };
        let r = plan_for(Some(&other.render()), &RecoverOptions::new()).unwrap();
        assert_eq!(r.found, OldState::OtherLayout(other.layout));
        assert_eq!(r.latest, NOW + 3_000);
    }

    #[test]
    fn recovery_never_creates_a_dead_shard() {
        let err = plan_for(None, &RecoverOptions::new().after(LAST + 1)).unwrap_err();
        assert!(err.contains("past the layout's last second"), "{err}");
        let err = plan_for(None, &RecoverOptions::new().after(u64::MAX)).unwrap_err();
        assert!(err.contains("past the layout's last second"), "{err}");
        let err = plan_for(None, &RecoverOptions::new().after(LAST - 2)).unwrap_err();
        assert!(err.contains("no second of the layout"), "{err}");
        let err = plan_for(None, &RecoverOptions::new().after(NOW).window(u64::MAX)).unwrap_err();
        assert!(err.contains("no second of the layout"), "{err}");
        // The last usable resumption leaves exactly one second.
        let r = plan_for(
            None,
            &RecoverOptions::new().after(LAST - 1 - DEFAULT_WINDOW),
        )
        .unwrap();
        assert_eq!(r.resume_after, LAST - 1);
        assert_eq!(r.found, OldState::Missing);
        assert_eq!(r.kept_as, None);
    }

    #[test]
    fn recovery_bumps_the_clock_id_with_checked_arithmetic() {
        let good = unsummed(&borrowed().render());
        let damaged = good.replace("version = 1", "version = 1\n\0");
        let r = plan_for(Some(&damaged), &RecoverOptions::new()).unwrap();
        assert_eq!(r.clock_id, 4);
        // One that cannot be bumped further starts again from 1: every
        // clock value resumes after the same second.
        for id in [u64::MAX, u64::MAX - 1] {
            let max = damaged.replace("clock_id = 3", &format!("clock_id = {id}"));
            let r = plan_for(Some(&max), &RecoverOptions::new()).unwrap();
            assert_eq!(r.clock_id, 1);
            r.new_state().check().unwrap();
        }
        // An illegible clock id restarts the count at 1.
        let gone = damaged.replace("clock_id = 3", "clock_id = ?");
        assert_eq!(
            plan_for(Some(&gone), &RecoverOptions::new())
                .unwrap()
                .clock_id,
            1
        );
    }

    #[test]
    fn recovery_writes_a_valid_state_and_keeps_the_old_bytes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let path = state_path(dir.path(), 7);
        let damaged = unsummed(&borrowed().render()).replace("version = 1", "version = 1\n\0");
        fs::write(&path, &damaged).unwrap();
        // Whatever sits at the copy's path is replaced, not written through.
        let target = dir.path().join("precious");
        fs::write(&target, "keep me").unwrap();
        let kept = dir.path().join("shard-7.state.bad");
        std::os::unix::fs::symlink(&target, &kept).unwrap();

        let r = plan_recovery(dir.path(), 7, &Layout::DEFAULT, &RecoverOptions::new()).unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            damaged,
            "planning changes nothing"
        );
        // The file changing between planning and applying is refused.
        fs::write(&path, format!("{damaged}\n")).unwrap();
        let err = r.apply().unwrap_err();
        assert!(matches!(err, Error::RecoveryRefused { .. }), "{err}");
        fs::write(&path, &damaged).unwrap();
        r.apply().unwrap();

        assert_eq!(fs::read_to_string(&target).unwrap(), "keep me");
        assert!(!fs::symlink_metadata(&kept)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read_to_string(&kept).unwrap(), damaged);
        let now = inspect(dir.path(), 7).unwrap().state.unwrap();
        assert_eq!(&now, r.new_state());
        assert_eq!(now.high_water[&0], r.resume_after);
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
