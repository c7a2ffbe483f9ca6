// Shared by the browser tests: a real course-forum server of our own (fresh database, seeded
// demo forum, own Redis key prefix, free port) and a headless Debian Chromium.
import { spawn, execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { chromium } from 'playwright-core';

const run = promisify(execFile);
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const bin = process.env.COURSE_FORUM_BIN ?? join(repoRoot, 'target/debug/course-forum');
const adminUrl = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const artifacts = join(repoRoot, 'test-artifacts');

function databaseUrl(name) {
  const slash = adminUrl.lastIndexOf('/');
  return `${adminUrl.slice(0, slash)}/${name}`;
}

async function psql(sql, url = adminUrl) {
  await run('psql', ['-X', '-q', '-w', '-v', 'ON_ERROR_STOP=1', '-d', url, '-c', sql]);
}

export function freePort() {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once('error', fail);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => ok(port));
    });
  });
}

/** Starts a server (with `extraEnv` added to its settings); call `stop()` (in
 * `after`/`finally`) to stop it and drop its database. */
export async function startServer(extraEnv = {}) {
  const id = randomUUID().replaceAll('-', '');
  const database = `cf_browser_${id}`;
  const work = await mkdtemp(join(tmpdir(), 'cf-browser-'));
  const port = await freePort();
  const env = {
    ...process.env,
    DATABASE_URL: databaseUrl(database),
    REDIS_URL: redisUrl,
    REDIS_KEY_PREFIX: `cfb${id}`,
    JWT_SECRET: 'browser-test-secret-0123456789',
    BIND: `127.0.0.1:${port}`,
    PLAYGROUND_DIR: join(repoRoot, 'web-playground/dist'),
    DEMO_USERS_FILE: join(work, 'demo.json'),
    LOG_FORMAT: 'text',
    ...extraEnv,
  };
  await psql(`CREATE DATABASE "${database}"`);
  let child;
  let log = '';
  const stop = async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((ok) => child.once('exit', ok));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    await psql(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`).catch((e) => console.error(e.message));
    // The Redis keys under our prefix (best effort: redis-cli may be missing).
    await run('sh', ['-c', `redis-cli -u "$1" --scan --pattern "$2*" | xargs -r redis-cli -u "$1" del >/dev/null`, 'sh', redisUrl, env.REDIS_KEY_PREFIX]).catch(() => {});
    await rm(work, { recursive: true, force: true });
  };
  try {
    await run(bin, ['migrate'], { env });
    const { stdout } = await run(bin, ['seed', '--demo'], { env, maxBuffer: 16 << 20 });
    await writeFile(env.DEMO_USERS_FILE, stdout);
    const demo = JSON.parse(stdout);
    child = spawn(bin, ['serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (d) => (log += d));
    child.stderr.on('data', (d) => (log += d));
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`server exited (${child.exitCode}):\n${log}`);
      try {
        if ((await fetch(`${url}/healthz`)).ok) break;
      } catch {}
      if (Date.now() > deadline) throw new Error(`server did not answer /healthz in 30 s:\n${log}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    /** Mints a bearer token for a user (global id) valid for `ttl` (e.g. `4s`). */
    const token = async (user, ttl) => (await run(bin, ['token', '--user', user, '--ttl', ttl], { env })).stdout.trim();
    /** Runs SQL on the server's own database: for settings no mutation can make yet. */
    const sql = (text) => psql(text, env.DATABASE_URL);
    return { url, demo, stop, token, sql, log: () => log };
  } catch (err) {
    await stop();
    throw err;
  }
}

export async function launchBrowser() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
  });
}

/** Aborts every request that does not go to the loopback server; returns the list of them. */
export async function blockOutside(context) {
  const blocked = [];
  await context.route('**/*', (route) => {
    const { hostname, protocol } = new URL(route.request().url());
    if ((protocol === 'http:' || protocol === 'ws:') && ['127.0.0.1', 'localhost', '[::1]'].includes(hostname)) {
      return route.continue();
    }
    blocked.push(route.request().url());
    return route.abort('blockedbyclient');
  });
  return blocked;
}

/** Runs `body`; if it throws, saves a screenshot of every page in `pages` to test-artifacts/. */
export async function screenshotsOnFailure(name, pages, body) {
  try {
    await body();
  } catch (err) {
    await mkdir(artifacts, { recursive: true });
    for (const [label, page] of Object.entries(pages())) {
      const file = join(artifacts, `${name}-${label}.png`);
      await page.screenshot({ path: file, fullPage: true }).then(
        () => console.error(`screenshot: ${file}`),
        (e) => console.error(`screenshot ${file} failed: ${e.message}`),
      );
    }
    throw err;
  }
}

/** A GraphQL call from outside the browser, as another client of the same server would make
 * it; throws on any error in the answer. */
export async function graphqlAs(server, token, query, variables = {}) {
  const res = await fetch(`${server.url}/graphql`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = await res.json();
  if (body.errors?.length) throw new Error(`GraphQL errors: ${JSON.stringify(body.errors)}`);
  return body.data;
}

/** A demo user from `seed --demo` (id, handle, token, courses). */
export function demoUser(server, handle) {
  const user = server.demo.users.find((u) => u.handle === handle);
  if (!user) throw new Error(`no demo user @${handle}`);
  return user;
}

/** A new browser context (outside requests blocked) with the demo open, signed in as `handle`
 * through the user picker. */
export async function demoPageAs(browser, server, handle) {
  const context = await browser.newContext();
  const blocked = await blockOutside(context);
  const page = await context.newPage();
  page.on('pageerror', (e) => console.error(`[${handle}] page error: ${e}`));
  await page.goto(`${server.url}/demo`);
  await page.getByTestId(`user-${handle}`).click();
  await page.getByTestId('whoami').getByText(`@${handle}`).waitFor();
  return { page, blocked };
}

/** Polls `probe` (async, returns a value) every 100 ms until `ok(value)`, for at most `ms`;
 * returns the last value, or throws with `what` and that value. */
export async function until(what, probe, ok, ms = 5000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (ok(value)) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms (last: ${JSON.stringify(value)})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
