//! IDs the command writes as JSON (`next --json`, `decode --json`) read
//! exactly in a real JavaScript engine (Node): every ID that `JSON.parse`
//! reads is a safe integer whose `String()` is exactly the digits in the
//! raw JSON text.
//!
//! Without `node` on the PATH this test prints a loud notice and passes,
//! except under `CI=true`, where it fails.

use idutil_harness as harness;

use std::process::Command;

use harness::node::{assert_exact, node};

#[test]
fn command_json_ids_are_exact_in_javascript() {
    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let idutil = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
            .args(args)
            .env("IDUTIL_STATE_DIR", state.path())
            .env("IDUTIL_ID_SPACE", harness::space_for(state.path()))
            .env("IDUTIL_SHARD", "31")
            .output()
            .unwrap();
        assert!(out.status.success(), "idutil {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    // Enough IDs to borrow seconds: the sequence wraps within the batch.
    let next = idutil(&["next", "-n", "70000", "--json"]);
    assert_exact(node, dir.path(), &next, "[]", &[]);

    let ids: Vec<u64> = serde_json::from_str(&next).unwrap();
    let mut args: Vec<String> = vec!["decode".into(), "--json".into()];
    args.extend(ids.iter().step_by(500).map(u64::to_string));
    args.extend(["9007199254740991", "0", "1452736581206048"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let decoded = idutil(&args);
    assert_exact(
        node,
        dir.path(),
        &decoded,
        "id",
        &["9007199254740991", "0", "1452736581206048"],
    );
}
