//! The web example's page in a real browser: headless Chromium, driven by
//! puppeteer-core (`tests/browser/page.js`), creates records from the page
//! and compares the IDs the page shows, and those its JavaScript holds and
//! sends back, with the server's raw JSON text, through `BigInt`.
//!
//! It needs `node`, Debian's `chromium-headless-shell` (or `chromium`) and
//! the pinned puppeteer-core: `npm ci --prefix tests/browser`. Without them
//! the test prints a loud notice and passes, except under `CI=true`, where
//! it fails.

#![cfg(all(feature = "sqlx", feature = "serde"))]

use idutil_harness as harness;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// What the test needs, or why it cannot run.
fn tools() -> Result<(PathBuf, PathBuf), String> {
    let node = on_path("node").ok_or("`node` is not on the PATH")?;
    let browser = ["chromium-headless-shell", "chromium"]
        .iter()
        .find_map(|name| on_path(name))
        .ok_or("neither `chromium-headless-shell` nor `chromium` is on the PATH")?;
    let module = browser_dir().join("node_modules/puppeteer-core/package.json");
    if !module.is_file() {
        return Err("puppeteer-core is not installed: run `npm ci --prefix tests/browser`".into());
    }
    Ok((node, browser))
}

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

#[test]
fn the_page_shows_and_sends_back_the_servers_exact_ids() {
    let (node, browser) = match tools() {
        Ok(tools) => tools,
        Err(why) => {
            harness::skipped(format_args!(
                "\n*** SKIPPED: {why}, so the page was NOT checked in a browser. \
                 Install Debian's chromium-headless-shell and run \
                 `npm ci --prefix tests/browser`. ***\n"
            ));
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let app = harness::web::WebApp::start(dir.path(), 21);
    let base = format!("http://{}", app.addr);

    let out = harness::output_within(
        Command::new(node)
            .arg(browser_dir().join("page.js"))
            .arg(&base)
            .arg(&browser),
        TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.starts_with("ok: 3 IDs exact"),
        "{}: {stderr}{stdout}",
        out.status
    );

    // The IDs the browser reported are the ones the server stored.
    let list = app.get("/api/records");
    let ids: Vec<u64> = serde_json::from_str::<Vec<serde_json::Value>>(&list.body)
        .unwrap()
        .iter()
        .map(|r| r["id"].as_u64().unwrap())
        .collect();
    let reported: Vec<u64> = stdout
        .trim()
        .rsplit(": ")
        .next()
        .unwrap()
        .split(' ')
        .map(|id| id.parse().unwrap())
        .collect();
    assert_eq!(reported, ids);
    let (status, stderr) = app.stop();
    assert!(status.success(), "{status}: {stderr}");
}
