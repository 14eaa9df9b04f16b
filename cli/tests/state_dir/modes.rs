//! Modes and owners of the state directory and its files, and a deleted state file.

use idutil_harness as harness;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use idutil::state::Remedy;
use idutil::Error;
use idutil_harness::Ledger;

use crate::{is_root, private_dir, refused};

/// The default state directory, under missing parents as on a fresh
/// account, is made with them, each 0700.
#[test]
fn under_umask_000_the_dir_is_0700_and_the_files_0600() {
    let root = harness::state_dir();
    let xdg = root.path().join("new/xdg");
    let dir = xdg.join("idutil");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(harness::bin())
        .args(["--shard", "3", "next", "-n", "5"])
        .env_remove("IDUTIL_STATE_DIR")
        .env("XDG_STATE_HOME", &xdg)
        .env("IDUTIL_ID_SPACE", harness::space_for(&dir));
    harness::run(&mut cmd).expect_code(0, "idutil next under umask 000");
    let mode = |p: &Path| fs::symlink_metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(mode(&root.path().join("new")), 0o700);
    assert_eq!(mode(&xdg), 0o700);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("shard-3.lock")), 0o600);
    assert_eq!(mode(&harness::state_file(&dir, 3)), 0o600);
}

#[test]
fn a_dir_or_file_writable_by_others_is_refused_with_the_fix() {
    let dir = private_dir();
    harness::next(3, dir.path(), 10);
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    for args in [&["next"][..], &["state"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a 0777 state dir",
        );
        assert!(
            err.contains(&format!("chmod 700 {}", dir.path().display())),
            "{err}"
        );
    }
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let state = harness::state_file(dir.path(), 3);
    fs::set_permissions(&state, fs::Permissions::from_mode(0o666)).unwrap();
    let err = refused(
        harness::idutil(3, dir.path()).arg("next"),
        "a 0666 state file",
    );
    assert!(
        err.contains(&format!("chmod 600 {}", state.display())),
        "{err}"
    );
    fs::set_permissions(&state, fs::Permissions::from_mode(0o600)).unwrap();
    harness::next(3, dir.path(), 10);
}

#[test]
fn a_dir_owned_by_another_user_is_refused_with_the_fix() {
    if !is_root() {
        harness::skipped(format_args!(
            "SKIPPED a_dir_owned_by_another_user_is_refused_with_the_fix: \
             needs root to give a directory to another user"
        ));
        return;
    }
    let dir = private_dir();
    harness::next(3, dir.path(), 10);
    // `nobody` owns it now, and could delete our state file.
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a dir owned by nobody",
        );
        assert!(
            err.contains("uid 65534") && err.contains("chown"),
            "{args:?}: {err}"
        );
    }
    // A file in our own directory owned by someone else is refused too.
    std::os::unix::fs::chown(dir.path(), Some(0), Some(0)).unwrap();
    let state = harness::state_file(dir.path(), 3);
    std::os::unix::fs::chown(&state, Some(65534), Some(65534)).unwrap();
    let err = refused(
        harness::idutil(3, dir.path()).arg("next"),
        "a state file owned by nobody",
    );
    assert!(err.contains("uid 65534"), "{err}");

    // And `nobody` itself, running idutil on root's directory, is refused.
    std::os::unix::fs::chown(&state, Some(0), Some(0)).unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let setpriv = Command::new("setpriv").arg("--version").output();
    if setpriv.is_err() {
        harness::skipped(format_args!(
            "SKIPPED the setpriv part: no setpriv on this machine"
        ));
        return;
    }
    let bin_copy = harness::state_dir();
    fs::set_permissions(bin_copy.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let exe = bin_copy.path().join("idutil");
    harness::copy_bin_to(&exe);
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args(["--shard", "3", "--state-dir"])
        .arg(dir.path())
        .arg("next")
        .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
        .env_remove("IDUTIL_SHARD")
        .env_remove("IDUTIL_STATE_DIR");
    let err = refused(&mut cmd, "nobody on root's directory");
    assert!(err.contains("uid 0") && err.contains("chown"), "{err}");
}

#[test]
fn a_deleted_state_file_is_refused_not_restarted_at_the_clock() {
    let dir = private_dir();
    let mut ledger = Ledger::new();
    // Far more than a second's sequence numbers: the run borrows ahead.
    ledger.record(&harness::next(3, dir.path(), 200_000));
    fs::remove_file(harness::state_file(dir.path(), 3)).unwrap();
    for args in [&["next"][..], &["state"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a deleted state file",
        );
        assert!(err.contains("missing"), "{args:?}: {err}");
        assert!(err.contains("state recover"), "{args:?}: {err}");
        assert!(err.contains("--after TIME"), "{args:?}: {err}");
    }
    // The library says the same in its own terms.
    let err = harness::builder(dir.path())
        .shard(3)
        .open()
        .expect_err("a deleted state file");
    assert!(
        matches!(
            err,
            Error::BadState {
                remedy: Remedy::After,
                ..
            }
        ),
        "{err:?}"
    );
    // The way out: recovery, after the latest second the shard reached.
    let after = harness::unix_second(ledger.max().unwrap());
    harness::run(harness::idutil(3, dir.path()).args([
        "state",
        "recover",
        "--after",
        &after.to_string(),
    ]))
    .expect_code(0, "state recover --after");
    ledger.record_after_all(&harness::next(3, dir.path(), 1000));
}
