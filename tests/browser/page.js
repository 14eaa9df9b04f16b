// Drives the web example's page in headless Chromium: creates records by
// typing into the form, then compares, digit for digit through BigInt,
// the IDs in the server's raw JSON text with the IDs the page shows and the
// IDs the page's JavaScript holds and sends back to the server.
//
//   node tests/browser/page.js BASE_URL CHROMIUM
//
// Prints "ok: ..." and exits 0, or prints why and exits 1.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const puppeteer = require("puppeteer-core");

const [base, executablePath] = process.argv.slice(2);
const MAX_SAFE = 9007199254740991n;
const TEXTS = ["first from the browser", "second \u{1F600}", "third"];

/// Every `"id":DIGITS` in a raw JSON text, as written.
function rawIds(text) {
  return [...text.matchAll(/"id":(\d+)/g)].map((m) => m[1]);
}

function same(what, a, b) {
  if (a.length !== b.length || a.some((x, i) => BigInt(x) !== BigInt(b[i]))) {
    throw new Error(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
  }
}

async function main() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "idutil-chromium-"));
  const browser = await puppeteer.launch({
    executablePath,
    headless: "shell",
    userDataDir: profile,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    const page = await browser.newPage();
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    await page.goto(base, { waitUntil: "load" });
    await page.waitForFunction(
      () => document.getElementById("status").textContent !== "Loading…",
    );

    // Create records from the page, keeping the raw text of each answer.
    const created = [];
    for (const [i, text] of TEXTS.entries()) {
      await page.type("#text", text);
      const answer = page.waitForResponse(
        (r) => r.url().endsWith("/api/records") && r.request().method() === "POST",
      );
      await page.keyboard.press("Enter");
      const response = await answer;
      if (response.status() !== 201) throw new Error(`POST: ${response.status()}`);
      const ids = rawIds(await response.text());
      if (ids.length !== 1) throw new Error("no id in the POST answer");
      created.push(ids[0]);
      await page.waitForFunction(
        (n) => document.querySelectorAll("#rows tr").length === n,
        {},
        i + 1,
      );
    }

    // The server's raw list, as text, outside the browser.
    const raw = await (await fetch(new URL("/api/records", base))).text();
    const serverIds = rawIds(raw);
    same("the list holds the created records", serverIds, created);
    for (const id of serverIds) {
      if (BigInt(id) > MAX_SAFE) throw new Error(`${id} is above 2^53 - 1`);
    }

    // What the page shows, newest first.
    const shown = await page.$$eval("#rows td.id", (tds) => tds.map((td) => td.textContent));
    same("the page shows the server's IDs", shown, serverIds.slice().reverse());
    const texts = await page.$$eval("#rows tr", (trs) => trs.map((tr) => tr.children[2].textContent));
    if (texts.join("|") !== TEXTS.slice().reverse().join("|")) {
      throw new Error(`the page shows texts ${JSON.stringify(texts)}`);
    }
    const status = await page.$eval("#status", (e) => [e.className, e.textContent]);
    if (status[0] === "bad" || !status[1].includes("every ID is an exact")) {
      throw new Error("status: " + status[1]);
    }

    // What the page's JavaScript holds after JSON.parse, and what the
    // server answers when JavaScript sends each ID back in a URL.
    const js = await page.evaluate(async () => {
      const records = await (await fetch("/api/records")).json();
      const back = [];
      for (const r of records) {
        const res = await fetch("/api/records/" + r.id);
        back.push({ status: res.status, text: await res.text() });
      }
      return {
        ids: records.map((r) => String(r.id)),
        safe: records.every((r) => Number.isSafeInteger(r.id)),
        back,
      };
    });
    if (!js.safe) throw new Error("JavaScript holds an ID that is not a safe integer");
    same("JavaScript's IDs", js.ids, serverIds);
    const echoed = js.back.map((b, i) => {
      if (b.status !== 200) throw new Error(`GET /api/records/${js.ids[i]}: ${b.status} ${b.text}`);
      return rawIds(b.text)[0];
    });
    same("the IDs JavaScript sent back", echoed, serverIds);

    if (pageErrors.length) throw new Error("page errors: " + pageErrors.join("; "));
    console.log(`ok: ${serverIds.length} IDs exact on the page and in JavaScript: ${serverIds.join(" ")}`);
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(String((e && e.stack) || e));
  process.exit(1);
});
