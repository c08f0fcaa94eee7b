// The dashboard in a real browser: Debian's Chromium, driven by playwright-core (no browser
// download). Run by tests/web_browser.rs, which starts the server and the tasks:
//
//   node tests/browser/dashboard.mjs '{"base":..., "finished":UUID, "calls":N, "compressions":N,
//                                      "running":UUID, "shots":DIR, "readme_shot":PATH|null}'
//
// 1. the task list shows both tasks;
// 2. the finished task's page: the context chart (one point per LLM call, the threshold, the
//    compressions) and the messages are rendered; hostile content stays text (no dialog opens,
//    no <img> or javascript: link in the messages);
// 3. the running task's page: press Pause, and see the status turn to "paused" by itself (live
//    update over server-sent events, no reload).
// Prints one JSON line of findings; exits non-zero on the first failed check.

import { chromium } from "playwright-core";
import path from "node:path";
import fs from "node:fs";

const opts = JSON.parse(process.argv[2]);
const executablePath = process.env.CTXHOST_CHROMIUM || "/usr/bin/chromium";
const findings = {};

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
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
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const dialogs = [];
  page.on("dialog", async (d) => {
    dialogs.push(d.message());
    await d.dismiss();
  });
  const consoleErrors = [];
  page.on("console", (m) => {
    if (m.type() === "error") consoleErrors.push(m.text());
  });
  fs.mkdirSync(opts.shots, { recursive: true });

  // 1. The task list.
  await page.goto(`${opts.base}/tasks`);
  await page.waitForSelector("table#tasks");
  for (const uuid of [opts.finished, opts.running]) {
    check(await page.locator(`tr.task-row[data-uuid="${uuid}"]`).count() === 1, `task ${uuid} listed`);
  }
  findings.list_rows = await page.locator("tr.task-row").count();
  await page.waitForSelector("#live-state.on", { timeout: 10000 });
  await page.screenshot({ path: path.join(opts.shots, "tasks.png"), fullPage: true });

  // 2. The finished task with a compression.
  await page.goto(`${opts.base}/tasks/${opts.finished}`);
  const chart = page.locator("svg#context-chart");
  await chart.waitFor();
  check(await chart.isVisible(), "the context chart is visible");
  const box = await chart.boundingBox();
  check(box && box.width > 300 && box.height > 100, `the chart has a size (${JSON.stringify(box)})`);
  findings.chart_points = await page.locator("svg#context-chart circle.call").count();
  findings.chart_compressions = await page.locator("svg#context-chart g.compression").count();
  findings.threshold_lines = await page.locator("svg#context-chart line.threshold").count();
  check(findings.chart_points === opts.calls, `${opts.calls} points, got ${findings.chart_points}`);
  check(findings.chart_compressions === opts.compressions,
    `${opts.compressions} compression markers, got ${findings.chart_compressions}`);
  check(findings.threshold_lines === 1, "one threshold line");
  const line = await page.locator("svg#context-chart polyline.series").getAttribute("points");
  check(line && line.split(" ").length === opts.calls + 2 * opts.compressions,
    "the line has a vertex per call and two per compression (before, after)");
  const messages = page.locator("ol#messages li.message");
  findings.messages = await messages.count();
  check(findings.messages > 0, "messages are rendered");
  check(await page.locator("ol#messages li.message[data-role=system]").count() === 1, "the system prompt is there");
  const answer = await page.locator("ol#messages li.message").last().locator("pre.content").innerText();
  findings.answer = answer;
  check(answer.includes("<img src=x onerror=alert(1)>"), "hostile text shown as text");
  check(await page.locator("ol#messages img, ol#messages script, ol#messages a[href^='javascript:']").count() === 0,
    "no markup from message content");
  await page.screenshot({ path: path.join(opts.shots, "task-finished.png"), fullPage: true });
  if (opts.readme_shot) {
    // The README's picture: the top of the page (status, actions, chart), small.
    const small = await browser.newContext({ viewport: { width: 1000, height: 640 }, deviceScaleFactor: 1 });
    const p2 = await small.newPage();
    await p2.goto(`${opts.base}/tasks/${opts.finished}`);
    await p2.locator("svg#context-chart").waitFor();
    await p2.evaluate(() => document.querySelector("details.row-fields")?.removeAttribute("open"));
    const chartBox = await p2.locator("#task-chart").boundingBox();
    await p2.setViewportSize({ width: 1000, height: Math.ceil(chartBox.y + chartBox.height + 12) });
    await p2.screenshot({ path: opts.readme_shot });
    await small.close();
  }

  // 2b. On a phone (390 px wide): the page never scrolls sideways (tables scroll inside their
  // own box), the chart's labels stay legible, and a UUID prefix in the URL reaches the task.
  {
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 1 });
    const p3 = await phone.newPage();
    for (const url of [`${opts.base}/tasks`, `${opts.base}/tasks/${opts.finished}`]) {
      await p3.goto(url);
      const wide = await p3.evaluate(() => document.documentElement.scrollWidth);
      check(wide <= 390, `${url} fits a 390 px screen (page width ${wide})`);
    }
    await p3.locator("svg#context-chart").waitFor();
    const label = await p3.evaluate(() => {
      const heights = [...document.querySelectorAll("svg#context-chart text")]
        .map((t) => t.getBoundingClientRect().height).filter((h) => h > 0);
      return heights.length ? Math.min(...heights) : 0;
    });
    findings.phone_min_label_px = label;
    check(label >= 8, `chart labels are at least 8 px high on a phone (smallest ${label})`);
    await p3.screenshot({ path: path.join(opts.shots, "task-phone.png"), fullPage: true });
    await p3.goto(`${opts.base}/tasks/${opts.finished.slice(0, 8)}`);
    check(p3.url().includes(opts.finished), `a UUID prefix reaches the task (at ${p3.url()})`);
    await phone.close();
  }

  // 3. Pause the running task from its page and watch it become paused.
  await page.goto(`${opts.base}/tasks/${opts.running}`);
  await page.waitForSelector('#status[data-status="running"]');
  await page.waitForSelector("#live-state.on", { timeout: 10000 });
  await page.fill('input[name="reason"]', "paused from the browser test");
  // The page the pause redirects to subscribes to /events only after the task has paused (its
  // request is held until then): the one change it must show happened between its render and
  // its subscription, which no `change` event reports — the page resyncs when it connects.
  let held = 0;
  await page.route("**/events", async (route) => {
    held += 1;
    const deadline = Date.now() + 60000;
    while (Date.now() < deadline) {
      const r = await page.context().request.get(`${opts.base}/tasks/${opts.running}`);
      if ((await r.text()).includes('data-status="paused"')) break;
      await new Promise((done) => setTimeout(done, 200));
    }
    await route.continue();
  });
  await Promise.all([page.waitForURL(/notice=pause-requested/), page.click("#pause")]);
  findings.notice = await page.locator("#notice").innerText();
  check(findings.notice.includes("Pause requested"), "the pause notice is shown");
  // No reload from here: the page's live update must bring the new status.
  await page.waitForSelector('#status[data-status="paused"]', { timeout: 90000 });
  findings.live_refreshes = Number(await page.evaluate(() => document.body.dataset.refreshed || 0));
  findings.held_subscriptions = held;
  check(held >= 1, "the new page's subscription was held until the task paused");
  check(findings.live_refreshes >= 1, "the status came by a live update");
  check(await page.locator("#resume").count() === 1, "a paused task offers Resume");
  await page.screenshot({ path: path.join(opts.shots, "task-paused.png"), fullPage: true });

  check(dialogs.length === 0, `no dialog opened (got ${JSON.stringify(dialogs)})`);
  findings.console_errors = consoleErrors;
  check(consoleErrors.length === 0, `no console errors (got ${JSON.stringify(consoleErrors)})`);
  console.log(JSON.stringify({ ok: true, ...findings }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: String(e && e.stack || e), ...findings }));
  process.exitCode = 1;
} finally {
  await browser.close();
}
