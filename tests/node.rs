//! IDs round-trip exactly through JSON in a real JavaScript engine (Node):
//! for JSON written by serde, by the command (`next --json`, `decode --json`)
//! and by the web example's API, every ID that `JSON.parse` reads is a safe
//! integer whose `String()` is exactly the digits in the raw JSON text; and
//! the example's page script shows exactly those digits.
//!
//! Without `node` on the PATH these tests print a loud notice and pass,
//! except under `CI=true`, where they fail.

mod web_example;

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

const NODE_TIMEOUT: Duration = Duration::from_secs(60);

/// Checks a JSON file: `node check.js FILE KEY [REQUIRED...]`.
///
/// The tokens are taken from the raw text with a regular expression (every
/// number in a top-level array when KEY is `[]`, else every value of the
/// key KEY, quoted or not), the values from `JSON.parse`, in document order.
/// Each value must be a safe integer (or a string of one) whose decimal text
/// is exactly its token. Each REQUIRED token must occur.
const CHECK_JS: &str = r#"
"use strict";
const fs = require("fs");
const [file, key, ...required] = process.argv.slice(2);
const raw = fs.readFileSync(file, "utf8");
const NUMBER = String.raw`-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?`;
let tokens, values;
const parsed = JSON.parse(raw);
if (key === "[]") {
  tokens = [...raw.matchAll(new RegExp(NUMBER, "g"))].map(m => m[0]);
  if (!Array.isArray(parsed)) throw new Error("not an array");
  values = parsed;
} else {
  const re = new RegExp(String.raw`"${key}"\s*:\s*("?)(${NUMBER})\1`, "g");
  tokens = [...raw.matchAll(re)].map(m => m[2]);
  values = [];
  (function walk(v) {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v !== null && typeof v === "object") {
      for (const [k, x] of Object.entries(v)) {
        if (k === key) values.push(x); else walk(x);
      }
    }
  })(parsed);
}
if (tokens.length === 0) throw new Error("no IDs found under " + key);
if (tokens.length !== values.length) {
  throw new Error(`${tokens.length} tokens in the text but ${values.length} values`);
}
tokens.forEach((token, i) => {
  const v = values[i];
  const n = typeof v === "string" ? Number(v) : v;
  if (typeof n !== "number" || !Number.isSafeInteger(n)) {
    throw new Error(`ID #${i} ${token} is read as ${String(v)}: not a safe integer`);
  }
  if (String(v) !== token || String(n) !== token) {
    throw new Error(`ID #${i}: the text says ${token}, JavaScript reads ${String(v)}`);
  }
});
for (const r of required) {
  if (!tokens.includes(r)) throw new Error("missing " + r);
}
console.log(`ok: ${tokens.length} IDs exact`);
"#;

/// Runs the example's page script against the live server with a minimal
/// DOM: `node page.js BASE_URL`. Checks the rows it shows against the raw
/// API text, then submits the form and checks the new row.
#[cfg(all(feature = "sqlx", feature = "serde"))]
const PAGE_JS: &str = r#"
"use strict";
const base = process.argv[2];
const realFetch = fetch;

function element(id) {
  return {
    id, className: "", textContent: "", value: "", children: [], handlers: {},
    appendChild(c) { this.children.push(c); return c; },
    replaceChildren(...c) { this.children = c; },
    addEventListener(type, f) { this.handlers[type] = f; },
  };
}
const elements = {};
globalThis.document = {
  getElementById: id => (elements[id] ??= element(id)),
  createElement: tag => element(tag),
};
globalThis.fetch = (url, options) => realFetch(new URL(url, base), options);

async function settled(what) {
  const deadline = Date.now() + 10000;
  while (!what()) {
    if (Date.now() > deadline) throw new Error("the page did not update");
    await new Promise(r => setTimeout(r, 10));
  }
}

async function rawIds() {
  const raw = await (await realFetch(new URL("/api/records", base))).text();
  return [...raw.matchAll(/"id":(\d+)/g)].map(m => m[1]);
}

function shown() {
  return elements.rows.children.map(tr => tr.children[0].textContent);
}

async function main() {
  const html = await (await realFetch(new URL("/", base))).text();
  const script = html.match(/<script>([\s\S]*?)<\/script>/)[1];
  new Function(script)();
  await settled(() => elements.status && elements.status.textContent !== "");
  const ids = await rawIds();
  if (ids.length === 0) throw new Error("no records");
  const expected = ids.slice().reverse().join(",");
  if (shown().join(",") !== expected) {
    throw new Error(`the page shows ${shown()} but the API says ${expected}`);
  }
  if (elements.status.className === "bad" || !elements.status.textContent.includes("every ID is an exact")) {
    throw new Error("status: " + elements.status.textContent);
  }

  document.getElementById("text").value = "from the page";
  await elements.add.handlers.submit({ preventDefault() {} });
  await settled(() => elements.rows.children.length === ids.length + 1);
  const after = await rawIds();
  const newest = after[after.length - 1];
  if (shown()[0] !== newest || elements.rows.children[0].children[2].textContent !== "from the page") {
    throw new Error(`the new row shows ${shown()[0]}, the API says ${newest}`);
  }
  console.log(`ok: the page shows ${after.length} IDs exactly`);
}
main().catch(e => { console.error(String(e && e.stack || e)); process.exit(1); });
"#;

/// `node`, or `None` (with a loud notice) when it is missing outside CI.
fn node() -> Option<&'static str> {
    let found = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("node");
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("node is not installed, and CI=true requires the JavaScript check");
    }
    common::skipped(format_args!(
        "\n*** SKIPPED: `node` is not on the PATH, so IDs were NOT checked in a \
         JavaScript engine. Install Node.js to run this test. ***\n"
    ));
    None
}

/// Runs `node` with a time limit.
fn run_node(node: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    common::output_within(
        Command::new(node).args(args.iter().map(|a| a.as_ref())),
        NODE_TIMEOUT,
    )
}

/// Writes `json` to a file and runs the checker on it; `Ok` with node's
/// report, or `Err` with its complaint.
fn check(
    node: &str,
    dir: &Path,
    json: &str,
    key: &str,
    required: &[&str],
) -> Result<String, String> {
    let script = dir.join("check.js");
    std::fs::write(&script, CHECK_JS).unwrap();
    let file = dir.join("ids.json");
    std::fs::write(&file, json).unwrap();
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&script, &file, &key];
    args.extend(required.iter().map(|r| r as &dyn AsRef<std::ffi::OsStr>));
    let out = run_node(node, &args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() && stdout.starts_with("ok") {
        Ok(stdout)
    } else {
        Err(format!("{}: {stderr}{stdout}", out.status))
    }
}

fn assert_exact(node: &str, dir: &Path, json: &str, key: &str, required: &[&str]) {
    if let Err(e) = check(node, dir, json, key, required) {
        panic!("{e}\nJSON: {}", &json[..json.len().min(2000)]);
    }
}

#[test]
fn the_check_catches_numbers_javascript_cannot_hold() {
    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_exact(
        node,
        d,
        "[0, 9007199254740991]",
        "[]",
        &["9007199254740991"],
    );
    assert_exact(node, d, r#"{"id":"9007199254740991"}"#, "id", &[]);
    for bad in [
        "[9007199254740992]",                      // 2^53: not safe
        "[9007199254740993]",                      // read as 9007199254740992
        "[18014398509481985]",                     // far above
        "[1452736581206048.0]",                    // a float's text
        "[1e3]",                                   // an exponent
        r#"[{"id":9007199254740993}]"#,            // under a key
        r#"[{"id":"9007199254740993"}]"#,          // as a string
        r#"{"id":7,"x":{"id":9007199254740992}}"#, // nested
    ] {
        let key = if bad.contains("\"id\"") { "id" } else { "[]" };
        assert!(check(node, d, bad, key, &[]).is_err(), "{bad} passed");
    }
    assert!(
        check(node, d, "[1, 2]", "[]", &["9007199254740991"]).is_err(),
        "a required ID that is missing is an error"
    );
}

#[cfg(feature = "serde")]
#[test]
fn serde_json_ids_are_exact_in_javascript() {
    use idutil::{Generator, Id, Layout, ManualClock, Parts};

    #[derive(serde::Serialize)]
    struct Row {
        id: Id,
        #[serde(with = "idutil::serde::string")]
        text: Id,
    }

    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::DEFAULT;
    let last = layout
        .encode(Parts {
            seconds: layout.max_seconds(),
            clock: 0,
            sequence: layout.max_sequence(),
            shard: layout.max_shard(),
        })
        .unwrap();
    assert_eq!(last, Id::MAX);
    let mut ids = vec![
        Id::MAX,
        Id::new(0).unwrap(),
        Id::new((1 << 53) - 2).unwrap(),
    ];
    ids.push("1452736581206048".parse().unwrap());
    // And IDs from a generator, across the second boundary where the
    // sequence wraps, near the end of the epoch range.
    let state = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(layout.last_unix_second() - 1);
    let generator = Generator::builder()
        .id_space(common::space_for(state.path()))
        .shard(31)
        .state_dir(state.path())
        .clock(clock)
        .open()
        .unwrap();
    ids.extend(generator.next_ids(70_000).unwrap().step_by(97));
    ids.push(generator.next_id().unwrap());

    let rows: Vec<Row> = ids.iter().map(|&id| Row { id, text: id }).collect();
    let json = serde_json::to_string_pretty(&rows).unwrap();
    assert_exact(node, dir.path(), &json, "id", &["9007199254740991", "0"]);
    assert_exact(node, dir.path(), &json, "text", &["9007199254740991"]);
    let plain = serde_json::to_string(&ids).unwrap();
    assert_exact(node, dir.path(), &plain, "[]", &["9007199254740991"]);
}

#[cfg(feature = "cli")]
#[test]
fn command_json_ids_are_exact_in_javascript() {
    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let idutil = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_idutil"))
            .args(args)
            .env("IDUTIL_STATE_DIR", state.path())
            .env("IDUTIL_ID_SPACE", common::space_for(state.path()))
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

#[cfg(all(feature = "sqlx", feature = "serde"))]
#[test]
fn web_api_ids_are_exact_in_javascript_and_on_the_page() {
    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let app = web_example::WebApp::start(state.path(), 17);
    for i in 0..5 {
        let r = app.post_json("/api/records", &format!(r#"{{"text":"record {i}"}}"#));
        assert_eq!(r.status, 201, "{r:?}");
    }
    let list = app.get("/api/records");
    assert_eq!(list.status, 200);
    assert_exact(node, dir.path(), &list.body, "id", &[]);

    let script = dir.path().join("page.js");
    std::fs::write(&script, PAGE_JS).unwrap();
    let base = format!("http://{}", app.addr);
    let out = run_node(node, &[&script, &base]);
    assert!(
        out.status.success(),
        "the page script: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let (status, stderr) = app.stop();
    assert!(status.success(), "{status}: {stderr}");
}
