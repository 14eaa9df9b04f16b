//! A lease asked for in the environment, in every build: with an engine it
//! is taken (or opening fails), without one opening is refused. It is never
//! ignored, and a password in its URL is never echoed.

use std::time::Duration;

use idutil_harness as harness;

/// A URL with a password, on a port where nothing answers.
const URL: &str = "redis://app:s3cret-pw@127.0.0.1:1/";

#[test]
fn a_lease_url_in_the_environment_is_never_ignored() {
    let dir = harness::state_dir();
    for url in [URL, ""] {
        let out = harness::output_within(
            &mut harness::child::child_command(
                "child_open_from_the_environment",
                &[
                    ("IDUTIL_CHILD_DIR", dir.path().display().to_string()),
                    ("IDUTIL_LEASE_URL", url.to_string()),
                ],
            ),
            Duration::from_secs(30),
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let refusal = stdout
            .lines()
            .find_map(|l| l.strip_prefix("@refused "))
            .unwrap_or_else(|| panic!("{url:?} was not refused: {stdout}\n{stderr}"));
        assert!(
            !stdout.contains("s3cret") && !stderr.contains("s3cret"),
            "{stdout}"
        );
        assert!(
            refusal.contains("IDUTIL_LEASE_URL")
                || cfg!(any(feature = "postgres-lease", feature = "redis")),
            "{refusal}"
        );
        if cfg!(not(any(feature = "postgres-lease", feature = "redis"))) {
            assert!(refusal.contains("no lease engine"), "{refusal}");
        }
    }
}
