// A browser app served from another origin: from an origin listed in CORS_ALLOWED_ORIGINS it
// queries, likes (a POST with Authorization, so the browser sends a preflight first) and
// subscribes over the websocket; from an origin not listed, the browser refuses the answer and
// the websocket upgrade is refused.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { startServer, launchBrowser, blockOutside, screenshotsOnFailure, freePort } from './harness.mjs';

let server, browser, allowedPort, otherPort, pages;

/** A static page server on its own port: another origin, as an SPA's host would be. */
function pageServer(port) {
  const html = '<!doctype html><meta charset="utf-8"><title>another origin</title><p>app</p>';
  const srv = createServer((_, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(html));
  return new Promise((ok) => srv.listen(port, '127.0.0.1', () => ok(srv)));
}

before(async () => {
  [allowedPort, otherPort] = [await freePort(), await freePort()];
  const allowed = `http://127.0.0.1:${allowedPort}`;
  [server, browser, ...pages] = await Promise.all([
    startServer({ CORS_ALLOWED_ORIGINS: allowed }),
    launchBrowser(),
    pageServer(allowedPort),
    pageServer(otherPort),
  ]);
});
after(async () => {
  await browser?.close();
  await server?.stop();
  for (const srv of pages ?? []) srv.close();
});

/** Runs in the page: a query, a like and a subscription against `api`, as an SPA would. */
async function useTheApi({ api, token, course }) {
  const gql = async (query, variables) => {
    const response = await fetch(`${api}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables }),
    });
    return response.json();
  };
  const out = {};
  try {
    const page = await gql('query($c: ID!) { course(id: $c) { posts(first: 1) { nodes { id likeCount } } } }', { c: course });
    const post = page.data.course.posts.nodes[0];
    out.query = post.id;
    const liked = await gql('mutation($p: ID!) { likePost(postId: $p) { likedByMe } }', { p: post.id });
    out.liked = liked.data.likePost.likedByMe;
  } catch (e) {
    out.fetchError = String(e);
  }
  out.ws = await new Promise((done) => {
    const ws = new WebSocket(`${api.replace('http', 'ws')}/graphql/ws`, 'graphql-transport-ws');
    const timer = setTimeout(() => done('timeout'), 10_000);
    ws.onopen = () => ws.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${token}` } }));
    ws.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type === 'connection_ack') {
        ws.send(JSON.stringify({ id: '1', type: 'subscribe', payload: {
          query: 'subscription($c: ID!) { courseActivity(courseId: $c) { kind } }', variables: { c: course } } }));
        clearTimeout(timer);
        done('subscribed');
      }
    };
    ws.onerror = () => { clearTimeout(timer); done('refused'); };
  });
  return out;
}

async function fromOrigin(port) {
  const context = await browser.newContext();
  const blocked = await blockOutside(context);
  const page = await context.newPage();
  let result;
  await screenshotsOnFailure(`cors-${port}`, () => ({ page }), async () => {
    await page.goto(`http://127.0.0.1:${port}/`);
    const user = server.demo.users.find((u) => u.courses.length > 0);
    result = await page.evaluate(useTheApi, { api: server.url, token: user.token, course: user.courses[0] });
  });
  assert.deepEqual(blocked, []);
  await context.close();
  return result;
}

test('an app on an allowed origin queries, likes and subscribes', async () => {
  const result = await fromOrigin(allowedPort);
  assert.equal(result.fetchError, undefined, JSON.stringify(result));
  assert.ok(result.query, JSON.stringify(result));
  assert.equal(result.liked, true, JSON.stringify(result));
  assert.equal(result.ws, 'subscribed', JSON.stringify(result));
});

test('an app on an origin not listed is refused by the browser and the websocket', async () => {
  const result = await fromOrigin(otherPort);
  assert.match(result.fetchError ?? '', /Failed to fetch|TypeError/, JSON.stringify(result));
  assert.equal(result.liked, undefined);
  assert.equal(result.ws, 'refused', JSON.stringify(result));
});
