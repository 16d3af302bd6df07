// End-to-end test of the vrampool page in headless Chromium with real WebGPU
// (Debian's chromium with --enable-unsafe-webgpu gives a SwiftShader adapter).
// Needs the page built (`cargo xtask build`) and the harness built
// (`cargo build --release -p vrampool-cli`); scripts/test.sh does both.
//
// Writes e2e/page-replay.png (a screenshot during a replay) and
// e2e/figures.json (wasm size, frame times while replaying at 10k ops/s) in
// cargo's target directory (target/, or CARGO_TARGET_DIR).

import { chromium } from 'playwright-core';
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, statSync, writeFileSync, copyFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
// Cargo's target directory, as cargo says (CARGO_TARGET_DIR, or target/).
const target = JSON.parse(execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: root })).target_directory;
const out = join(target, 'e2e');
mkdirSync(out, { recursive: true });

function step(msg) { console.log(`e2e: ${msg}`); }

// The page's own server: `cargo xtask serve`, on a free port.
const server = spawn('cargo', ['xtask', 'serve', '--no-build', '--port', '0'], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((resolve, reject) => {
  let buf = '';
  server.stdout.on('data', (d) => {
    buf += d;
    const m = buf.match(/http:\/\/127\.0\.0\.1:\d+\//);
    if (m) resolve(m[0]);
  });
  server.on('exit', (c) => reject(new Error(`xtask serve exited with ${c}`)));
  setTimeout(() => reject(new Error('xtask serve printed no URL in 120 s')), 120_000);
});
step(`serving ${url}`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--enable-unsafe-webgpu', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--no-first-run',
    '--use-webgpu-adapter=swiftshader'],
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(url);

  const num = async (sel, attr = 'data-value') => Number(await page.locator(sel).getAttribute(attr));
  const waitFor = async (what, fn, timeout = 60_000) => {
    const t0 = Date.now();
    for (;;) {
      const v = await fn();
      if (v) return v;
      if (Date.now() - t0 > timeout) throw new Error(`timed out waiting for ${what}`);
      await page.waitForTimeout(50);
    }
  };

  // 1. A real WebGPU adapter.
  await waitFor('the device', async () => (await page.locator('#backend').getAttribute('data-kind')) !== 'starting');
  const kind = await page.locator('#backend').getAttribute('data-kind');
  const adapter = await page.evaluate(async () => {
    const a = await navigator.gpu?.requestAdapter();
    return a ? { vendor: a.info.vendor, architecture: a.info.architecture, maxBufferSize: a.limits.maxBufferSize } : null;
  });
  step(`backend ${kind}: ${await page.locator('#backend').textContent()}; adapter ${JSON.stringify(adapter)}`);
  assert.equal(kind, 'webgpu', 'the page runs on the browser\'s WebGPU device');
  assert.ok(adapter, 'navigator.gpu gives an adapter');
  const maxBuffer = await num('#backend', 'data-max-buffer');
  assert.ok(maxBuffer >= 256 * 2 ** 20);

  // The timeline takes at least 10 points a second.
  const p0 = await num('#timeline', 'data-points');
  await page.waitForTimeout(2000);
  const rate = ((await num('#timeline', 'data-points')) - p0) / 2;
  assert.ok(rate >= 10, `timeline updated ${rate} times a second`);
  step(`timeline: ${rate} updates a second`);

  // 2. Allocate: counters and chart move.
  const pointsBefore = await page.locator('#line-allocated').getAttribute('points');
  await page.fill('#alloc-n', '16');
  await page.selectOption('#alloc-size', '1048576');
  await page.click('#btn-alloc');
  await waitFor('16 MiB allocated', async () => (await num('#stat-allocated')) === 16 * 2 ** 20);
  assert.ok((await num('#ctr-device-allocs')) >= 1);
  assert.ok((await num('#stat-reserved')) >= 16 * 2 ** 20);
  await waitFor('the chart to draw it', async () => {
    const pts = await page.locator('#line-allocated').getAttribute('points');
    return pts !== pointsBefore && pts.split(' ').some((p) => Number(p.split(',')[1]) < 150);
  });
  step(`allocated 16 × 1 MiB: reserved ${await num('#stat-reserved')}, device allocations ${await num('#ctr-device-allocs')}`);

  // 3. free all + empty_cache: reserved drops by exactly what is reported.
  await page.click('#btn-free-all');
  await waitFor('allocated 0', async () => (await num('#stat-allocated')) === 0);
  const reservedBefore = await num('#stat-reserved');
  await page.click('#btn-empty-cache');
  await waitFor('the release', async () => (await page.locator('#released').getAttribute('data-bytes')) !== '');
  const released = await num('#released', 'data-bytes');
  await waitFor('reserved to drop', async () => (await num('#stat-reserved')) === reservedBefore - released);
  assert.ok(released > 0 && released === reservedBefore, `released ${released} of ${reservedBefore}`);
  step(`empty_cache released ${released}: reserved ${reservedBefore} -> ${await num('#stat-reserved')}`);

  // 4. Replay bundled traces to the end; the figures equal the harness's replay.
  const harness = join(target, 'release', 'vrampool');
  const frames = {};
  for (const name of ['resnet_train', 'gpt_train']) {
    await page.selectOption('#sample', name);
    await page.fill('#speed', '10000');
    // Frame times from requestAnimationFrame while the replay runs.
    await page.evaluate(() => {
      window.__frames = [];
      let last = performance.now();
      window.__recording = true;
      const tick = (t) => { window.__frames.push(t - last); last = t; if (window.__recording) requestAnimationFrame(tick); };
      requestAnimationFrame(tick);
    });
    await page.click('#btn-replay');
    await waitFor(`${name} to start`, async () => (await page.locator('#replay-status').textContent()).startsWith('replaying'));
    if (name === 'resnet_train') {
      await page.waitForTimeout(300);
      await page.screenshot({ path: join(out, 'page-replay.png') });
    }
    await waitFor(`${name} to finish`, async () => (await page.locator('#replay-result').getAttribute('data-done')) === 'true', 120_000);
    const ft = await page.evaluate(() => { window.__recording = false; return window.__frames.slice(1); });
    const sorted = [...ft].sort((a, b) => a - b);
    const p95 = sorted[Math.floor(sorted.length * 0.95)] ?? 0;
    const got = {
      ops: await num('#replay-result', 'data-ops'),
      peak_reserved: await num('#replay-result', 'data-peak-reserved'),
      device_allocs: await num('#replay-result', 'data-device-allocs'),
      cache_hits: await num('#replay-result', 'data-cache-hits'),
      ooms: await num('#replay-result', 'data-ooms'),
      millis: await num('#replay-result', 'data-millis'),
    };
    const sample = join(root, 'web', 'samples', `${name}.csv.gz`);
    const native = JSON.parse(execFileSync(harness, ['replay', '--simulate', '--json', '--max-buffer-size', String(maxBuffer), sample]))[0].report;
    step(`${name}: page ${JSON.stringify(got)} in ${(got.millis / 1000).toFixed(2)} s (${(got.ops / (got.millis / 1000)).toFixed(0)} ops/s); frames ${ft.length}, p95 ${p95.toFixed(1)} ms; harness peak_reserved ${native.peak_reserved}, device_allocs ${native.device_allocs}`);
    assert.equal(got.ops, native.allocs + native.frees);
    assert.equal(got.peak_reserved, native.peak_reserved);
    assert.equal(got.device_allocs, native.device_allocs);
    assert.equal(got.cache_hits, native.cache_hits);
    assert.equal(got.ooms, 0);
    const vsync = sorted[Math.floor(sorted.length / 2)];
    frames[name] = {
      events: got.ops, replay_seconds: got.millis / 1000, ops_per_s: got.ops / (got.millis / 1000),
      frames: ft.length, p50_ms: vsync, p95_ms: p95, max_ms: sorted[sorted.length - 1],
      frames_over_1_5_vsync: ft.filter((d) => d > 1.5 * vsync).length,
    };
  }

  // 5. A malformed trace: a clear message, and the page keeps working.
  await page.setInputFiles('#trace-file', {
    name: 'bad.csv', mimeType: 'text/csv',
    buffer: Buffer.from('Thread,Time,Action,Pointer,Size,Stream\n0,0,allocate,0x10,512,0x0\n0,0,allocate,0x20,12x,0x0\n'),
  });
  await waitFor('the error', async () => (await page.locator('#trace-error').textContent()).includes('line 3'));
  const msg = await page.locator('#trace-error').textContent();
  assert.match(msg, /bad\.csv: line 3: size `12x` is not a non-negative integer/);
  step(`malformed trace refused: ${msg}`);
  const before = await num('#ctr-hits');
  await page.click('#btn-alloc');
  await waitFor('the page to keep working', async () => (await num('#stat-allocated')) === 16 * 2 ** 20);
  assert.ok((await num('#ctr-hits')) >= before);

  // 6. Induced OOM: the pool releases, retries and reports; nothing invalid is handed out.
  await page.click('#btn-free-all');
  await page.fill('#alloc-n', '8');
  await page.click('#btn-alloc');
  await waitFor('8 MiB live', async () => (await num('#stat-allocated')) === 8 * 2 ** 20);
  await page.click('#btn-oom');
  await waitFor('an OOM', async () => (await num('#ctr-ooms')) >= 1);
  assert.ok((await num('#stat-reserved')) <= 8 * 2 ** 20 + 4 * 2 ** 20, 'the budget holds');
  assert.match(await page.locator('#error').textContent(), /out of memory|cannot allocate/i);
  step(`induced OOM: ${await page.locator('#error').textContent()}`);

  // 7. Device loss: destroy the WebGPU device under the pool. The loss is
  // reported, every allocation is refused with DeviceLost, figures and frees
  // keep working, and a new device brings a working pool.
  await page.click('#btn-free-all');
  await page.fill('#budget', '');
  await page.click('#btn-apply');
  const base = await num('#stat-allocated');
  await page.click('#btn-alloc');
  await waitFor('16 MiB more live', async () => (await num('#stat-allocated')) === base + 16 * 2 ** 20);
  await page.click('#btn-destroy-device');
  await waitFor('the loss to be reported', async () => (await page.locator('#device-lost').getAttribute('data-lost')) === 'true');
  const lost = (await page.locator('#device-lost').textContent()).trim();
  assert.match(lost, /destroyed/);
  await page.click('#btn-alloc');
  await waitFor('the allocation to be refused', async () => /device lost/i.test(await page.locator('#error').textContent()));
  const refused = await page.locator('#error').textContent();
  assert.equal(await num('#stat-allocated'), base + 16 * 2 ** 20, 'nothing allocated on the lost device');
  await page.click('#btn-free-all');
  await waitFor('frees to keep working', async () => (await num('#stat-allocated')) === base);
  await page.click('#btn-new-device');
  await waitFor('a new device', async () => (await page.locator('#device-lost').getAttribute('data-lost')) === 'false');
  await page.click('#btn-alloc');
  await waitFor('allocation on the new device', async () => (await num('#stat-allocated')) === 16 * 2 ** 20);
  assert.equal(await page.locator('#backend').getAttribute('data-kind'), 'webgpu');
  step(`device loss: ${lost} Then: ${refused} A new device allocates again.`);

  // 8. Train the MLP on the new device with int8 weights: the loss falls.
  await page.click('#btn-free-all');
  await page.fill('#budget', '');
  await page.click('#btn-apply');
  await page.selectOption('#dtype', 'int8');
  await page.locator('#batch').fill('128');
  await page.click('#btn-train');
  await waitFor('20 training steps', async () => (await num('#train-status', 'data-step')) >= 20, 120_000);
  await page.click('#btn-train');
  const train = await page.locator('#train-status').textContent();
  const [, first, last] = train.match(/loss ([\d.]+) → ([\d.]+)/);
  assert.ok(Number(last) < 0.8 * Number(first), train);
  step(`training: ${train}`);

  // The OOM above is the only error the page reported; nothing reached the console.
  assert.deepEqual(errors, [], 'no errors in the console');

  // 9. A browser without WebGPU: the page says so and runs on the simulated device.
  const plain = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-features=WebGPU', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  try {
    const p2 = await plain.newPage();
    await p2.goto(url);
    const gpu = await p2.evaluate(() => typeof navigator.gpu);
    for (let i = 0; i < 200 && (await p2.locator('#backend').getAttribute('data-kind')) === 'starting'; i++) await p2.waitForTimeout(50);
    assert.equal(await p2.locator('#backend').getAttribute('data-kind'), 'simulated', `navigator.gpu is ${gpu}`);
    const notice = await p2.locator('#no-webgpu').textContent();
    assert.match(notice, /No WebGPU device here/);
    await p2.click('#btn-alloc');
    for (let i = 0; i < 100 && Number(await p2.locator('#stat-allocated').getAttribute('data-value')) === 0; i++) await p2.waitForTimeout(50);
    assert.equal(Number(await p2.locator('#stat-allocated').getAttribute('data-value')), 16 * 2 ** 20);
    step(`without WebGPU (navigator.gpu ${gpu}): ${notice}`);
  } finally {
    await plain.close();
  }

  const wasm = readFileSync(join(target, 'site', 'pkg', 'vrampool_web_bg.wasm'));
  const figures = { adapter, wasm_bytes: wasm.length, wasm_gzip_bytes: gzipSync(wasm, { level: 9 }).length, replay: frames };
  writeFileSync(join(out, 'figures.json'), JSON.stringify(figures, null, 2));
  step(`figures: ${JSON.stringify(figures)}`);
  if (process.env.UPDATE_SCREENSHOT) copyFileSync(join(out, 'page-replay.png'), join(root, 'web', 'screenshot.png'));
  step('passed');
} catch (e) {
  failed = true;
  console.error(`e2e: FAILED: ${e.stack || e}`);
} finally {
  await browser.close();
  server.kill();
}
process.exit(failed ? 1 : 0);
