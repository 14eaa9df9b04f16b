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
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use crate::clock::wall_now;
use crate::error::{Error, Result};
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
/// `IDUTIL_STATE_DIR` is set but empty.
pub fn state_dir(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(dir) = explicit {
        return Ok(dir.to_path_buf());
    }
    if let Some(dir) = std::env::var_os(STATE_DIR_ENV) {
        if dir.is_empty() {
            return Err(Error::InvalidEnv {
                var: STATE_DIR_ENV,
                value: String::new(),
                reason: "empty; unset it or name a directory",
            });
        }
        return Ok(dir.into());
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
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    path: PathBuf,
    shard: u32,
    // Held for the `flock`; closing it releases the lock.
    _lock: File,
}

impl Store {
    /// Creates the directory if needed and takes the shard's lock.
    pub(crate) fn open(dir: &Path, shard: u32) -> Result<Store> {
        fs::create_dir_all(dir).map_err(|e| Error::io("create the state directory", dir, e))?;
        let lock_path = lock_path(dir, shard);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| Error::io("open the lock file", &lock_path, e))?;
        if let Err(e) = try_lock_exclusive(&lock) {
            if e.kind() == fs2::lock_contended_error().kind() {
                return Err(Error::Locked {
                    shard,
                    dir: dir.to_path_buf(),
                    pid: read_pid(&mut lock),
                });
            }
            return Err(Error::io("lock", &lock_path, e));
        }
        remove_stale_temporaries(dir, shard);
        // The pid is advice for error messages; the lock is what protects.
        let _ = lock
            .set_len(0)
            .and_then(|()| lock.rewind())
            .and_then(|()| writeln!(lock, "{}", std::process::id()));
        Ok(Store {
            dir: dir.to_path_buf(),
            path: state_path(dir, shard),
            shard,
            _lock: lock,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the state file: `None` if there is none yet.
    pub(crate) fn load(&self) -> Result<Option<StateFile>> {
        load(&self.path, self.shard)
    }

    /// Replaces the state file atomically and durably.
    pub(crate) fn save(&self, state: &StateFile) -> Result<()> {
        let write_err = |e| Error::io("write the state file in", &self.dir, e);
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".shard-{}.", self.shard))
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(write_err)?;
        tmp.write_all(state.render().as_bytes())
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(write_err)?;
        tmp.persist(&self.path)
            .map_err(|e| Error::io("replace the state file", &self.path, e.error))?;
        sync_dir(&self.dir).map_err(|e| Error::io("sync the state directory", &self.dir, e))
    }
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
fn remove_stale_temporaries(dir: &Path, shard: u32) {
    let prefix = format!(".shard-{shard}.");
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(&prefix) && name.ends_with(".tmp") {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

fn load(path: &Path, shard: u32) -> Result<Option<StateFile>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read the state file", path, e)),
    };
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
/// # Errors
///
/// [`Error::BadState`] if the file cannot be trusted, [`Error::Io`] if it
/// cannot be read.
pub fn inspect(dir: &Path, shard: u32) -> Result<StateReport> {
    let path = state_path(dir, shard);
    let (locked, holder) = match OpenOptions::new().read(true).open(lock_path(dir, shard)) {
        Ok(mut f) => match fs2::FileExt::try_lock_shared(&f) {
            Ok(()) => {
                let _ = fs2::FileExt::unlock(&f);
                (false, None)
            }
            Err(_) => (true, read_pid(&mut f)),
        },
        Err(_) => (false, None),
    };
    let state = load(&path, shard)?;
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
    let previous = match fs::read(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => "there was no state file".to_string(),
        Err(e) => return Err(Error::io("read the state file", &path, e)),
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let plausible = layout.epoch()..=layout.last_unix_second();
            for word in text.split(|c: char| !c.is_ascii_digit()) {
                if let Ok(n) = word.parse::<u64>() {
                    if plausible.contains(&n) {
                        resume_after = resume_after.max(n);
                    }
                }
            }
            if let Some(mtime) = modified(&path) {
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
            let kept = dir.join(format!("shard-{shard}.state.bad"));
            fs::copy(&path, &kept)
                .map_err(|e| Error::io("keep a copy of the old state as", &kept, e))?;
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

fn modified(path: &Path) -> Option<u64> {
    let t = fs::metadata(path).ok()?.modified().ok()?;
    Some(t.duration_since(UNIX_EPOCH).ok()?.as_secs())
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
