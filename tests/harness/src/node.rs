//! Node, and a check that every ID in a JSON text reads exactly in
//! JavaScript.

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

/// `node`, or `None` (with a loud notice) when it is missing outside CI.
pub fn node() -> Option<&'static str> {
    let found = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("node");
    }
    crate::skip::skipped(format_args!(
        "\n*** SKIPPED: `node` is not on the PATH, so IDs were NOT checked in a \
         JavaScript engine. Install Node.js to run this test. ***\n"
    ));
    None
}

/// Runs `node` with a time limit.
pub fn run_node(node: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    crate::command::output_within(
        Command::new(node).args(args.iter().map(|a| a.as_ref())),
        NODE_TIMEOUT,
    )
}

/// Writes `json` to a file and runs the checker on it; `Ok` with node's
/// report, or `Err` with its complaint.
pub fn check(
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

/// Panics with node's complaint unless [`check`] passes.
pub fn assert_exact(node: &str, dir: &Path, json: &str, key: &str, required: &[&str]) {
    if let Err(e) = check(node, dir, json, key, required) {
        panic!("{e}\nJSON: {}", &json[..json.len().min(2000)]);
    }
}
