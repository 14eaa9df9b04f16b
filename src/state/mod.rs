//! The state directory, every file a generator keeps in it (each shard's
//! lock, claim and state files), and restarting a shard whose state cannot
//! be trusted. The other files the crate touches are the per-host lock's
//! (a file in `/run/lock`, and what it reads of `/proc`: see
//! [`host_lock`](crate::host_lock)) and a PostgreSQL lease's `sslrootcert`
//! (feature `postgres-lease`, `lease::postgres`), read only.
//!
//! Applications that only issue IDs never call this module; it documents
//! what their generator keeps on disk and is public for tools that look
//! after state directories, the `idutil state` command among them:
//! [`inspect`] reads a shard's state without disturbing its generator, and
//! [`recover`] (or [`plan_recovery`], to look before writing) restarts a
//! shard whose file cannot be trusted. Its report types are
//! `#[non_exhaustive]`: their fields are there to be read, and a minor
//! release may add more.
//!
//! # The files of a shard
//!
//! The state directory ([`state_dir`]:
//! [`Builder::state_dir`](crate::Builder::state_dir), else
//! [`env::STATE_DIR`](crate::env::STATE_DIR), else `$XDG_STATE_HOME/idutil`
//! or `~/.local/state/idutil`) holds three files per shard, none of them
//! ever renamed or removed but the state file, which is replaced whole:
//!
//! - `shard-N.lock`: a lock on a file that gets replaced protects nothing,
//!   so this one never is. Every generator of the shard holds a `flock` on
//!   it (through `fs2`) for its whole life: shared by the processes that
//!   share the shard (see below), exclusive for a generator that holds the
//!   shard alone (a leased or ephemeral one) and, for an instant, for the
//!   first of the sharing processes while it plans the restart. A
//!   recovery takes it exclusively, so it never runs beside a live
//!   generator ([`Error::Locked`](crate::Error::Locked) names the holder's
//!   pid). Inside, the pid of the last generator that wrote it, a line
//!   `state` once the shard has had a state file here, a line
//!   `high_water N`, and, once processes share the shard, a line `claim N`
//!   (see
//!   [*Older copies and deleted files*](#older-copies-and-deleted-files)).
//! - `shard-N.claim`: the counter the sharing processes draw blocks of IDs
//!   from, and the short lock they take turns under (see below).
//! - `shard-N.state`: the layout, the persistent **clock id** (bumped when
//!   the clock went back across a restart), the highest wall-clock second
//!   seen, and per clock value a **high-water second**: no ID with a later
//!   second is issued until the file says so. A clean close writes the
//!   exact last second and sequence, so a restart within the same second
//!   continues right after it; after a crash the next generator starts
//!   after the high-water second instead: a little ahead, never behind
//!   (or, sharing the shard, where the claim file says the processes
//!   before it drew, within the same boot: see *What a crash costs*
//!   below).
//!
//! # Processes sharing a shard
//!
//! Every process on a host that opens the same shard with the same state
//! directory (a web server and its workers, a cron job, a script's
//! hundred short commands, an application's tests run as processes, a new
//! release started before the old one has exited, a child of `fork()`)
//! issues from the shard at the same time, as PostgreSQL sessions share a
//! sequence with `CACHE`:
//!
//! - **Blocks.** A generator takes a block of the shard's counter (its
//!   seconds and sequence numbers) under a short exclusive lock on
//!   `shard-N.claim`, writing there where the next block starts, and then
//!   issues from its block without any lock, as fast as a generator alone.
//!   It draws the next block when the block is spent or the clock has
//!   moved past it. A block is sized by what the generator issued
//!   **itself**, never by where the shared counter stands (which the
//!   other processes' blocks move too): what it issues in a quarter second
//!   at its recent rate, but at most a quarter of what it issued since it
//!   opened, and at least 64 IDs (or the batch asked for). So blocks start
//!   small and grow with the process's own use: a busy process draws
//!   seldom, a quiet or short-lived one draws small blocks that keep its
//!   IDs close to the clock, and a process that knows how many IDs it
//!   will issue ([`Builder::expected_ids`](crate::Builder::expected_ids);
//!   `idutil next -n N` does) draws no more. A block never starts before
//!   the clock.
//! - **What is shared, and what is locked for how long.** The state file
//!   and its high-water mark, reserved ahead and `fsync`ed, bound what all
//!   of them may issue together: a block never reaches past the mark, and
//!   each generator writes the state file over what the others wrote
//!   (every mark and clock reading only goes up), under the same short
//!   lock. The lock is held for a draw (a read and a write of a few dozen
//!   bytes, microseconds) or for a write of the state file (an `fsync`, a
//!   few milliseconds). The claim file is not synced: it only has to hold
//!   while the host is up, and it names the boot it was written in, so
//!   that after a restart of the host the first generator starts after the
//!   state file's mark instead.
//! - **Within a process IDs increase; across processes they interleave
//!   and never repeat.** The shard's ceiling, 65,536 IDs a second (in the
//!   default layout), is shared too: together the processes issue at most
//!   that many per second before they borrow later seconds, as one
//!   process would. A fleet that issues more per host needs more shards.
//! - **Sharing keeps time.** A shared shard runs ahead of the wall clock
//!   only by the seconds its processes' own IDs fill beyond the clock, and
//!   by a little more for what their blocks leave unused, whatever the
//!   number of processes, their lifetimes or their kills. Counted from
//!   where the shard stood when they started (the clock, or after what
//!   was borrowed before), the newest ID's second is at most the later of
//!   the wall clock and the seconds that *N* IDs from *P* processes fill,
//!   (1.25 *N* + 64 *P*) / 65,536, plus 2 seconds. The quarter is the most
//!   a process leaves unused of what it issued (its last block, when
//!   another process drew after it; a process that closes cleanly before
//!   anyone drew after it gives its block's unused end back), and 64 is
//!   its smallest block. Below 65,536 IDs a second together, then, every
//!   ID is within 2 seconds of the clock. A crash of *every* process of the
//!   shard at once costs what a lone generator's crash costs (see *What a
//!   crash costs*, below and on [`Generator`](crate::Generator)).
//!   [`Generator::lead`](crate::Generator::lead) says how far ahead a
//!   generator runs, without a logger; `idutil next` warns past a minute,
//!   naming the cause it can see.
//! - **A process's bad clock stays its own.** The processes record the
//!   second they act on with the time since boot (which a wall-clock step
//!   does not move) in the claim file at each draw. A process that opens
//!   under a clock further ahead of that record than a running generator
//!   follows at once ([`Builder::max_clock_step`](crate::Builder::max_clock_step),
//!   a day by default) issues at the others' time and warns; the step is
//!   recorded with when it was first seen, and the processes that open
//!   once it has held for the confirmation time
//!   ([`Builder::clock_step_confirm`](crate::Builder::clock_step_confirm),
//!   five minutes) follow it, as a running generator does: one process's
//!   far clock never drags the others' IDs ahead with it, and a real step
//!   of the host's clock is followed however short-lived its processes
//!   are. The recorded time never goes back (a process whose clock is
//!   behind does not become the others' time), and a reading within the
//!   step limit of the highest second any run of the shard saw is never
//!   held back. Limits: the first process of a shard in a boot sets the
//!   time the next ones are judged by, so after a first process with a
//!   clock more than a day behind the rest wait the confirmation time
//!   before they issue at their own (their IDs unique and increasing
//!   either way); and a claim file without a readable time, or a host
//!   whose boot clock cannot be read, judges nothing.
//! - **What a crash costs.** A process killed at any moment loses at most
//!   its unused block (at most a quarter of what it issued, or 64 IDs);
//!   the others go on. When every process of the shard is gone (all
//!   killed, say) and the next one opens in the same boot, it starts where
//!   their blocks ended, at the claim file's counter (or at the clock, if
//!   later), when that counter can be trusted: the claim file was written
//!   in this boot and reads whole, is no older copy put back (see
//!   [*Older copies and deleted files*](#older-copies-and-deleted-files)),
//!   the lock file's note holds the same counter, the mark it records for
//!   the members is the state file's own (clock id and second: a generator
//!   that held the shard alone, a recovery or an older idutil wrote the
//!   state file without drawing from the claim file, and changed it), the
//!   state file holds no exact last ID, no seconds issued far ahead and
//!   the same layout, the counter lies within the mark, and the clock did
//!   not go back. Otherwise (after a restart of the host, or a process
//!   killed inside its turn, between the writes of the state file and the
//!   claim file) it starts after the state file's mark, as after any
//!   crash: a window ahead. So killing every process of a shard and
//!   starting them again costs no window each time, however often. The
//!   last to close cleanly records the last ID any of them was given, so
//!   the next run continues right after it; a process that closes while
//!   others run gives back what is left of its block, when nobody drew
//!   after it, and leaves the state file to them.
//! - **A member that does not let go.** The others wait for the holder of
//!   the short lock as long as something moves (the claim file changes, or
//!   the lock changes hands): on busy cores a member may queue behind the
//!   others for a while, never to fail for it. A process stopped
//!   (`SIGSTOP`, a debugger) or asleep while it holds the lock makes them
//!   wait [`Builder::member_wait`](crate::Builder::member_wait) (five
//!   seconds by default), one live but stuck (on a dead disk) twelve times
//!   that, then fail with
//!   [`Error::MemberStalled`](crate::Error::MemberStalled) naming it: its
//!   pid, that it is stopped, that it runs in another PID namespace, or
//!   that it is another generator or thread of the same process. Nothing
//!   is issued meanwhile, and a later call tries again.
//! - **One state directory per shard on a host.** Two directories for one
//!   shard would be two counters issuing the same IDs, so a generator with
//!   another directory is refused
//!   ([`Error::HostLocked`](crate::Error::HostLocked), naming the shard,
//!   both directories and the holder's pid): see
//!   [`host_lock`](crate::host_lock).
//! - **Threads of one process** share one [`Generator`](crate::Generator);
//!   two generators in one process on one shard and directory share the
//!   shard like two processes.
//!
//! Generators that hold the shard alone, and never share it: a leased
//! generator (each process leases a shard of its own, see
//! [`lease`](crate::lease)), an ephemeral one (a scratch directory of its
//! own), every generator outside Linux, where the per-host lock that
//! keeps one directory per shard does not exist, and a generator that
//! cannot read the kernel's boot id (`/proc/sys/kernel/random/boot_id`:
//! no `/proc`, or systemd's `ProcSubset=pid`), since the claim file could
//! not tell the boots apart.
//!
//! # The state file
//!
//! A small text file (seconds are Unix seconds):
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
//! last second and sequence issued. After a recovery that brought the
//! shard back from a clock far ahead, a line `skip = FIRST LAST` (then
//! `version = 3`) names the seconds issued far ahead, above every mark:
//! generators pass over them, and drop the line once past. `checksum` is
//! the CRC-32 of every byte before its line, so a changed digit that
//! leaves the values plausible is still caught. `end` marks a complete
//! file. Version 1 files (the same fields, no checksum) are still read;
//! version 2 is this format without a `skip` line, version 3 with one
//! ([`STATE_VERSION`]).
//!
//! Every value is checked, with checked arithmetic, when the file is read,
//! and a file that breaks any rule is refused
//! ([`Error::BadState`](crate::Error::BadState), which names the file and
//! says to recover the shard), never reset or repaired silently: every
//! second lies within the layout's range (its epoch to its last second);
//! `high_water` lists each clock value at most once and has a mark for the
//! current one (`clock_id` modulo the clock values), at or above
//! `seen_last_run` and `last`'s second; `seen_last_run` is at most
//! `seen_max`, which is at most the highest mark; `last`'s sequence fits
//! the layout; `clock_id` can still be bumped. A file that is unreadable,
//! truncated, from an unknown version or for another layout or shard is
//! refused the same way. Reasons name lines and fields, never the file's
//! text.
//!
//! # Writes, and what `fsync` promises
//!
//! Every write goes to a temporary file in the same directory, is
//! `fsync`ed, renamed over the old file, and the directory is `fsync`ed:
//! a crash at any instant leaves the old state or the new one. `fsync` is
//! a promise from the operating system and the disk. A disk that
//! acknowledges writes it has not stored (some consumer drives, some
//! virtual disks configured for speed) can lose the latest reservation on
//! power loss, and a file system restored from a snapshot or backup
//! travels back in time with its state files. Both can lead to reissued
//! IDs; neither can be detected from inside. A reservation write that
//! fails (a full disk, an I/O error) is answered to every call waiting on
//! it with the error; the next call that needs the reservation asks again.
//!
//! # Older copies and deleted files
//!
//! **An older copy of the state file is refused.** The lock file keeps the
//! highest mark any state file of the shard held in the directory (the
//! line `high_water N`, written after each state file lands). A state file
//! whose marks are all below it is an older copy put back (from a backup,
//! a snapshot, a careless `cp`): opening fails with
//! [`Error::BadState`](crate::Error::BadState) naming both marks, and
//! [`recover`] resumes after the lock file's mark. It catches a state file
//! restored alone; **it cannot catch a whole directory restored**, lock
//! file included, nor a file system rolled back: the copy and the mark
//! then agree. The lock file's mark is not `fsync`ed on every write (that
//! would double the disk's work), so after a power loss it may lag the
//! state file by a write: that can only let an older copy pass, never
//! refuse a current one. A garbled mark line is refused too, and a
//! recovery rewrites it. A read of the lock file that fails (EIO, say) is
//! an error naming the file, never taken for "no state file was ever
//! written".
//!
//! **An older copy of the claim file is not trusted.** The processes
//! sharing a shard write the claim file's counter (where the next block
//! starts) to the lock file too, in the same turn (the line `claim N`),
//! and each remembers the last value it wrote itself. While they run the
//! counter only goes up (a process that leaves gives back the rest of its
//! block only when nobody drew after it), so a claim file whose counter
//! is below either is an older copy put back in place (a careless `cp`
//! over it, a file restored into it; one renamed over it is caught as
//! replaced, see below). Nothing it says is then used, as with a garbled
//! claim file: the next block starts after the state file's mark, above
//! every block any process drew, a warning says so, and both files are
//! written again. The two writes of a turn are ordered so that a process
//! killed between them leaves the lock file's value at or below the claim
//! file's, or costs the same skip. An older copy of the claim file and of
//! the lock file put back together is caught only by a process that drew
//! after the copy was taken: like a whole directory restored, it can lead
//! to reissued IDs.
//!
//! **Deleted state is not a fresh start.** Once a shard has written a
//! state file in a directory, its lock file records it (the line
//! `state`). A missing state file is then
//! [`Error::BadState`](crate::Error::BadState) with
//! [`Remedy::After`], never a restart at the clock. Deleting the lock file
//! too (or the whole directory) does make a fresh start: that is data loss
//! idutil cannot see. A shard that opens with no state file in its
//! directory starts at the clock and logs a warning saying so: if it
//! issued IDs before from another directory (a container restarted
//! without its volume), those IDs can come again.
//!
//! **A live generator notices when its ground is pulled away.** It holds
//! the state directory and the lock file open. Before each write of the
//! state file, and each block it draws, it checks that the directory's path still names the
//! directory it opened, and the lock file's path the file it locked (same
//! device and inode); a process sharing the shard checks its claim file
//! the same way (a claim file removed would start a second counter). If
//! not, it stops for good: it issues no further ID,
//! writes nothing more (not even at close), and every later call returns
//! [`Error::StateReplaced`](crate::Error::StateReplaced). Writes go through
//! the directory's descriptor, so a generator never writes into a
//! directory someone recreated at the same path. A new generator on a
//! recreated, empty directory knows nothing of the IDs issued before, so
//! the stopped generator keeps its shard on the host
//! ([`host_lock`](crate::host_lock)) until the wall clock has passed every
//! second it reserved, for at most a minute; closing or dropping it waits
//! for that. A generator that had borrowed more than a minute ahead, or a
//! process killed with SIGKILL before its wait is over, gives the shard up
//! early: do not delete a live generator's state.
//!
//! # Recovery
//!
//! [`recover`] (the command `idutil state recover --shard N --state-dir
//! DIR`, which the command's error messages spell out) restarts a shard
//! and never resumes before anything that may have been issued, save an
//! interval an operator vouches unused:
//!
//! - When the old file's high-water mark can be read with certainty (a
//!   complete, legible `high_water` line for this shard, every mark within
//!   the layout's range: in a version 2 or 3 file whose checksum fails
//!   nothing is certain, since the changed byte may be a digit of the
//!   mark; in a version 1 file a legible mark is certain only if no
//!   legible second of the file lies above it), the shard resumes after
//!   the latest second anything accounts for: every mark, the last issued
//!   second and the seen seconds still legible, the lock file's mark, the
//!   wall clock, and [`RecoverOptions::after`] if given, plus the
//!   reservation window.
//! - When it cannot (no state file, a zero-length or truncated one, a
//!   missing, garbled, empty or out-of-range `high_water` line, an unknown
//!   version, another shard's file), it refuses with [`Remedy::After`]: a
//!   time you vouch for, no ID of the shard being later (the command's
//!   `--after TIME`, Unix seconds or RFC 3339). A time that would leave no
//!   second of the layout is refused: a dead shard is never created.
//! - A healthy file is replaced only when forced ([`Remedy::Force`]).
//! - **Back from a clock far ahead**: a generator opened while the clock
//!   read far ahead (see [`Builder::max_clock_step`](crate::Builder::max_clock_step))
//!   leaves the shard that far ahead. [`RecoverOptions::unused`] (the
//!   command's `--unused-from A --unused-to B`) vouches that no ID of the
//!   shard has a second from `A` up to `B` (for a clock that jumped to 2100
//!   for a moment: `A` a little after the last real ID, `B` the wrong
//!   time). The shard then resumes after the latest second anything
//!   accounts for before `A` (and after the wall clock), and the file
//!   records the seconds from `B` to the latest it accounts for in a
//!   `skip` line: a generator never reserves into them and passes over
//!   them when it reaches them, so the IDs issued far ahead stay unique.
//!   The recovery refuses when anything the state records (a mark, the
//!   last ID, a clock reading, the lock file's mark) lies inside the
//!   interval, or when the wall clock is still past its start.
//!
//! It bumps the clock id and keeps the old file as `shard-N.state.bad`
//! (written through a temporary file and a rename, so a link at that path
//! is replaced, never written through). The file's modification time is
//! not evidence: a copy or a restore changes it.
//!
//! # Where the directory must live
//!
//! **The state directory must persist.** In a container it must be a
//! persistent volume that outlives the container, not its writable layer,
//! and one shard's state must live in exactly one directory: two state
//! directories for one shard are two independent histories. On one host
//! the per-host lock ([`host_lock`](crate::host_lock)) refuses a live
//! generator for a shard in another directory than the one its live
//! generators use, but nothing can tell that a directory used yesterday
//! is not the one used today.
//!
//! # Security: the directory is a trust boundary
//!
//! The state directory is treated the way `sshd` treats `~/.ssh`. **Only
//! the user that runs the generator may write it**: anyone who can delete
//! or replace its files can make a generator re-issue IDs. Every open
//! checks:
//!
//! - The state directory is an absolute path (a relative one names a
//!   different directory in each working directory); otherwise
//!   [`Error::RelativeStateDir`](crate::Error::RelativeStateDir), and the
//!   command exits 2.
//! - The state directory, if it exists, is a directory; otherwise
//!   [`Error::UnusableStateDir`](crate::Error::UnusableStateDir), and the
//!   command exits 2.
//! - **A missing state directory is created, its missing parents only
//!   for the default.** A directory that is named
//!   ([`Builder::state_dir`](crate::Builder::state_dir),
//!   [`IDUTIL_STATE_DIR`](crate::env::STATE_DIR), the command's
//!   `--state-dir`) is created when its parent exists, as `mkdir` makes
//!   it; under a missing parent (a symbolic link to nothing included) it
//!   is refused with
//!   [`Error::UnusableStateDir`](crate::Error::UnusableStateDir) naming the
//!   parent (the command exits 2), since a mistyped path would otherwise
//!   start the shard afresh in a new tree, as `mkdir -p` would make it. The
//!   platform's default (`$XDG_STATE_HOME/idutil`, `~/.local/state/idutil`)
//!   is created with its missing parents, as a fresh account needs. Each
//!   directory created gets mode 0700 whatever the umask; lock, state and
//!   temporary files are created 0600.
//! - The state directory itself is not a symbolic link (its parents may
//!   be; a trailing `/` or `/.` does not hide a link). It, and every file
//!   the generator opens in it, belongs to the effective user and is not
//!   writable by others, nor by a group other than the process's own;
//!   every directory above it belongs to that user or to root and is
//!   writable by no one else unless it is sticky (like `/tmp`), since
//!   whoever may rename entries there could move the state away. Files
//!   have a single name (no hard links: writing one would write its other
//!   names). Otherwise [`Error::Untrusted`](crate::Error::Untrusted), with
//!   the `chmod` or `chown` that fixes it.
//! - **Group write: the process's own group only.** Write access for a
//!   group counts as "no one else" when the group is the process's
//!   effective (primary) group, and never for a supplementary group.
//!   sshd's `StrictModes` accepts a group-writable `~/.ssh` only when the
//!   group has exactly one member, the owner, which it reads in
//!   `/etc/group`; in a container the group a volume is shared with
//!   (Kubernetes' `fsGroup`) has no entry there, and kubelet makes every
//!   file of the volume group-writable at each mount. So idutil trusts the
//!   group the process runs with, as the administrator who chose it does:
//!   do not run the generator with a primary group that untrusted users
//!   share. Write access for everyone is trusted only on a sticky directory
//!   above the state directory, never on the state directory or its files.
//!   This accepts a Kubernetes volume prepared for `fsGroup` (its root
//!   owned by root, setgid, mode 2775) when the pod runs with `runAsGroup`
//!   equal to `fsGroup`, and OpenShift's volumes (group 0, group-writable)
//!   for its random uids, whose primary group is 0. It refuses an
//!   `emptyDir` (mode 0777, not sticky): any process in the pod could move
//!   the state away. The README has a StatefulSet recipe.
//! - A failure with the platform's default directory (no
//!   `IDUTIL_STATE_DIR`; `HOME=/` in a container gives `/.local/...`) is
//!   [`Error::DefaultStateDir`](crate::Error::DefaultStateDir), whose
//!   message says to set `IDUTIL_STATE_DIR`.
//! - Files in the directory are opened relative to the directory's
//!   descriptor, without following symbolic links and without blocking,
//!   and must be regular files of at most [`MAX_FILE_SIZE`]: a symbolic
//!   link, a FIFO, a device or a huge file is refused at once, never
//!   followed, waited on or read to exhaustion. Errors never quote a
//!   file's contents beyond idutil's own format. The state file and
//!   `shard-N.state.bad` are replaced by renaming a new file over them,
//!   which replaces a symbolic link itself, never its target.

mod claim;
mod format;
mod inspect;
mod lock_file;
mod options;
mod paths;
mod recover;
mod remedy;
mod rules;
mod salvage;
mod scratch;
mod stalled;
mod store;
#[cfg(test)]
mod tests;
mod trust;
mod wait;

pub(crate) use claim::{boot_known, Claims};
pub(crate) use format::check_layout;
pub use format::{StateFile, STATE_VERSION};
pub use inspect::{inspect, StateReport};
pub use options::RecoverOptions;
pub use paths::{state_dir, state_path};
pub use recover::{plan_recovery, recover, OldState, Recovery};
pub use remedy::Remedy;
pub(crate) use scratch::scratch_dir;
pub use stalled::ClaimHolder;
pub(crate) use store::Store;
pub use trust::MAX_FILE_SIZE;
