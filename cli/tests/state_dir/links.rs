//! Symbolic and hard links, FIFOs, devices and huge files in the state directory.

use idutil_harness as harness;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::{is_root, private_dir, refused};

#[test]
fn a_symlinked_lock_file_is_refused_and_its_target_untouched() {
    let dir = private_dir();
    let outside = harness::state_dir();
    let target = outside.path().join("precious");
    fs::write(&target, "precious\n").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("shard-3.lock")).unwrap();
    let err = refused(
        harness::idutil(3, dir.path()).arg("next"),
        "a symlinked lock file",
    );
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(fs::read_to_string(&target).unwrap(), "precious\n");

    // A dangling link is not followed into a new file either.
    let missing = outside.path().join("created-through-a-link");
    std::os::unix::fs::symlink(&missing, dir.path().join("shard-4.lock")).unwrap();
    refused(
        harness::idutil(4, dir.path()).arg("next"),
        "a dangling lock link",
    );
    assert!(!missing.exists());

    // The state directory itself must not be a link.
    let link = outside.path().join("dir-link");
    std::os::unix::fs::symlink(dir.path(), &link).unwrap();
    let err = refused(
        harness::idutil(5, &link).arg("next"),
        "a symlinked state dir",
    );
    assert!(err.contains("symbolic link"), "{err}");
    // Nor may a trailing slash or dot smuggle the link through.
    for spelled in [
        format!("{}/", link.display()),
        format!("{}/.", link.display()),
    ] {
        let err = refused(
            harness::idutil(5, Path::new(&spelled)).arg("next"),
            "a symlinked state dir with a trailing slash or dot",
        );
        assert!(err.contains("symbolic link"), "{spelled}: {err}");
    }
    assert!(!dir.path().join("shard-5.lock").exists());
}

#[test]
fn a_hard_linked_lock_file_is_refused_and_its_other_name_untouched() {
    let dir = private_dir();
    let victim = dir.path().join("precious");
    fs::write(&victim, "precious\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    fs::hard_link(&victim, dir.path().join("shard-3.lock")).unwrap();
    let err = refused(
        harness::idutil(3, dir.path()).arg("next"),
        "a hard-linked lock file",
    );
    assert!(err.contains("hard link"), "{err}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
}

#[test]
fn a_state_dir_under_a_directory_another_user_controls_is_refused() {
    if !is_root() {
        harness::skipped(format_args!(
            "SKIPPED: needs root to hand a directory to another user"
        ));
        return;
    }
    let outer = harness::state_dir();
    let parent = outer.path().join("theirs");
    fs::create_dir(&parent).unwrap();
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o755)).unwrap();
    let chown = Command::new("chown")
        .args(["nobody"])
        .arg(&parent)
        .status()
        .unwrap();
    assert!(chown.success());
    // Whoever owns the parent could move the state directory away, and a
    // new one would start over: refused, however private the dir itself.
    let dir = parent.join("state");
    let err = refused(
        harness::idutil(3, &dir).arg("next"),
        "a state dir under another user's directory",
    );
    assert!(err.contains("directory above it"), "{err}");
    // A sticky, world-writable parent (like /tmp) is fine.
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o1777)).unwrap();
    Command::new("chown")
        .arg("root")
        .arg(&parent)
        .status()
        .unwrap();
    harness::next(3, &dir, 3);
}

#[test]
fn a_state_file_linked_to_a_secret_is_refused_without_leaking_it() {
    let dir = private_dir();
    let outside = harness::state_dir();
    let secret = outside.path().join("secret");
    let text = "password = hunter2-SECRET-TOKEN\n";
    fs::write(&secret, text).unwrap();
    std::os::unix::fs::symlink(&secret, harness::state_file(dir.path(), 3)).unwrap();
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a linked state file",
        );
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
        assert!(
            !err.contains("hunter2"),
            "{args:?} leaked the secret: {err}"
        );
    }
    assert_eq!(fs::read_to_string(&secret).unwrap(), text);
}

#[test]
fn recover_replaces_a_symlinked_bad_copy_instead_of_writing_through_it() {
    let dir = private_dir();
    harness::next(3, dir.path(), 10);
    let state = harness::state_file(dir.path(), 3);
    fs::write(&state, "garbage\n").unwrap();
    let outside = harness::state_dir();
    let target = outside.path().join("target");
    fs::write(&target, "keep me\n").unwrap();
    let bad = dir.path().join("shard-3.state.bad");
    std::os::unix::fs::symlink(&target, &bad).unwrap();
    // The garbage keeps no mark: the operator vouches for a time.
    let after = (harness::wall_now() + 60).to_string();
    harness::run(harness::idutil(3, dir.path()).args(["state", "recover", "--after", &after]))
        .expect_code(0, "state recover");
    assert_eq!(fs::read_to_string(&target).unwrap(), "keep me\n");
    let meta = fs::symlink_metadata(&bad).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(fs::read_to_string(&bad).unwrap(), "garbage\n");
}

#[test]
fn a_fifo_as_the_state_file_fails_fast_everywhere() {
    let dir = private_dir();
    let state = harness::state_file(dir.path(), 3);
    let made = Command::new("mkfifo")
        .arg(&state)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a FIFO state file",
        );
        assert!(err.contains("not a regular file"), "{args:?}: {err}");
    }
}

#[test]
fn a_device_or_a_huge_file_is_refused_quickly() {
    let dir = private_dir();
    std::os::unix::fs::symlink("/dev/zero", harness::state_file(dir.path(), 3)).unwrap();
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(3, dir.path()).args(args),
            "a link to /dev/zero",
        );
        assert!(err.contains("symbolic link"), "{args:?}: {err}");
    }
    let huge = harness::state_file(dir.path(), 4);
    let file = fs::File::create(&huge).unwrap();
    file.set_len(1 << 30).unwrap();
    fs::set_permissions(&huge, fs::Permissions::from_mode(0o600)).unwrap();
    for args in [&["next"][..], &["state"], &["state", "recover"]] {
        let err = refused(
            harness::idutil(4, dir.path()).args(args),
            "a 1 GiB state file",
        );
        assert!(err.contains("larger than"), "{args:?}: {err}");
    }
}
