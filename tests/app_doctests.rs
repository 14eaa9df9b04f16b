//! An application's own doctests that reach `IdUtil`, run the way a user
//! runs them: a small crate depending on this one, six doctests, each a
//! process of its own that calls code using `IdUtil::next_id()` exactly as
//! production code does, with no setup, and holds the generator for a
//! moment so that they overlap, run by `cargo test --doc` in parallel,
//! with `IDUTIL_SHARD` set as on a developer's machine. All pass, and no
//! ID of one process is another's: a test database they shared would see
//! no collision.
//!
//! The crate is built in a target directory of its own under this
//! package's (`CARGO_TARGET_TMPDIR`), so later runs only rebuild what
//! changed.

use idutil_harness as harness;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const DOCTESTS: usize = 6;

fn write_app(dir: &Path) {
    let idutil = env!("CARGO_MANIFEST_DIR");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"doc-app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\
             publish = false\n\n[dependencies]\nidutil = {{ path = {idutil:?} }}\n\n\
             [workspace]\n"
        ),
    )
    .unwrap();
    // The same versions as this workspace, without a registry query.
    let lock = Path::new(idutil).join("Cargo.lock");
    if lock.exists() {
        std::fs::copy(lock, dir.join("Cargo.lock")).unwrap();
    }
    let mut lib = String::from(
        "//! An application whose functions create records with idutil IDs.\n\n\
         /// Creates a record: its ID comes from the process-wide generator.\n\
         pub fn create(text: &str) -> (i64, String) {\n    \
         (idutil::IdUtil::next_id(), text.to_string())\n}\n\n\
         /// Keeps the IDs a test saw in `$APP_IDS/<pid>`, for the test\n\
         /// of this test to compare.\n\
         pub fn keep(ids: &[i64]) {\n    \
         let dir = std::env::var(\"APP_IDS\").unwrap();\n    \
         let text: String = ids.iter().map(|id| format!(\"{id}\\n\")).collect();\n    \
         std::fs::write(format!(\"{dir}/{}\", std::process::id()), text).unwrap();\n}\n\n",
    );
    for n in 0..DOCTESTS {
        write!(
            lib,
            "/// Creates record {n}.\n///\n/// ```\n\
             /// let (id, _) = doc_app::create_{n}();\n\
             /// let mut ids = vec![id];\n\
             /// for _ in 0..2000 {{\n\
             ///     ids.push(doc_app::create(\"next\").0);\n\
             ///     if ids.len() == 1000 {{\n\
             ///         std::thread::sleep(std::time::Duration::from_millis(800)); // overlap\n\
             ///     }}\n\
             /// }}\n\
             /// assert!(ids.windows(2).all(|w| w[0] < w[1]));\n\
             /// # doc_app::keep(&ids);\n\
             /// ```\n\
             pub fn create_{n}() -> (i64, String) {{\n    create(\"record {n}\")\n}}\n\n"
        )
        .unwrap();
    }
    std::fs::write(dir.join("src/lib.rs"), lib).unwrap();
}

#[test]
fn an_application_s_doctests_run_in_parallel() {
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("doc-app");
    write_app(&work);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let ids = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(cargo)
        .args(["test", "--doc", "-q", "--", "--test-threads", "6"])
        .current_dir(&work)
        .env("CARGO_TARGET_DIR", work.join("target"))
        .env("IDUTIL_SHARD", "9")
        .env("APP_IDS", ids.path())
        // A directory of its own, as a developer's home would be.
        .env("IDUTIL_STATE_DIR", state.path())
        .env(
            "IDUTIL_ID_SPACE",
            format!("app-doctests-{}", std::process::id()),
        )
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo test --doc");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the application's doctests failed\nstdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains(&format!("{DOCTESTS} passed")),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let mut all = harness::Tally::new();
    let mut processes = 0;
    for entry in std::fs::read_dir(ids.path()).unwrap() {
        processes += 1;
        let entry = entry.unwrap();
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let who = format!("doctest {:?}", entry.file_name());
        all.add(text.lines().map(harness::parse_id), &who);
    }
    assert_eq!(processes, DOCTESTS);
    assert_eq!(all.len(), DOCTESTS * 2001);
}
