//! The process-wide generator's exit hook, with threads still issuing:
//! a child process (this test binary, re-executed to run one `#[ignore]`d
//! entry point) exits while a thread of it calls `IdUtil::next_id()`.

use idutil_harness as harness;

use std::time::Duration;

/// A thread still issuing from the process-wide generator when the
/// process exits normally: the exit hook closes the generator under it,
/// and the thread's next call must not panic (with `panic = "abort"` that
/// would turn a clean exit into SIGABRT).
#[test]
fn a_thread_issuing_while_the_process_exits_does_not_panic() {
    let dir = harness::state_dir();
    let out = harness::output_within(
        &mut harness::child::child_command(
            "child_exit_while_issuing",
            &[
                ("IDUTIL_STATE_DIR", dir.path().display().to_string()),
                ("IDUTIL_SHARD", "15".to_string()),
                ("IDUTIL_ID_SPACE", harness::space_for(dir.path())),
            ],
        ),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Child entry point of
/// [`a_thread_issuing_while_the_process_exits_does_not_panic`]: a thread
/// issues without end while the process exits.
#[test]
#[ignore = "child process entry point, run by the tests in this file"]
fn child_exit_while_issuing() {
    if !harness::is_child() {
        return;
    }
    idutil::IdUtil::init().expect("open the process-wide generator");
    std::thread::spawn(|| loop {
        std::hint::black_box(idutil::IdUtil::next_id());
    });
    std::thread::sleep(Duration::from_millis(200));
    std::process::exit(0);
}
