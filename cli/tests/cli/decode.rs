//! `idutil decode` from arguments, pipes, standard input and terminals.

use idutil_harness as harness;

use std::process::{Command, Stdio};

use idutil_harness::{run, run_input};

use crate::{idutil, text, BIN};

const VECTOR_LINE: &str =
    "id=1452736581206048 time=2021-12-13T13:53:03Z unix_seconds=1639403583 sequence=1 shard=0 clock=0\n";
const MAX_LINE: &str =
    "id=9007199254740991 time=2136-02-07T06:28:15Z unix_seconds=5241652095 sequence=65535 shard=31 clock=0\n";

#[test]
fn next_piped_into_decode() {
    let dir = tempfile::tempdir().unwrap();
    let mut next = idutil(dir.path())
        .args(["next", "-n", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start idutil next");
    let pipe = next.stdout.take().unwrap();
    let decode = run(idutil(dir.path()).arg("decode").stdin(pipe));
    let next = next.wait_with_output().unwrap();
    assert!(next.status.success(), "next: {}", text(&next.stderr));
    let stdout = text(&decode.stdout);
    assert!(decode.status.success(), "decode: {}", text(&decode.stderr));
    assert!(decode.stderr.is_empty(), "{}", text(&decode.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| {
            let id = l.strip_prefix("id=").and_then(|r| r.split(' ').next());
            id.and_then(|id| id.parse().ok()).expect(l)
        })
        .collect();
    assert!(ids[0] < ids[1], "{ids:?}");
    for line in &lines {
        assert!(line.contains(" shard=1 clock=0"), "{line}");
    }
}

#[test]
fn decode_reads_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = b"1452736581206048\n\n   \n  9007199254740991 \r\n\t1452736581206048";
    let out = run_input(idutil(dir.path()).arg("decode"), input);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{VECTOR_LINE}{MAX_LINE}{VECTOR_LINE}")
    );

    // Arguments win over standard input.
    let out = run_input(
        idutil(dir.path()).args(["decode", "9007199254740991"]),
        b"junk\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), MAX_LINE);

    // Empty input: nothing to decode, not an error.
    let out = run_input(idutil(dir.path()).arg("decode"), b"");
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty());
    let out = run_input(idutil(dir.path()).args(["decode", "--json"]), b"\n\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[]\n");
}

#[test]
fn a_bad_line_on_standard_input_stops_decoding_with_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let input = b"1452736581206048\n\nx\n9007199254740991\n";
    let out = run_input(idutil(dir.path()).arg("decode"), input);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr,
        "idutil: bad input: line 3: invalid ID \"x\": not a decimal integer\n"
    );
    // The good line before it is out; nothing after it is.
    assert_eq!(text(&out.stdout), VECTOR_LINE);

    // With --json, what came before is an unclosed array: not valid JSON.
    let out = run_input(idutil(dir.path()).args(["decode", "--json"]), input);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("line 3: "),
        "{}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("[{\"id\":1452736581206048,"), "{stdout}");
    assert!(serde_json::from_str::<serde_json::Value>(&stdout).is_err());
}

#[test]
fn decode_json_keys_come_in_a_stable_order_id_first() {
    let dir = tempfile::tempdir().unwrap();
    let want = "[{\"id\":1452736581206048,\"time\":\"2021-12-13T13:53:03Z\",\"unix_seconds\":1639403583,\
                \"sequence\":1,\"shard\":0,\"clock\":0},\
                {\"id\":9007199254740991,\"time\":\"2136-02-07T06:28:15Z\",\"unix_seconds\":5241652095,\
                \"sequence\":65535,\"shard\":31,\"clock\":0}]\n";
    let args = ["decode", "--json", "1452736581206048", "9007199254740991"];
    let out = run(idutil(dir.path()).args(args));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), want);
    let out = run_input(
        idutil(dir.path()).args(["decode", "--json"]),
        b"1452736581206048\n9007199254740991\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), want, "the same from standard input");
}

#[test]
fn decode_from_a_terminal_asks_for_ids_instead_of_waiting() {
    let dir = tempfile::tempdir().unwrap();
    // `script` gives the command a terminal for standard input.
    let Ok(out) = Command::new("script")
        .args(["-qec", &format!("{BIN} decode"), "/dev/null"])
        .env("IDUTIL_STATE_DIR", dir.path())
        .stdin(Stdio::null())
        .output()
    else {
        harness::skipped(format_args!(
            "SKIPPED: no `script` command to give idutil a terminal"
        ));
        return;
    };
    let output = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{output}");
    assert!(
        output.contains("usage error: no IDs") && output.contains("'idutil decode --help'"),
        "{output}"
    );
}

#[test]
fn next_json_piped_into_decode_and_seconds_are_unix_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let next = run(idutil(dir.path()).args(["next", "-n", "1500", "--json"]));
    assert!(next.status.success(), "{}", text(&next.stderr));
    let ids: Vec<u64> = serde_json::from_str(&text(&next.stdout)).unwrap();
    // One line of about 25 KB: read as words, not as one ID per line.
    let decode = run_input(
        idutil(dir.path()).args(["decode", "--json"]),
        next.stdout.as_bytes(),
    );
    assert!(decode.status.success(), "{}", text(&decode.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text(&decode.stdout)).unwrap();
    assert_eq!(rows.len(), ids.len());
    for (row, &id) in rows.iter().zip(&ids) {
        assert_eq!(row["id"], id);
        let typed = idutil::Id::from_u64(id).unwrap();
        // One meaning of seconds: the library's `unix_seconds`.
        assert_eq!(row["unix_seconds"], typed.unix_seconds());
        assert!(row.get("seconds").is_none());
    }
    // The string form's array too, and IDs several to a line.
    let quoted = format!("[\"{}\",\n\"{}\"] {}\n", ids[0], ids[1], ids[2]);
    let out = run_input(idutil(dir.path()).arg("decode"), quoted.as_bytes());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 3);
    // An unclosed quote is no ID, and says where.
    let out = run_input(idutil(dir.path()).arg("decode"), b"1\n\"5\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("line 2: invalid ID"),
        "{}",
        text(&out.stderr)
    );
}

/// Junk on the command line is quoted cut short, as on standard input: a
/// 10,000-digit argument (or unknown flag) never comes back whole.
#[test]
fn a_huge_argument_is_cut_short_in_the_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let digits = "9".repeat(10_000);
    for args in [
        vec!["decode", digits.as_str()],
        vec!["decode", "1452736581206048", digits.as_str()],
    ] {
        let out = run(idutil(dir.path()).args(&args));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.len() < 300, "{} bytes: {stderr}", stderr.len());
        assert!(stderr.contains("... (10000 bytes)"), "{stderr}");
        assert!(stderr.starts_with("idutil: usage error: "), "{stderr}");
    }
    let flag = format!("--{}", "x".repeat(10_000));
    let out = run(idutil(dir.path()).args(["decode", flag.as_str()]));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.len() < 300, "{} bytes: {stderr}", stderr.len());
}
