// The NEW / HOT / TOP switch on a course's post list. CS101's seed has twelve "Week n" posts,
// Bob's recursion question (2 likes, 4 comments and replies), a pinned announcement and newer
// questions without likes. The test adds likes so the three orders disagree: Week 1 (the
// oldest) gets 3 likes and tops TOP, Week 4 gets 1. Then each order's list in the page, paged
// to the end with "More posts" (5 a page, the first one also carrying the pinned posts ahead
// of them), must be the server's list in that order, pins first, and start as that order says.
import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import {
  startServer, launchBrowser, screenshotsOnFailure, graphqlAs, demoUser, demoPageAs, until,
} from './harness.mjs';

let server, browser, pages;
beforeEach(async () => {
  [server, browser] = await Promise.all([startServer(), launchBrowser()]);
  pages = {};
});
afterEach(async () => {
  await browser?.close();
  await server?.stop();
});

/** Every post of the course in `order`, paged as the demo pages it: [{ id, title, likeCount }]. */
async function serverList(token, course, order) {
  const all = [];
  let after = null;
  for (;;) {
    const { course: c } = await graphqlAs(server, token,
      `query($id: ID!, $after: String, $order: PostOrder!) { course(id: $id) {
         posts(first: 5, after: $after, orderBy: $order) { pageInfo { hasNextPage endCursor } nodes { id title likeCount pinned } } } }`,
      { id: course, after, order });
    all.push(...c.posts.nodes);
    if (!c.posts.pageInfo.hasNextPage) return all;
    after = c.posts.pageInfo.endCursor;
  }
}

/** The posts the page lists, in its order: [{ id, title, likes }]. */
const shown = (page) =>
  page.getByTestId('post-item').evaluateAll((els) =>
    els.map((el) => ({
      id: el.dataset.id,
      title: el.querySelector('a').textContent.trim(),
      likes: Number(/(\d+) likes?/.exec(el.textContent)[1]),
    })),
  );

/** Waits for the list in `order` with `pagesLoaded` pages, then returns what it shows. */
async function listed(page, order, pagesLoaded) {
  await page.locator(`[data-testid=posts][data-order=${order}][data-pages="${pagesLoaded}"]`).waitFor({ timeout: 5000 });
  return shown(page);
}

/** Clicks "More posts" until it hides; checks each page adds PAGE_SIZE (5) or the rest (the
 * first page carries the `pins` pinned posts besides its five). */
async function loadAll(page, order, total, pins) {
  let items = await listed(page, order, 1);
  for (let p = 2; items.length < total; p++) {
    assert.equal(await page.getByTestId('more-posts').isVisible(), true, `more posts after ${items.length} of ${total}`);
    await page.getByTestId('more-posts').click();
    items = await listed(page, order, p);
    assert.equal(items.length, Math.min(total, 5 * p + pins));
  }
  assert.equal(await page.getByTestId('more-posts').isVisible(), false, 'no more posts at the end');
  return items;
}

const titles = (list) => list.map((p) => p.title);
const unpinned = (list, pinnedIds) => list.filter((p) => !pinnedIds.has(p.id));

test('NEW / HOT / TOP: each order lists the course as the server ranks it, across pages, and the URL keeps it', async () => {
  await screenshotsOnFailure('post-order', () => pages, async () => {
    const [alice, bob, tran] = ['alice', 'bob', 'dr_tran'].map((h) => demoUser(server, h));
    const { myCourses } = await graphqlAs(server, alice.token, 'query { myCourses { id code } }');
    const cs101 = myCourses.find((c) => c.code === 'CS101').id;
    const before = await serverList(alice.token, cs101, 'NEW');
    const byTitle = (prefix) => before.find((p) => p.title.startsWith(prefix));
    const [week1, week4, recursion] = [byTitle('Week 1:'), byTitle('Week 4:'), byTitle('Why does my recursive fib')];
    const pinnedIds = new Set(before.filter((p) => p.pinned).map((p) => p.id));
    const pins = pinnedIds.size;
    assert.ok(pins >= 1, 'the seed pins an announcement');
    assert.deepEqual(before.slice(0, pins).map((p) => p.pinned), Array(pins).fill(true), 'pinned posts lead NEW');
    assert.equal(before.at(-1).id, week1.id, 'and its oldest is Week 1');

    // Week 1: 3 likes, Week 4: 1, the recursion question keeps its 2.
    const like = 'mutation($id: ID!) { likePost(postId: $id) { id } }';
    for (const u of [alice, bob, tran]) await graphqlAs(server, u.token, like, { id: week1.id });
    await graphqlAs(server, bob.token, like, { id: week4.id });
    // Likes are committed by the worker: wait until the server's TOP order has them.
    await until('the likes are committed and ranked',
      async () => titles(unpinned(await serverList(alice.token, cs101, 'TOP'), pinnedIds)).slice(0, 3),
      (t) => t.join('|') === [week1, recursion, week4].map((p) => p.title).join('|'), 10_000);
    const expected = {};
    for (const order of ['NEW', 'HOT', 'TOP']) expected[order] = await serverList(alice.token, cs101, order);
    const total = before.length;
    // The orders really differ, so a page that ignored the switch would fail below.
    for (const order of ['NEW', 'HOT', 'TOP']) {
      assert.deepEqual(expected[order].slice(0, pins).map((p) => p.pinned), Array(pins).fill(true), `pins lead ${order}`);
    }
    assert.equal(unpinned(expected.TOP, pinnedIds)[0].id, week1.id);
    assert.notEqual(unpinned(expected.NEW, pinnedIds)[0].id, week1.id);
    assert.notDeepEqual(titles(expected.HOT), titles(expected.NEW));
    assert.notDeepEqual(titles(expected.HOT), titles(expected.TOP));
    // HOT weighs comments twice and likes once, by log: the discussed recursion question (2
    // likes + 4 comments) beats Week 1 (3 likes), which beats the rest of the same age.
    assert.deepEqual(titles(unpinned(expected.HOT, pinnedIds)).slice(0, 2), [recursion.title, week1.title]);

    const a = await demoPageAs(browser, server, 'alice');
    pages.alice = a.page;
    const page = a.page;
    await page.getByTestId('course-CS101').click();
    // NEW by default.
    assert.deepEqual(titles(await listed(page, 'NEW', 1)), titles(expected.NEW.slice(0, 5 + pins)));
    assert.equal(await page.getByTestId('order-NEW').getAttribute('aria-pressed'), 'true');

    // TOP: most liked first, on every page ("More posts" keeps the order and its cursor).
    await page.getByTestId('order-TOP').click();
    const top = await loadAll(page, 'TOP', total, pins);
    assert.deepEqual(titles(top), titles(expected.TOP));
    const ranked = unpinned(top, pinnedIds);
    assert.deepEqual(ranked.slice(0, 3).map((p) => p.likes), [3, 2, 1]);
    assert.ok(ranked.every((p, i) => i === 0 || ranked[i - 1].likes >= p.likes), 'TOP never ranks fewer likes above more');
    assert.equal(new Set(top.map((p) => p.id)).size, total, 'no post twice across pages');
    assert.equal(await page.getByTestId('order-TOP').getAttribute('aria-pressed'), 'true');
    assert.equal(await page.getByTestId('order-NEW').getAttribute('aria-pressed'), 'false');
    assert.match(page.url(), /#\/course\/[^/]+\/top$/);

    // HOT: as the server ranks it, across pages.
    await page.getByTestId('order-HOT').click();
    assert.deepEqual(titles(await loadAll(page, 'HOT', total, pins)), titles(expected.HOT));
    assert.match(page.url(), /\/hot$/);

    // Back to NEW: newest first again, the switch starting over from the first page.
    await page.getByTestId('order-NEW').click();
    const newest = await loadAll(page, 'NEW', total, pins);
    assert.deepEqual(titles(newest), titles(expected.NEW));
    assert.ok(pinnedIds.has(newest[0].id), 'a pinned post first');
    assert.equal(newest.at(-1).id, week1.id);
    assert.doesNotMatch(page.url(), /\/(hot|top)$/);

    // A reload (or a shared link) of #/course/<id>/top opens in TOP.
    await page.goto(page.url() + '/top');
    await page.reload();
    assert.deepEqual(titles(await listed(page, 'TOP', 1)), titles(expected.TOP.slice(0, 5 + pins)));
    assert.equal(await page.getByTestId('order-TOP').getAttribute('aria-pressed'), 'true');
    assert.deepEqual(a.blocked, []);
  });
});
