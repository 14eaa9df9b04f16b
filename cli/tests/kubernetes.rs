//! Containers and Kubernetes: volumes prepared the way kubelet prepares
//! them for `fsGroup` (every entry given the group, group read-write,
//! directories setgid), an `emptyDir` (0777), OpenShift's random uid in
//! group 0 with `HOME=/`, and the README's StatefulSet recipe, each run
//! by the real command as a non-root user. And a container restarted
//! without its volume: a shard with no state file says so.
//!
//! Most of these tests need root, to create directories the way kubelet
//! does and to drop to a pod's uid and gids; without root they say so
//! loudly and skip (under `CI=true` they fail).

use idutil_harness as harness;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A pod's user, and the `fsGroup` of its volume.
const POD_UID: u32 = 10001;
const FS_GROUP: u32 = 10001;

/// What `idutil next` of a fresh shard says on stderr.
const FRESH: &str = "has no state file";

/// Whether these tests can act as kubelet and as a pod: root, and
/// `setpriv` to drop to the pod's uid and gids.
fn can_play_kubelet(test: &str) -> bool {
    let root = rustix::process::geteuid().is_root();
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if root && setpriv {
        return true;
    }
    harness::skipped(format_args!(
        "\n*** SKIPPED {test}: needs root and setpriv (util-linux) to prepare volumes \
         as kubelet does and run the command as a pod's user ***\n"
    ));
    false
}

/// A directory every user may enter, holding a copy of the command that
/// every user may run, and the volumes of the test.
struct Node {
    root: tempfile::TempDir,
    bin: PathBuf,
}

impl Node {
    fn new() -> Node {
        let root = harness::state_dir();
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let bin = root.path().join("idutil");
        harness::copy_bin_to(&bin);
        Node { root, bin }
    }

    /// A new volume as a fresh file system's root directory is made:
    /// owned by root, mode 0755.
    fn volume(&self, name: &str) -> PathBuf {
        let dir = self.root.path().join(name);
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    /// The command in a pod running as `uid` with primary group `gid` and
    /// supplementary groups `groups`, and no environment but `HOME=/`
    /// (what a random uid without a passwd entry gets) and the ID space.
    fn pod(&self, uid: u32, gid: u32, groups: &[u32]) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"));
        if groups.is_empty() {
            cmd.arg("--clear-groups");
        } else {
            let list: Vec<String> = groups.iter().map(u32::to_string).collect();
            cmd.arg(format!("--groups={}", list.join(",")));
        }
        cmd.arg(&self.bin)
            .env_clear()
            .env("HOME", "/")
            .env("IDUTIL_ID_SPACE", harness::space_for(self.root.path()))
            .stdin(std::process::Stdio::null());
        cmd
    }
}

/// What kubelet does to a volume for a pod with `fsGroup` (Kubernetes'
/// `SetVolumeOwnership`, on every mount unless `fsGroupChangePolicy` is
/// `OnRootMismatch`): every entry gets the group; files get `rw` for it
/// (0660 added), directories `rwx` and the setgid bit (02770 added);
/// owners are left as they are, symbolic links untouched.
fn kubelet_fs_group(volume: &Path, fs_group: u32) {
    let meta = fs::symlink_metadata(volume).unwrap();
    if meta.file_type().is_symlink() {
        return;
    }
    std::os::unix::fs::lchown(volume, None, Some(fs_group)).unwrap();
    let add = if meta.is_dir() { 0o2770 } else { 0o660 };
    let mode = (meta.mode() & 0o7777) | add;
    fs::set_permissions(volume, fs::Permissions::from_mode(mode)).unwrap();
    if meta.is_dir() {
        for entry in fs::read_dir(volume).unwrap() {
            kubelet_fs_group(&entry.unwrap().path(), fs_group);
        }
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().mode() & 0o7777
}

/// The `n` IDs a run of `idutil next -n N` printed: exactly `n`, or the
/// test fails.
fn ids_of(r: &harness::Run, n: usize) -> Vec<u64> {
    let ids = harness::parse_ids(&r.stdout);
    assert_eq!(ids.len(), n, "{}", r.stdout);
    ids
}

#[test]
fn a_non_root_pod_uses_a_state_dir_inside_an_fs_group_volume_across_restarts() {
    if !can_play_kubelet("a_non_root_pod_uses_a_state_dir_inside_an_fs_group_volume") {
        return;
    }
    let node = Node::new();
    let volume = node.volume("data");
    kubelet_fs_group(&volume, FS_GROUP);
    assert_eq!(mode(&volume), 0o2775, "what a pod sees at the mount point");
    assert_eq!(fs::metadata(&volume).unwrap().uid(), 0);
    let state = volume.join("idutil");

    // runAsUser and runAsGroup 10001, fsGroup 10001.
    let run = |n: &str| {
        harness::run(
            node.pod(POD_UID, FS_GROUP, &[FS_GROUP])
                .args(["--shard", "3", "--state-dir"])
                .arg(&state)
                .args(["next", "-n", n]),
        )
        .expect_code(0, "idutil next in the pod")
    };
    let first = run("5");
    assert!(first.stderr.contains(FRESH), "{}", first.stderr);
    let made = fs::metadata(&state).unwrap();
    assert_eq!((made.uid(), made.mode() & 0o777), (POD_UID, 0o700));

    // The pod restarts: kubelet makes everything group-writable again.
    kubelet_fs_group(&volume, FS_GROUP);
    assert_eq!(mode(&state), 0o2770);
    assert_eq!(mode(&state.join("shard-3.state")), 0o660);
    let second = run("5");
    assert_eq!(second.stderr, "", "the shard has its history");
    let (a, b) = (ids_of(&first, 5), ids_of(&second, 5));
    assert!(b[0] > *a.last().unwrap(), "{a:?} then {b:?}");
    assert_eq!(harness::parts(b[0]).shard, 3);
}

#[test]
fn fs_group_without_run_as_group_is_refused_and_says_how_to_fix_it() {
    if !can_play_kubelet("fs_group_without_run_as_group_is_refused") {
        return;
    }
    let node = Node::new();
    let volume = node.volume("data");
    kubelet_fs_group(&volume, FS_GROUP);
    let state = volume.join("idutil");
    // fsGroup only: the group is a supplementary one, and the primary
    // group is 0. Another process with the supplementary group could move
    // the state directory away; idutil trusts only its own primary group.
    let r = harness::run(
        node.pod(POD_UID, 0, &[FS_GROUP])
            .args(["--shard", "3", "--state-dir"])
            .arg(&state)
            .arg("next"),
    )
    .expect_code(1, "fsGroup without runAsGroup");
    assert!(
        r.stderr.contains(&format!("writable by group {FS_GROUP}"))
            && r.stderr.contains("runAsGroup equal to fsGroup"),
        "{}",
        r.stderr
    );
    assert!(!state.exists() || fs::read_dir(&state).unwrap().next().is_none());

    // A directory above writable by a group the process is not in at all
    // is refused the same way.
    let r = harness::run(
        node.pod(POD_UID, 20002, &[])
            .args(["--shard", "3", "--state-dir"])
            .arg(&state)
            .arg("next"),
    )
    .expect_code(1, "a foreign group");
    assert!(r.stderr.contains("writable by group"), "{}", r.stderr);
}

#[test]
fn an_empty_dir_writable_by_everyone_is_refused_unless_sticky() {
    if !can_play_kubelet("an_empty_dir_writable_by_everyone_is_refused") {
        return;
    }
    let node = Node::new();
    // An emptyDir: 0777, owned by root (with fsGroup, 2777 and the group).
    let volume = node.volume("cache");
    fs::set_permissions(&volume, fs::Permissions::from_mode(0o777)).unwrap();
    kubelet_fs_group(&volume, FS_GROUP);
    assert_eq!(mode(&volume), 0o2777);
    let state = volume.join("idutil");
    let next = || {
        harness::run(
            node.pod(POD_UID, FS_GROUP, &[])
                .args(["--shard", "4", "--state-dir"])
                .arg(&state)
                .arg("next"),
        )
    };
    let r = next().expect_code(1, "an emptyDir");
    assert!(
        r.stderr.contains("writable by every user") && r.stderr.contains("sticky"),
        "{}",
        r.stderr
    );
    // Sticky, like /tmp: others may no longer rename what is ours.
    fs::set_permissions(&volume, fs::Permissions::from_mode(0o3777)).unwrap();
    let r = next().expect_code(0, "a sticky emptyDir");
    assert!(r.stderr.contains(FRESH), "{}", r.stderr);
}

#[test]
fn the_state_dir_itself_may_be_group_writable_only_by_the_process_s_group() {
    if !can_play_kubelet("the_state_dir_itself_may_be_group_writable") {
        return;
    }
    let node = Node::new();
    let volume = node.volume("data");
    kubelet_fs_group(&volume, FS_GROUP);
    let state = volume.join("idutil");
    let next = || {
        harness::run(
            node.pod(POD_UID, FS_GROUP, &[])
                .args(["--shard", "5", "--state-dir"])
                .arg(&state)
                .arg("next"),
        )
    };
    next().expect_code(0, "first run");
    // Someone gives the state directory to another group, writable.
    std::os::unix::fs::chown(&state, None, Some(20002)).unwrap();
    fs::set_permissions(&state, fs::Permissions::from_mode(0o770)).unwrap();
    let r = next().expect_code(1, "a state dir writable by another group");
    assert!(
        r.stderr.contains("writable by group or others"),
        "{}",
        r.stderr
    );
    // Back to the pod's group: fine. The state file's group too.
    std::os::unix::fs::chown(&state, None, Some(FS_GROUP)).unwrap();
    next().expect_code(0, "the pod's own group");
    let file = state.join("shard-5.state");
    std::os::unix::fs::chown(&file, None, Some(20002)).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o660)).unwrap();
    let r = next().expect_code(1, "a state file writable by another group");
    assert!(r.stderr.contains("chmod 600"), "{}", r.stderr);
    // World-writable is never trusted, whatever the group.
    std::os::unix::fs::chown(&file, None, Some(FS_GROUP)).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o662)).unwrap();
    next().expect_code(1, "a world-writable state file");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o660)).unwrap();
    next().expect_code(0, "group-writable by the pod's group");
}

#[test]
fn a_random_uid_with_home_slash_is_told_about_idutil_state_dir() {
    if !can_play_kubelet("a_random_uid_with_home_slash") {
        return;
    }
    let node = Node::new();
    // OpenShift: a random uid, primary group 0, HOME=/ (no passwd entry).
    let uid = 1_000_770_000;
    let r = harness::run(node.pod(uid, 0, &[]).args(["--shard", "6", "next"]))
        .expect_code(1, "the default state dir under HOME=/");
    assert!(
        r.stderr.contains("/.local")
            && r.stderr.contains("default state directory")
            && r.stderr.contains("set IDUTIL_STATE_DIR")
            && r.stderr.contains("--state-dir"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    let r = harness::run(node.pod(uid, 0, &[]).args(["--shard", "6", "state"]))
        .expect_code(0, "state shows where the default would be");
    assert!(r.stdout.contains("/.local/state/idutil"), "{}", r.stdout);

    // OpenShift's volumes are group 0 and group-writable (chgrp 0, g=u):
    // with IDUTIL_STATE_DIR there, it works.
    let volume = node.volume("data");
    kubelet_fs_group(&volume, 0);
    let r = harness::run(
        node.pod(uid, 0, &[])
            .env("IDUTIL_STATE_DIR", volume.join("idutil"))
            .args(["--shard", "6", "next", "-n", "2"]),
    )
    .expect_code(0, "IDUTIL_STATE_DIR on the volume");
    ids_of(&r, 2);
    // A directory named explicitly is not the default: no such advice.
    let r = harness::run(node.pod(uid, 0, &[]).args([
        "--shard",
        "6",
        "--state-dir",
        "/.idutil",
        "next",
    ]))
    .expect_code(1, "an explicit directory it cannot create");
    assert!(
        !r.stderr.contains("default state directory"),
        "{}",
        r.stderr
    );
}

/// The README's StatefulSet recipe: the volume claim mounted at `/data`,
/// `IDUTIL_STATE_DIR=/data/idutil`, runAsUser, runAsGroup and fsGroup
/// 10001, and the shard from the pod's host name `web-N` (or its
/// `apps.kubernetes.io/pod-index` label in `IDUTIL_SHARD`). Each pod has
/// its own claim; a pod that comes back gets its own claim back and
/// continues its shard.
#[test]
fn the_stateful_set_recipe() {
    if !can_play_kubelet("the_stateful_set_recipe") {
        return;
    }
    let unshare = Command::new("unshare").arg("--version").output().is_ok();
    if !unshare {
        harness::skipped(format_args!(
            "SKIPPED the_stateful_set_recipe: needs unshare (util-linux)"
        ));
        return;
    }
    let node = Node::new();
    // `web-N` runs with its own host name, as a pod does (a UTS namespace
    // of its own), then drops to the pod's user.
    let pod = |ordinal: u32, claim: &Path, by_label: bool| {
        let data = claim.join("idutil");
        let mut cmd = Command::new("unshare");
        cmd.args(["--uts", "sh", "-c", r#"hostname "$0" && exec "$@""#])
            .arg(format!("web-{ordinal}"))
            .arg("setpriv")
            .arg(format!("--reuid={POD_UID}"))
            .arg(format!("--regid={FS_GROUP}"))
            .arg(format!("--groups={FS_GROUP}"))
            .arg(&node.bin)
            .args(["next", "-n", "3"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/")
            .env("IDUTIL_STATE_DIR", &data)
            .env("IDUTIL_ID_SPACE", harness::space_for(node.root.path()))
            .stdin(std::process::Stdio::null());
        if by_label {
            cmd.env("IDUTIL_SHARD", ordinal.to_string());
        }
        harness::run(&mut cmd).expect_code(0, "a StatefulSet pod")
    };
    // Per pod: each run after everything its shard issued before.
    let mut ledgers: Vec<harness::Ledger> = (0..3).map(|_| harness::Ledger::new()).collect();
    let claims: Vec<PathBuf> = (0..3)
        .map(|n| {
            let claim = node.volume(&format!("state-web-{n}"));
            kubelet_fs_group(&claim, FS_GROUP);
            claim
        })
        .collect();
    for (ordinal, claim) in claims.iter().enumerate() {
        let r = pod(ordinal as u32, claim, false);
        assert!(r.stderr.contains(FRESH), "{}", r.stderr);
        let ids = ids_of(&r, 3);
        assert!(ids
            .iter()
            .all(|&id| harness::parts(id).shard == ordinal as u32));
        ledgers[ordinal].record_after_all(&ids);
    }
    // The pods restart (kubelet prepares each claim again), with the shard
    // from the pod-index label this time: each continues its own shard.
    for (ordinal, claim) in claims.iter().enumerate() {
        kubelet_fs_group(claim, FS_GROUP);
        let r = pod(ordinal as u32, claim, true);
        assert_eq!(r.stderr, "", "web-{ordinal} has its history");
        let ids = ids_of(&r, 3);
        assert!(ids
            .iter()
            .all(|&id| harness::parts(id).shard == ordinal as u32));
        ledgers[ordinal].record_after_all(&ids);
    }
    for ledger in &ledgers {
        ledger.assert_unique();
    }
}

/// A container restarted without a persistent volume starts with an
/// empty state directory; the command says so each time it happens, and
/// not once the shard has its history.
#[test]
fn a_shard_with_no_state_file_says_so() {
    let first = harness::state_dir();
    let r = harness::run(harness::idutil(7, first.path()).args(["next", "-n", "3"]))
        .expect_code(0, "a fresh shard");
    assert!(
        r.stderr.contains(FRESH) && r.stderr.contains("may issue the same IDs again"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    let r = harness::run(harness::idutil(7, first.path()).args(["next", "-n", "3"]))
        .expect_code(0, "the same shard again");
    assert_eq!(r.stderr, "");
    // A new container: a new, empty directory.
    let second = harness::state_dir();
    let r = harness::run(harness::idutil(7, second.path()).args(["next", "-n", "3"]))
        .expect_code(0, "a fresh directory");
    assert!(r.stderr.contains(FRESH), "{}", r.stderr);
}
