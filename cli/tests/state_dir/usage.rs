//! Relative state directories, paths that are not directories, named
//! state directories under a missing parent and bad ID spaces: usage errors.

use idutil_harness as harness;

use std::fs;
use std::process::Command;

use idutil::{Error, Generator};

use crate::private_dir;

#[test]
fn a_relative_state_dir_is_a_usage_error() {
    let cwd = harness::state_dir();
    for (env, args) in [
        (Some("state"), vec!["--shard", "3", "next"]),
        (None, vec!["--shard", "3", "--state-dir", "state", "next"]),
        (Some("./state"), vec!["--shard", "3", "state"]),
    ] {
        let mut cmd = Command::new(harness::bin());
        cmd.current_dir(cwd.path())
            .env_remove("IDUTIL_SHARD")
            .env_remove("IDUTIL_STATE_DIR")
            .env("IDUTIL_ID_SPACE", harness::space_for(cwd.path()))
            .args(&args);
        if let Some(v) = env {
            cmd.env("IDUTIL_STATE_DIR", v);
        }
        let r = harness::run(&mut cmd).expect_code(2, "a relative state dir");
        assert!(r.stderr.contains("relative"), "{}", r.stderr);
        assert!(r.stdout.is_empty());
    }
    assert_eq!(
        fs::read_dir(cwd.path()).unwrap().count(),
        0,
        "nothing created"
    );
    assert!(matches!(
        Generator::builder().state_dir("state").shard(3).open(),
        Err(Error::RelativeStateDir { .. })
    ));
}

/// A state directory that is a file is a mistake in the setting that named
/// it ([`Error::UnusableStateDir`]): exit status 2, as the help's *Exit
/// status* promises for an unusable IDUTIL_STATE_DIR, with the setting
/// named.
#[test]
fn a_state_dir_that_is_a_file_is_a_usage_error_naming_its_setting() {
    let dir = private_dir();
    let file = dir.path().join("a-file");
    fs::write(&file, "").unwrap();
    let by_flag = harness::run(harness::idutil(3, &file).arg("next"))
        .expect_code(2, "--state-dir naming a file");
    let by_env = harness::run(
        Command::new(harness::bin())
            .env_remove("IDUTIL_SHARD")
            .env("IDUTIL_STATE_DIR", &file)
            .env("IDUTIL_ID_SPACE", harness::space_for(dir.path()))
            .args(["--shard", "3", "state"]),
    )
    .expect_code(2, "IDUTIL_STATE_DIR naming a file");
    for (r, setting) in [(by_flag, "--state-dir"), (by_env, "IDUTIL_STATE_DIR")] {
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(
            r.stderr.starts_with("idutil: usage error: ")
                && r.stderr.contains(&format!("{}", file.display()))
                && r.stderr.contains("not a directory")
                && r.stderr.contains(&format!("named by {setting}")),
            "{}",
            r.stderr
        );
        assert!(r.stdout.is_empty());
    }
    assert!(matches!(
        harness::builder(&file).shard(3).open(),
        Err(Error::UnusableStateDir { .. })
    ));
}

/// A named state directory is created only when its parent exists, as
/// `mkdir` makes it: under a missing parent (a mistyped path) it is refused
/// with exit status 2, naming the parent and the setting, and nothing is
/// created ([`state`](idutil::state), *Security: the directory is a trust
/// boundary*).
#[test]
fn a_named_state_dir_under_a_missing_parent_is_refused_and_nothing_is_created() {
    let root = private_dir();
    let parent = root.path().join("missing");
    let dir = parent.join("state");
    let by_flag = harness::run(harness::idutil(3, &dir).args(["next", "-n", "2"]))
        .expect_code(2, "--state-dir under a missing parent");
    let by_env = harness::run(
        Command::new(harness::bin())
            .env_remove("IDUTIL_SHARD")
            .env("IDUTIL_STATE_DIR", &dir)
            .env("IDUTIL_ID_SPACE", harness::space_for(&dir))
            .args(["--shard", "3", "next"]),
    )
    .expect_code(2, "IDUTIL_STATE_DIR under a missing parent");
    for (r, setting) in [(by_flag, "--state-dir"), (by_env, "IDUTIL_STATE_DIR")] {
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(
            r.stderr.starts_with("idutil: usage error: ")
                && r.stderr
                    .contains(&format!("its parent {} does not exist", parent.display()))
                && r.stderr.contains(&format!("named by {setting}")),
            "{}",
            r.stderr
        );
        assert!(r.stdout.is_empty());
    }
    assert!(matches!(
        harness::builder(&dir).shard(3).open(),
        Err(Error::UnusableStateDir { .. })
    ));
    assert!(!parent.exists(), "nothing is created");
    // Its parent there, the directory is made.
    fs::create_dir(&parent).unwrap();
    harness::run(harness::idutil(3, &dir).args(["next", "-n", "2"]))
        .expect_code(0, "--state-dir whose parent exists");
    assert!(harness::state_file(&dir, 3).exists());
}

/// A parent that is a symbolic link to nothing is a missing parent too:
/// exit status 2 naming it, as the help promises for a state directory
/// whose parent is missing, not an I/O failure (exit status 1).
#[test]
fn a_named_state_dir_under_a_link_to_nothing_is_refused_as_a_missing_parent() {
    let root = private_dir();
    let parent = root.path().join("link");
    std::os::unix::fs::symlink(root.path().join("nowhere"), &parent).unwrap();
    let dir = parent.join("state");
    let r = harness::run(harness::idutil(3, &dir).args(["next", "-n", "2"]))
        .expect_code(2, "--state-dir under a link to nothing");
    assert!(
        r.stderr.starts_with("idutil: usage error: ")
            && r.stderr
                .contains(&format!("its parent {} does not exist", parent.display())),
        "{}",
        r.stderr
    );
    assert!(matches!(
        harness::builder(&dir).shard(3).open(),
        Err(Error::UnusableStateDir { .. })
    ));
    assert!(!root.path().join("nowhere").exists(), "nothing is created");
    // A parent that exists where no directory can be made (procfs says
    // ENOENT too) is not called missing.
    let r = harness::run(harness::idutil(3, std::path::Path::new("/proc/1/state")).arg("next"))
        .expect_code(1, "--state-dir in /proc");
    assert!(!r.stderr.contains("does not exist;"), "{}", r.stderr);
}

#[test]
fn a_bad_id_space_is_a_usage_error() {
    let dir = private_dir();
    let r = harness::run(harness::idutil(3, dir.path()).args(["--id-space", "a/b", "next"]))
        .expect_code(2, "a bad --id-space");
    assert!(r.stderr.contains("ID space"), "{}", r.stderr);
    let r = harness::run(
        harness::idutil(3, dir.path())
            .env("IDUTIL_ID_SPACE", "")
            .arg("next"),
    )
    .expect_code(2, "an empty IDUTIL_ID_SPACE");
    assert!(r.stderr.contains("IDUTIL_ID_SPACE"), "{}", r.stderr);
    assert!(matches!(
        harness::builder(dir.path()).id_space("x y").shard(3).open(),
        Err(Error::InvalidIdSpace { .. })
    ));
}
