//! Relative state directories and bad ID spaces: usage errors.

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
