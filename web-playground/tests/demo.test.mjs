// The demo forum with two users in two browser contexts on the same post: likes are
// optimistic for the liker and arrive live for the other; a new comment appears live; every
// count reads with its noun in agreement ("1 like", "2 comments"); replies and deletions arrive
// live, and comments and replies can be liked.
import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, blockOutside, screenshotsOnFailure, demoPageAs } from './harness.mjs';

let server, browser, pages;
beforeEach(async () => {
  [server, browser] = await Promise.all([startServer(), launchBrowser()]);
  pages = {};
});
afterEach(async () => {
  await browser?.close();
  await server?.stop();
});

const signedIn = (handle) => demoPageAs(browser, server, handle);

/** Alice opens CS101's newest post through the UI; Bob (also in CS101) opens the same URL. */
async function bothOnOnePost() {
  const a = await signedIn('alice');
  pages.alice = a.page;
  const b = await signedIn('bob');
  pages.bob = b.page;
  await a.page.getByTestId('course-CS101').click();
  await a.page.getByTestId('post-item').first().locator('a').click();
  await a.page.getByTestId('post-title').waitFor();
  const postUrl = a.page.url();
  assert.match(postUrl, /#\/post\//);
  await b.page.goto(postUrl);
  await b.page.getByTestId('post-title').waitFor();
  assert.equal(await b.page.getByTestId('post-title').innerText(), await a.page.getByTestId('post-title').innerText());
  for (const p of [a.page, b.page]) await p.locator('#live[data-state=up]').waitFor({ timeout: 5000 });
  // graphql-ws sends `subscribe` right after connection_ack; give the server a moment to register it.
  await new Promise((r) => setTimeout(r, 300));
  return { a, b };
}

const count = async (page) => Number(await page.getByTestId('like-count').innerText());

/** The noun beside a count agrees with it: "1 like", "0 likes", "2 comments". */
async function assertNouns(page) {
  for (const [what, one] of [['like', 'like'], ['comment', 'comment']]) {
    const n = Number(await page.getByTestId(`${what}-count`).innerText());
    assert.equal(await page.getByTestId(`${what}-noun`).innerText(), n === 1 ? one : `${one}s`, `${n} ${what}(s)`);
  }
}

async function waitForCount(page, expected, ms) {
  const start = Date.now();
  while (Date.now() - start < ms) {
    if ((await count(page)) === expected) return Date.now() - start;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(await count(page), expected, `like count not ${expected} within ${ms} ms`);
}

test('A likes: A sees it at once (optimistic), B sees it live within 3 s, and it stays right', async () => {
  await screenshotsOnFailure('likes', () => pages, async () => {
    const { a, b } = await bothOnOnePost();
    const before = await count(a.page);
    assert.equal(await count(b.page), before);
    await assertNouns(a.page);
    const wasLiked = (await a.page.getByTestId('like').getAttribute('aria-pressed')) === 'true';
    const expected = before + (wasLiked ? -1 : 1);
    // Click and read in one task: the count must change before any answer from the server.
    const atOnce = await a.page.evaluate(() => {
      document.querySelector('[data-testid=like]').click();
      return Number(document.querySelector('[data-testid=like-count]').textContent);
    });
    assert.equal(atOnce, expected, 'optimistic update');
    await assertNouns(a.page);
    const tookB = await waitForCount(b.page, expected, 3000);
    console.log(`# B saw the new count after ${tookB} ms`);
    // Past the mutation's answer and the live updates, A's count is still right and B agrees.
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(await count(a.page), expected);
    assert.equal(await count(b.page), expected);
    assert.equal(await a.page.getByTestId('like').getAttribute('aria-pressed'), String(!wasLiked));
    // And after a reload both read it from the server.
    await a.page.reload();
    await a.page.getByTestId('post-title').waitFor();
    assert.equal(await count(a.page), expected);
    await assertNouns(a.page);
    await assertNouns(b.page);
    assert.deepEqual([...a.blocked, ...b.blocked], []);
  });
});

test('B comments: A sees the comment appear without a reload', async () => {
  await screenshotsOnFailure('comments', () => pages, async () => {
    const { a, b } = await bothOnOnePost();
    const commentsBefore = Number(await a.page.getByTestId('comment-count').innerText());
    const body = `Live from bob ${Date.now()}`;
    await b.page.getByTestId('comment-body').fill(body);
    await b.page.getByTestId('comment-submit').click();
    await b.page.getByTestId('comment-text').getByText(body).waitFor({ timeout: 3000 });
    await a.page.getByTestId('comment-text').getByText(body).waitFor({ timeout: 3000 });
    assert.equal(await a.page.getByTestId('comment-text').getByText(body).count(), 1);
    assert.equal(Number(await a.page.getByTestId('comment-count').innerText()), commentsBefore + 1);
    await assertNouns(a.page);
    assert.equal(await b.page.getByTestId('comment-text').getByText(body).count(), 1, 'B shows its comment once');
    assert.deepEqual([...a.blocked, ...b.blocked], []);
  });
});

test('a token that expires: the socket is refused with 4403, the page says so and stops retrying', async () => {
  await screenshotsOnFailure('expired-token', () => pages, async () => {
    const alice = server.demo.users.find((u) => u.handle === 'alice');
    const token = await server.token(alice.id, '5s');
    const context = await browser.newContext();
    await blockOutside(context);
    const page = await context.newPage();
    pages.alice = page;
    let sockets = 0;
    page.on('websocket', () => (sockets += 1));
    await page.goto(`${server.url}/demo`);
    await page.locator('#token-form input[name=token]').fill(token);
    await page.locator('#token-form button').click();
    await page.getByTestId('course-CS101').click();
    await page.getByTestId('post-item').first().locator('a').click();
    await page.getByTestId('post-title').waitFor();
    await page.locator('#live[data-state=up]').waitFor({ timeout: 5000 });
    // The token's exp passes: the server closes the socket with 4403.
    await page.locator('#live[data-state=refused]').waitFor({ timeout: 10_000 });
    assert.match(await page.getByTestId('live').innerText(), /token refused or expired/);
    const opened = sockets;
    await new Promise((r) => setTimeout(r, 4000));
    assert.equal(sockets, opened, 'no reconnect after 4403');
    assert.equal(await page.locator('#live').getAttribute('data-state'), 'refused');
  });
});

/** A GraphQL call from outside the browser, as another client of the same server would make. */
async function api(token, query, variables) {
  const res = await fetch(`${server.url}/graphql`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  const body = await res.json();
  assert.equal(body.errors, undefined, JSON.stringify(body));
  return body.data;
}

const postIdOf = (page) => decodeURIComponent(page.url().split('#/post/')[1]);
const commentCount = async (page) => Number(await page.getByTestId('comment-count').innerText());

test('replies and deletions arrive live; comments and replies can be liked', async () => {
  await screenshotsOnFailure('threads', () => pages, async () => {
    const { a, b } = await bothOnOnePost();
    const bob = server.demo.users.find((u) => u.handle === 'bob').token;
    const postId = postIdOf(a.page);
    const before = await commentCount(a.page);

    // Bob comments and replies from another client: both appear on Alice's page, counted.
    const stamp = Date.now();
    const { createComment } = await api(bob, 'mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }',
      { p: postId, b: `root ${stamp}` });
    await a.page.getByTestId('comment-text').getByText(`root ${stamp}`).waitFor({ timeout: 3000 });
    const { createReply } = await api(bob, 'mutation($c: ID!, $b: String!) { createReply(commentId: $c, body: $b) { id } }',
      { c: createComment.id, b: `reply ${stamp}` });
    const reply = a.page.locator(`[data-testid=reply][data-id="${createReply.id}"]`);
    await reply.getByText(`reply ${stamp}`).waitFor({ timeout: 3000 });
    assert.equal(await commentCount(a.page), before + 2);
    await assertNouns(a.page);

    // Alice likes the reply: at once on her page, live on Bob's once he reloads and watches it.
    await reply.getByTestId('like-comment').click();
    assert.equal(await reply.locator(`[data-like-of="${createReply.id}"]`).innerText(), '1');
    await a.page.waitForFunction((id) => document.querySelector(`[data-testid=like-comment][data-target="${id}"]`)
      ?.getAttribute('aria-pressed') === 'true', createReply.id);
    // The like is buffered: Bob's reload shows committed counts, so wait for the worker first.
    for (let tries = 0; ; tries++) {
      const { node } = await api(bob, 'query($id: ID!) { node(id: $id) { ... on Reply { likeCount } } }', { id: createReply.id });
      if (node.likeCount === 1) break;
      assert.ok(tries < 50, 'the worker committed the like within 5 s');
      await new Promise((r) => setTimeout(r, 100));
    }
    await b.page.reload();
    await b.page.locator(`[data-testid=reply][data-id="${createReply.id}"]`).waitFor({ timeout: 3000 });
    assert.equal(await b.page.locator(`[data-like-of="${createReply.id}"]`).innerText(), '1');
    const bobsComment = b.page.locator(`[data-testid=comment][data-id="${createComment.id}"]`);
    await b.page.locator('#live[data-state=up]').waitFor({ timeout: 5000 });
    await new Promise((r) => setTimeout(r, 300));
    // Alice likes Bob's comment: Bob sees the committed count arrive live.
    const alicesView = a.page.locator(`[data-testid=comment][data-id="${createComment.id}"]`);
    await alicesView.locator(`[data-target="${createComment.id}"]`).click();
    await b.page.waitForFunction((id) => document.querySelector(`[data-like-of="${id}"]`)?.textContent === '1',
      createComment.id, { timeout: 3000 });
    assert.equal(await bobsComment.locator(`[data-like-of="${createComment.id}"]`).innerText(), '1');

    // Bob deletes the reply, then the comment: both leave Alice's page, and the count follows.
    const del = 'mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }';
    await api(bob, del, { id: createReply.id });
    await reply.waitFor({ state: 'detached', timeout: 3000 });
    assert.equal(await commentCount(a.page), before + 1);
    await api(bob, del, { id: createComment.id });
    await alicesView.waitFor({ state: 'detached', timeout: 3000 });
    assert.equal(await commentCount(a.page), before);
    await assertNouns(a.page);
  });
});
