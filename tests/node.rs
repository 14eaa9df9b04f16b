//! IDs round-trip exactly through JSON in a real JavaScript engine (Node):
//! for JSON written by serde and by the web example's API, every ID that
//! `JSON.parse` reads is a safe integer whose `String()` is exactly the
//! digits in the raw JSON text; and the example's page script shows exactly
//! those digits. The command's JSON is checked in `cli/tests/node.rs`.
//!
//! Without `node` on the PATH these tests print a loud notice and pass,
//! except under `CI=true`, where they fail.

use idutil_harness as harness;

use harness::node::{assert_exact, check, node};

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
        Id::from_u64(0).unwrap(),
        Id::from_u64((1 << 53) - 2).unwrap(),
    ];
    ids.push("1452736581206048".parse().unwrap());
    // And IDs from a generator, across the second boundary where the
    // sequence wraps, near the end of the epoch range.
    let state = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(layout.last_unix_second() - 1);
    let generator = Generator::builder()
        .id_space(harness::space_for(state.path()))
        .shard(31)
        .state_dir(state.path())
        .clock(clock)
        .end_margin(std::time::Duration::ZERO)
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

#[cfg(all(feature = "sqlx", feature = "serde"))]
#[test]
fn web_api_ids_are_exact_in_javascript_and_on_the_page() {
    let Some(node) = node() else { return };
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let app = harness::web::WebApp::start(state.path(), 17);
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
    let out = harness::node::run_node(node, &[&script, &base]);
    assert!(
        out.status.success(),
        "the page script: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let (status, stderr) = app.stop();
    assert!(status.success(), "{status}: {stderr}");
}
