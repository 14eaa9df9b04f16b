//! The per-host lock's file removed while a generator holds the shard,
//! seen from another PID namespace (`unshare --pid --mount-proc`) and on a
//! host whose `/proc/locks` is megabytes long: a generator with another
//! state directory is still refused, and the holder's own directory still
//! shares the shard.

use idutil_harness as harness;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The per-host lock file of `shard` in `space`, where this host keeps
/// them (the first of `/run/lock`, `/dev/shm`, `/tmp` that exists).
fn lock_file(space: &str, shard: u32) -> PathBuf {
    let dir = ["/run/lock", "/dev/shm", "/tmp"]
        .into_iter()
        .find(|d| Path::new(d).is_dir())
        .expect("a lock directory");
    Path::new(dir).join(format!("idutil.{space}.shard-{shard}.lock"))
}

/// Whether this host lets a test start a command in a PID namespace of
/// its own (with a `/proc` of its own); if not, says that it skips.
fn namespaces_allowed() -> bool {
    let probe = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status();
    if probe.is_ok_and(|s| s.success()) {
        return true;
    }
    harness::skipped(format_args!(
        "SKIPPED: `unshare --pid --fork --mount-proc` is not permitted here, so the \
         per-host lock across PID namespaces is NOT tested"
    ));
    false
}

/// `cmd`, run in a PID namespace of its own with its own `/proc` when
/// `own` (killed with the `unshare` that starts it), else as it is.
fn in_namespace(own: bool, cmd: Command) -> Command {
    if !own {
        return cmd;
    }
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(Stdio::null());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    wrapped
}

/// `idutil` on `shard` and `dir`, in the ID space `space`.
fn idutil(shard: u32, dir: &Path, space: &str) -> Command {
    let mut cmd = harness::idutil(shard, dir);
    cmd.env("IDUTIL_ID_SPACE", space);
    cmd
}

/// An `idutil next -n 1000000000` that issued its first IDs and then
/// holds the shard, blocked on its full stdout until stopped.
struct Holder {
    child: Child,
    out: BufReader<ChildStdout>,
    ids: Vec<u64>,
}

impl Holder {
    fn start(mut cmd: Command) -> Holder {
        let mut child = cmd
            .args(["next", "-n", "1000000000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the holder");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut ids = Vec::new();
        let mut line = String::new();
        while ids.len() < 100 {
            line.clear();
            let n = out.read_line(&mut line).expect("read the holder");
            assert!(n > 0, "the holder ended");
            ids.push(harness::parse_id(&line));
        }
        Holder { child, out, ids }
    }

    /// Kills it (with the `unshare` that started it, if any) and returns
    /// every ID it printed.
    fn stop(mut self) -> Vec<u64> {
        harness::sigkill(&mut self.child);
        let rest = harness::read_rest(self.out);
        let mut ids = self.ids;
        ids.extend(harness::parse_complete_ids(&rest));
        ids
    }
}

/// `idutil next` on `shard` of `space` with the state directory `dir`
/// must be refused as held by another generator, issuing nothing.
fn assert_refused(mut cmd: Command, what: &str) {
    let r = harness::run(cmd.args(["next", "-n", "100000"])).expect_code(1, what);
    assert!(r.stdout.is_empty(), "{what}: nothing issued");
    assert!(
        r.stderr
            .contains("is in use by another generator on this host"),
        "{what}: {}",
        r.stderr
    );
}

/// A generator holds a shard in one PID namespace; its per-host lock file
/// is removed; a generator with another state directory starts in another
/// PID namespace, where `/proc` shows neither the holder's lock nor its
/// descriptors. It is refused, for every pair of namespaces; a command
/// with the holder's directory shares the shard from there.
#[test]
fn another_state_directory_in_another_pid_namespace_is_refused_after_the_lock_file_is_removed() {
    if !namespaces_allowed() {
        return;
    }
    // (holder in a namespace of its own, newcomer in one of its own)
    for (shard, holder_ns, newcomer_ns) in [(16, false, true), (17, true, false), (18, true, true)]
    {
        let dir = harness::state_dir();
        let elsewhere = harness::state_dir();
        let space = harness::space_for(dir.path());
        let what = format!("holder in its own PID namespace: {holder_ns}, newcomer: {newcomer_ns}");
        let holder = Holder::start(in_namespace(holder_ns, idutil(shard, dir.path(), &space)));
        assert_refused(
            in_namespace(newcomer_ns, idutil(shard, elsewhere.path(), &space)),
            &format!("{what}, the lock file in place"),
        );
        std::fs::remove_file(lock_file(&space, shard)).expect("remove the per-host lock file");
        assert_refused(
            in_namespace(newcomer_ns, idutil(shard, elsewhere.path(), &space)),
            &format!("{what}, the lock file removed"),
        );
        // The holder's directory still shares the shard, from the
        // newcomer's namespace too.
        let mut cmd = in_namespace(newcomer_ns, idutil(shard, dir.path(), &space));
        let shared = harness::run(cmd.args(["next", "-n", "1000"]))
            .expect_code(0, &format!("{what}: the holder's directory"));
        let mut ids = harness::parse_ids(&shared.stdout);
        ids.extend(holder.stop());
        harness::assert_unique_set(&ids);
        // Gone: the other directory may take the shard now.
        harness::run(idutil(shard, elsewhere.path(), &space).args(["next", "-n", "5"]))
            .expect_code(0, &format!("{what}: once the holder is gone"));
    }
}

/// The CPUs this process may run on, from `/proc/self/status`.
fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// A generator holds a shard; helper processes then hold 48,000 `flock`s,
/// so that `/proc/locks` (which lists the newest locks of each CPU first)
/// shows the holder's lock megabytes down; the per-host lock file is
/// removed; a generator with another state directory is refused.
#[test]
fn another_state_directory_is_refused_after_the_lock_file_is_removed_when_proc_locks_is_large() {
    let Some(taskset) = harness::tool("taskset", "util-linux", "a large /proc/locks") else {
        return;
    };
    let dir = harness::state_dir();
    let elsewhere = harness::state_dir();
    let space = harness::space_for(dir.path());
    let shard = 19;
    // Everything on one CPU: its list of locks holds the holder's, then
    // the helpers' above it.
    let cpu = allowed_cpus()[0].to_string();
    let pinned = |cmd: Command| {
        let mut wrapped = Command::new(&taskset);
        wrapped
            .args(["-c", &cpu])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => wrapped.env(k, v),
                None => wrapped.env_remove(k),
            };
        }
        wrapped
    };
    let holder = Holder::start(pinned(idutil(shard, dir.path(), &space)));
    let lock = lock_file(&space, shard);
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&lock).unwrap());
    let locked = harness::state_dir();
    // Four helpers of 12,000 locks each: a process may have at most
    // 20,000 files open here.
    let helpers: Vec<_> = (0..4)
        .map(|_| {
            let mut pin = Command::new(&taskset);
            pin.args(["-c", &cpu]);
            let mut child = harness::child::child_command_through(
                pin,
                "child_hold_flocks",
                &[
                    ("IDUTIL_CHILD_N", "12000".to_string()),
                    ("IDUTIL_CHILD_LOCK_DIR", locked.path().display().to_string()),
                ],
            )
            .spawn()
            .expect("start a helper");
            let (_, out) = harness::read_until_ready(child.stdout.take().unwrap());
            (child, out)
        })
        .collect();
    // The holder's lock now lies past the first mebibyte.
    let locks = std::fs::read_to_string("/proc/locks").unwrap();
    let at = locks
        .find(&format!(":{ino} "))
        .expect("the holder's lock in /proc/locks");
    assert!(
        at > 1 << 20,
        "the holder's lock is {at} bytes into /proc/locks ({} bytes)",
        locks.len()
    );
    std::fs::remove_file(&lock).expect("remove the per-host lock file");
    assert_refused(
        idutil(shard, elsewhere.path(), &space),
        "another state directory, the lock file removed, /proc/locks large",
    );
    for (mut helper, out) in helpers {
        drop(helper.stdin.take());
        harness::read_rest(out);
        assert!(harness::wait_within(&mut helper, Duration::from_secs(60)).success());
    }
    harness::assert_unique_set(&holder.stop());
}
