//! A library user on a host whose name has no number (`vm`), with no
//! logger installed: the warning about shard 0 goes to the `log` facade,
//! which nobody listens to, so `IdUtil`'s docs (*Warnings*) say to look at
//! `Generator::shard_source` after `IdUtil::init`. This checks that it
//! tells the story: run as a child process under the host name `vm`, in a
//! UTS namespace of its own (root and `unshare` needed; skipped loudly
//! otherwise, a failure under `CI=true`).

use idutil_harness as harness;

use std::process::Command;

use idutil::shard::ShardSource;
use idutil::IdUtil;

#[test]
fn shard_source_tells_a_user_without_a_logger_why_the_shard_is_0() {
    let root = rustix::process::geteuid().is_root();
    let unshare = Command::new("unshare").arg("--version").output().is_ok();
    if !(root && unshare) {
        harness::skipped(format_args!(
            "\n*** SKIPPED shard_source_tells_a_user_without_a_logger: needs root and \
             unshare to run under another host name ***\n"
        ));
        return;
    }
    let dir = harness::state_dir();
    let mut unshare = Command::new("unshare");
    unshare.args(["--uts", "sh", "-c", r#"hostname vm && exec "$@""#, "sh"]);
    let mut child = harness::child::child_command_through(
        unshare,
        "child_on_host_vm",
        &[
            ("IDUTIL_STATE_DIR", dir.path().display().to_string()),
            ("IDUTIL_ID_SPACE", harness::space_for(dir.path())),
        ],
    );
    let out = harness::output_within(&mut child, harness::command::LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("@source the default: host name \"vm\" does not end in a number"),
        "{stdout}"
    );
    // No logger: the library printed nothing of its own.
    assert!(!stderr.contains("shard 0"), "{stderr}");
}

#[test]
#[ignore = "a child process of the test above"]
fn child_on_host_vm() {
    if !harness::is_child() {
        return;
    }
    let g = IdUtil::init().unwrap();
    assert_eq!(g.shard(), 0);
    assert_eq!(
        g.shard_source(),
        &ShardSource::UnnumberedHostname("vm".to_string())
    );
    println!("@source {}", g.shard_source());
    IdUtil::shutdown().unwrap();
}
