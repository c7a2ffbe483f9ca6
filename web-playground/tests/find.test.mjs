// Finding things in the demo: the course page's search (hits as Course.search returns them,
// snippets as HTML with only <mark> in it, what matched, links, "More results"), the search
// across all courses on the home page (Query.search), similar posts under the title of a new
// post (debounced, stale answers dropped), and unread state: dots, "N new comments" and the
// course's count, live for another member's page, read on opening, "Mark all read", and the
// Unread filter in the URL.
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

async function courseId(token, code) {
  const { myCourses } = await graphqlAs(server, token, `{ myCourses { id code } }`);
  return myCourses.find((c) => c.code === code).id;
}

/** Opens `hash` in a page already signed in (after the course list, which would paint over it). */
async function go(page, hash) {
  await page.getByTestId('course-CS101').or(page.getByTestId('post')).or(page.getByTestId('posts')).first().waitFor();
  await page.evaluate((h) => (location.hash = h), hash);
}

/** Waits until the page's socket is up and its subscriptions had a moment to register. */
async function liveOn(page) {
  await page.locator('#live[data-state=up]').waitFor({ timeout: 5000 });
  await new Promise((r) => setTimeout(r, 300));
}

const HIT = `matched snippet post { id title course { code } } comment { id } reply { id }`;
const hitKey = (h) => ({ post: h.post.id, matched: h.matched, node: h.reply?.id ?? h.comment?.id ?? h.post.id });

/** Every page of a search as the server gives it, `first` hits a page. */
async function serverSearch(token, q, { course, first = 5 } = {}) {
  const out = [];
  let after = null;
  for (;;) {
    const vars = { q, first, after, id: course };
    const conn = course
      ? (await graphqlAs(server, token, `query($id: ID!, $q: String!, $first: Int, $after: String) { course(id: $id) {
           search(query: $q, first: $first, after: $after) { pageInfo { hasNextPage endCursor } edges { node { ${HIT} } } } } }`, vars)).course.search
      : (await graphqlAs(server, token, `query($q: String!, $first: Int, $after: String) {
           search(query: $q, first: $first, after: $after) { pageInfo { hasNextPage endCursor } edges { node { ${HIT} } } } }`, vars)).search;
    out.push(conn.edges.map((e) => e.node));
    if (!conn.pageInfo.hasNextPage) return out;
    after = conn.pageInfo.endCursor;
  }
}

/** The hits the page shows, in order. */
const shownHits = (page) =>
  page.getByTestId('search-hit').evaluateAll((els) => els.map((el) => ({ post: el.dataset.post, matched: el.dataset.matched, node: el.dataset.node })));

/** Clicks "Mark all read" (disabled, and so skipped, when nothing is unread) and waits for
 * the page's count to reach 0. */
async function markAllRead(page) {
  const button = page.getByTestId('mark-course-read');
  if (await button.isEnabled()) await button.click();
  else assert.equal(await page.getByTestId('course-unread').getAttribute('data-count'), '0', 'disabled only when all is read');
  await until('course count 0', () => page.getByTestId('course-unread').getAttribute('data-count'), (n) => n === '0');
}

/** Types `q` into the search box and waits for its first page. */
async function searchFor(page, q) {
  await page.getByTestId('search-input').fill(q);
  await page.getByTestId('search-submit').click();
  await page.locator(`[data-testid=search-results][data-pages="1"][data-query="${q.replaceAll('"', '\\"')}"]`).waitFor();
}

test('course search lists what Course.search returns, page by page, with safe highlighted snippets', async () => {
  const alice = demoUser(server, 'alice');
  const bob = demoUser(server, 'bob');
  const course = await courseId(alice.token, 'CS101');
  // A post whose body holds markup: it must show as text in the snippet, never as elements.
  // (ts_headline drops whole tags such as <b> from a snippet; what is left of markup, like an
  // unclosed <script or a < b && c > d, must read as the text it is.)
  const body = 'Memoising <b>bold</b> works: a < b && c > d <script';
  const { createPost: tricky } = await graphqlAs(server, bob.token,
    `mutation($c: ID!, $body: String!) { createPost(courseId: $c, title: "Markup in a post", body: $body, kind: DISCUSSION,
       anonymous: false, private: false, tagIds: []) { id } }`, { c: course, body });

  const a = await demoPageAs(browser, server, 'alice');
  pages = { alice: a.page };
  await screenshotsOnFailure('find-search', () => pages, async () => {
    await go(a.page, `#/course/${course}`);
    await a.page.locator('[data-testid=posts][data-pages="1"]').waitFor();

    // "memoising": the new post, a comment and a reply of the seed's recursion question.
    await searchFor(a.page, 'memoising');
    const expected = (await serverSearch(alice.token, 'memoising', { course })).flat();
    // The page shows 5 a page: walk it to the end as the server does.
    while (await a.page.getByTestId('more-results').isVisible()) {
      const n = Number(await a.page.getByTestId('search-results').getAttribute('data-pages'));
      await a.page.getByTestId('more-results').click();
      await a.page.locator(`[data-testid=search-results][data-pages="${n + 1}"]`).waitFor();
    }
    assert.deepEqual(await shownHits(a.page), expected.map(hitKey));
    const kinds = new Set(expected.map((h) => h.matched));
    for (const k of ['POST', 'COMMENT', 'REPLY']) assert.ok(kinds.has(k), `a ${k} hit for "memoising"`);
    // What matched, in words.
    const words = { POST: 'in the post', COMMENT: 'in a comment', REPLY: 'in a reply' };
    const labels = await a.page.getByTestId('search-hit').evaluateAll((els) =>
      els.map((el) => [el.dataset.matched, el.querySelector('[data-testid=search-matched]').textContent.trim()]));
    for (const [matched, label] of labels) assert.equal(label, words[matched]);

    // Each snippet shows the server's snippet: the same text, the same marked words, and no
    // element but <mark>.
    for (const [i, hit] of expected.entries()) {
      const snippet = a.page.getByTestId('search-hit').nth(i).getByTestId('search-snippet');
      const shown = await snippet.evaluate((el) => ({
        text: el.textContent,
        marks: [...el.querySelectorAll('mark')].map((m) => m.textContent),
        tags: [...el.querySelectorAll('*')].map((e) => e.tagName),
      }));
      const parsed = await a.page.evaluate((html) => {
        const t = document.createElement('template');
        t.innerHTML = html;
        return { text: t.content.textContent, marks: [...t.content.querySelectorAll('mark')].map((m) => m.textContent) };
      }, hit.snippet);
      assert.equal(shown.text, parsed.text, `snippet ${i} text`);
      assert.deepEqual(shown.marks, parsed.marks, `snippet ${i} marks`);
      assert.ok(shown.marks.length > 0, `snippet ${i} marks the match`);
      for (const m of shown.marks) assert.match(m, /^memois/i);
      assert.deepEqual([...new Set(shown.tags)], ['MARK'], `snippet ${i} holds only <mark>`);
    }
    // The markup in Bob's post reads as text.
    const trickyHit = a.page.locator(`[data-testid=search-hit][data-post="${tricky.id}"][data-matched=POST]`);
    const trickyText = await trickyHit.getByTestId('search-snippet').textContent();
    assert.ok(trickyText.includes('a < b && c > d <script'), `markup shows as text: ${trickyText}`);
    assert.match(trickyText, /bold/);
    assert.equal(await a.page.locator('.snippet b, .snippet script').count(), 0);
    const raw = expected.find((h) => h.post.id === tricky.id && h.matched === 'POST').snippet;
    assert.match(raw, /&lt;script/, 'the server escapes the text');
    assert.match(raw, /&amp;&amp;/);

    // The query is in the URL: a reload shows the same results.
    assert.match(new URL(a.page.url()).hash, /[?&]q=memoising\b/);
    await a.page.reload();
    await a.page.locator('[data-testid=search-results][data-pages="1"][data-query="memoising"]').waitFor();
    assert.deepEqual(await shownHits(a.page), expected.slice(0, 5).map(hitKey));

    // A hit links to its post.
    await trickyHit.getByTestId('search-post-link').click();
    await a.page.getByTestId('post-title').getByText('Markup in a post').waitFor();
    assert.equal(await a.page.getByTestId('post-body').textContent(), body);
    await a.page.goBack();
    await a.page.getByTestId('search-input').waitFor();

    // Paging: "week" is in twelve posts' titles and bodies, more than two pages of five.
    await searchFor(a.page, 'week');
    const weekPages = await serverSearch(alice.token, 'week', { course });
    assert.ok(weekPages.length >= 3, `several pages (${weekPages.length})`);
    for (const [i, pageHits] of weekPages.entries()) {
      await a.page.locator(`[data-testid=search-results][data-pages="${i + 1}"][data-query="week"]`).waitFor();
      assert.deepEqual(await shownHits(a.page), weekPages.slice(0, i + 1).flat().map(hitKey), `after page ${i + 1}`);
      const more = a.page.getByTestId('more-results');
      if (i + 1 < weekPages.length) await more.click();
      else assert.equal(await more.isVisible(), false, 'no "More results" after the last page');
    }
    // The same walk in one request agrees (the cursor keeps the order).
    const all = (await serverSearch(alice.token, 'week', { course, first: 50 })).flat();
    assert.deepEqual(all.map(hitKey), weekPages.flat().map(hitKey));

    // Nothing found, said so; Clear empties it.
    await searchFor(a.page, 'zyzzyvaqq');
    assert.equal(await a.page.getByTestId('search-hit').count(), 0);
    assert.match(await a.page.getByTestId('search-summary').textContent(), /Nothing found/);
    await a.page.getByTestId('search-clear').click();
    assert.equal(await a.page.getByTestId('search-results').isVisible(), false);
    assert.doesNotMatch(new URL(a.page.url()).hash, /q=/);
    assert.deepEqual(a.blocked, []);
  });
});

test('the home page searches every course of the user, as Query.search does', async () => {
  const alice = demoUser(server, 'alice');
  const a = await demoPageAs(browser, server, 'alice');
  pages = { alice: a.page };
  await screenshotsOnFailure('find-search-all', () => pages, async () => {
    await a.page.getByTestId('home-search').getByTestId('search-input').waitFor();
    // "shear" is in MATH201, "memoising" in CS101: websearch syntax's "or" finds both.
    const q = 'shear or memoising';
    await searchFor(a.page, q);
    const expected = await serverSearch(alice.token, q);
    assert.deepEqual(await shownHits(a.page), expected[0].map(hitKey));
    const courses = new Set(expected.flat().map((h) => h.post.course.code));
    assert.ok(courses.has('CS101') && courses.has('MATH201'), `hits in two courses: ${[...courses]}`);
    assert.deepEqual(await a.page.getByTestId('search-course').allTextContents(), expected[0].map((h) => h.post.course.code));
    // The seed's HIST110 essay is not Alice's to find (she is no member).
    await searchFor(a.page, 'silk road');
    assert.deepEqual(await shownHits(a.page), (await serverSearch(alice.token, 'silk road'))[0].map(hitKey));
    assert.equal(await a.page.getByTestId('search-course').filter({ hasText: 'HIST110' }).count(), 0);
    assert.match(new URL(a.page.url()).hash, /^#\/courses\?q=silk%20road$/);
  });
});

test('similar posts show under the title as it is typed, debounced; a stale answer never replaces a newer one', async () => {
  const alice = demoUser(server, 'alice');
  const course = await courseId(alice.token, 'CS101');
  const similar = async (text) =>
    (await graphqlAs(server, alice.token, `query($id: ID!, $t: String!) { course(id: $id) { similarPosts(text: $t, first: 5) {
       similarity post { id title resolved } } } }`, { id: course, t: text })).course.similarPosts;
  const a = await demoPageAs(browser, server, 'alice');
  pages = { alice: a.page };
  await screenshotsOnFailure('find-similar', () => pages, async () => {
    await go(a.page, `#/course/${course}`);
    await a.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    const asked = [];
    a.page.on('request', (r) => {
      const body = r.postData();
      if (r.url().endsWith('/graphql') && body?.includes('similarPosts')) asked.push(JSON.parse(body).variables.text);
    });
    const list = a.page.getByTestId('similar-posts');
    const listed = () => list.getByTestId('similar-post').evaluateAll((els) => els.map((el) => ({ id: el.dataset.id, resolved: el.dataset.resolved === 'true' })));

    // A mistyped title, typed key by key faster than the pause: one question, after it.
    await a.page.getByTestId('new-post-open').click();
    const typo = 'Why does my recursiv fibb take forevr';
    await a.page.getByTestId('post-form-title').pressSequentially(typo, { delay: 20 });
    await a.page.locator(`[data-testid=similar-posts][data-text="${typo}"]`).waitFor();
    // Without the pause every key would ask (37 questions); a loaded machine may pause mid-word
    // once or twice, never more, and the last question is the whole title.
    assert.ok(asked.length >= 1 && asked.length <= 3, `asked ${asked.length} times: ${JSON.stringify(asked)}`);
    assert.equal(asked.at(-1), typo);
    const expected = await similar(typo);
    assert.deepEqual(await listed(), expected.map((s) => ({ id: s.post.id, resolved: s.post.resolved })));
    const fib = expected.find((s) => s.post.title.startsWith('Why does my recursive fib'));
    assert.ok(fib, 'the seed question is found despite the typos');
    assert.ok(fib.post.resolved, 'and it is resolved (its answer was accepted)');
    const fibItem = list.locator(`[data-testid=similar-post][data-id="${fib.post.id}"]`);
    assert.equal(await fibItem.getByTestId('similar-resolved').count(), 1, 'marked resolved');
    assert.equal(await fibItem.locator('a').getAttribute('href'), `#/post/${fib.post.id}`);
    assert.ok(await list.isVisible());

    // A stale answer: the question for SLOW is held back until after FAST was answered.
    const SLOW = 'Week 3 lab notes';
    const FAST = 'recursive fib forever';
    let released;
    const slowDone = new Promise((ok) => (released = ok));
    let slowSeen;
    const slowAsked = new Promise((ok) => (slowSeen = ok));
    await a.page.route('**/graphql', async (route) => {
      const body = route.request().postData() ?? '';
      if (!body.includes('similarPosts') || JSON.parse(body).variables.text !== SLOW) return route.fallback();
      slowSeen();
      const response = await route.fetch();
      await new Promise((r) => setTimeout(r, 1500));
      await route.fulfill({ response });
      released();
    });
    await a.page.getByTestId('post-form-title').fill(SLOW);
    await slowAsked;
    await a.page.getByTestId('post-form-title').fill(FAST);
    await a.page.locator(`[data-testid=similar-posts][data-text="${FAST}"]`).waitFor();
    await slowDone;
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await list.getAttribute('data-text'), FAST, 'the older answer did not replace the newer');
    const fast = (await similar(FAST)).map((s) => s.post.id);
    const slow = (await similar(SLOW)).map((s) => s.post.id);
    assert.notDeepEqual(fast, slow, 'the two texts have different lists (else the check proves nothing)');
    assert.deepEqual((await listed()).map((s) => s.id), fast);

    // An emptied title empties the list; a sent post leaves it empty.
    await a.page.getByTestId('post-form-title').fill('');
    await until('list emptied', () => list.getByTestId('similar-post').count(), (n) => n === 0);
    assert.equal(await list.isVisible(), false);
    await a.page.getByTestId('post-form-title').fill('Why does my recursive fib take forever');
    await a.page.getByTestId('post-form-body').fill('Asked before, it seems.');
    await list.getByTestId('similar-post').first().waitFor();
    await a.page.getByTestId('post-form-submit').click();
    await a.page.getByTestId('post-item').first().getByText('Why does my recursive fib take forever', { exact: true }).waitFor();
    await until('list emptied after posting', () => list.getByTestId('similar-post').count(), (n) => n === 0);
  });
});

test('unread: a classmate\'s new post shows a dot and counts live; opening it reads it; Mark all read zeroes the count', async () => {
  const bob = demoUser(server, 'bob');
  const course = await courseId(bob.token, 'CS101');
  const serverState = async () =>
    (await graphqlAs(server, bob.token, `query($id: ID!) { course(id: $id) { unreadPostCount
       posts(first: 50) { nodes { id isUnread unreadCommentCount } } } }`, { id: course })).course;
  const a = await demoPageAs(browser, server, 'alice');
  const b = await demoPageAs(browser, server, 'bob');
  // Bob's home page in another tab: the course list's count follows too.
  const home = await demoPageAs(browser, server, 'bob');
  pages = { alice: a.page, bob: b.page, bobHome: home.page };
  await screenshotsOnFailure('find-unread', () => pages, async () => {
    const headerCount = async () => Number(await b.page.getByTestId('course-unread').getAttribute('data-count'));
    const homeCount = async () => Number(await home.page.getByTestId('unread-CS101').getAttribute('data-count'));
    const shownState = () => b.page.getByTestId('post-item').evaluateAll((els) => els.map((el) => ({
      id: el.dataset.id,
      isUnread: el.dataset.unread === 'true',
      dot: !el.querySelector('[data-testid=unread-dot]').hidden,
      unreadCommentCount: Number(el.querySelector('[data-testid=new-comments]').dataset.count),
    })));
    /** The page's dots and counts agree with the server's state for every post listed. */
    const agrees = async () => {
      const s = await serverState();
      const byId = new Map(s.posts.nodes.map((n) => [n.id, n]));
      const shown = await shownState();
      assert.equal(await headerCount(), s.unreadPostCount, 'header count');
      for (const p of shown) {
        assert.equal(p.isUnread, byId.get(p.id).isUnread, `isUnread of ${p.id}`);
        assert.equal(p.dot, p.isUnread, `dot of ${p.id}`);
        assert.equal(p.unreadCommentCount, byId.get(p.id).unreadCommentCount, `new comments of ${p.id}`);
      }
      return s;
    };

    await go(a.page, `#/course/${course}`);
    await go(b.page, `#/course/${course}`);
    await b.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    await a.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    await home.page.getByTestId('unread-CS101').waitFor();
    for (const page of [a.page, b.page, home.page]) await liveOn(page);
    // At first, as the server has it.
    const first = await agrees();
    assert.equal(await homeCount(), first.unreadPostCount);

    // Mark all read: zero on the page, on the server, and live in the other tab.
    await markAllRead(b.page);
    assert.equal(await b.page.getByTestId('mark-course-read').isDisabled(), true);
    assert.equal((await serverState()).unreadPostCount, 0);
    assert.match(await b.page.getByTestId('course-unread').textContent(), /all read/);
    assert.equal(await b.page.locator('[data-testid=unread-dot]:visible').count(), 0);
    await until('home count 0', homeCount, (n) => n === 0);
    await agrees();

    // Alice starts a post in the page: Bob's list gets it with a dot, his count goes to 1.
    const title = `Unread test ${Date.now()}`;
    await a.page.getByTestId('new-post-open').click();
    await a.page.getByTestId('post-form-title').fill(title);
    await a.page.getByTestId('post-form-body').fill('Did you see this?');
    await a.page.getByTestId('post-form-submit').click();
    const item = b.page.getByTestId('post-item').filter({ hasText: title });
    await item.getByTestId('unread-dot').waitFor({ timeout: 5000 });
    await until('header count 1', headerCount, (n) => n === 1);
    await until('home count 1', homeCount, (n) => n === 1);
    assert.equal(await b.page.getByTestId('course-unread').textContent(), '1 unread post');
    // Alice's own post is not unread for her.
    const own = a.page.getByTestId('post-item').filter({ hasText: title });
    await own.waitFor();
    assert.equal(await own.getAttribute('data-unread'), 'false');
    assert.equal(await own.getByTestId('unread-dot').isVisible(), false);
    const newId = await item.getAttribute('data-id');
    assert.equal((await agrees()).unreadPostCount, 1);

    // Alice comments on a post Bob has read: "1 new comment" on it, live.
    const older = (await shownState()).find((p) => p.id !== newId).id;
    await graphqlAs(server, demoUser(server, 'alice').token,
      `mutation($p: ID!) { createComment(postId: $p, body: "A new comment for Bob") { id } }`, { p: older });
    const olderItem = b.page.locator(`[data-testid=post-item][data-id="${older}"]`);
    await olderItem.locator('[data-testid=new-comments][data-count="1"]').waitFor({ timeout: 5000 });
    assert.equal(await olderItem.getByTestId('new-comments').innerText(), '· 1 new comment');
    const state = await serverState();
    await until('header count as the server has it', headerCount, (n) => n === state.unreadPostCount);
    await agrees();

    // Bob opens the new post: read on the server, and back on the list the dot is gone.
    await item.locator('a').click();
    await b.page.locator('[data-testid=post][data-read=true]').waitFor();
    const read = await serverState();
    assert.equal(read.posts.nodes.find((n) => n.id === newId).isUnread, false);
    await until('home count follows the read', homeCount, (n) => n === read.unreadPostCount);
    await b.page.goBack();
    await b.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    assert.equal(await b.page.locator(`[data-testid=post-item][data-id="${newId}"]`).getAttribute('data-unread'), 'false');
    assert.equal(await b.page.locator(`[data-testid=post-item][data-id="${newId}"]`).getByTestId('unread-dot').isVisible(), false);
    await agrees();

    // Opening the commented post reads its comments: the new-comment count goes.
    await olderItem.locator('a').click();
    await b.page.locator('[data-testid=post][data-read=true]').waitFor();
    await b.page.goBack();
    await b.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    assert.equal(await b.page.locator(`[data-testid=post-item][data-id="${older}"]`).getByTestId('new-comments').isVisible(), false);
    const after = await agrees();
    assert.equal(after.unreadPostCount, 0);
    assert.equal(await headerCount(), 0);

    // Two more posts from Alice (another client): 2 unread, then Mark all read zeroes it
    // everywhere.
    for (const t of ['One more', 'And another']) {
      await graphqlAs(server, demoUser(server, 'alice').token,
        `mutation($c: ID!, $t: String!) { createPost(courseId: $c, title: $t, body: "Unread.", kind: DISCUSSION,
           anonymous: false, private: false, tagIds: []) { id } }`, { c: course, t });
    }
    await until('header count 2', headerCount, (n) => n === 2);
    await until('home count 2', homeCount, (n) => n === 2);
    // The count and the list's new items arrive by separate live updates: wait for both.
    await until('two unread posts listed', () => b.page.locator('[data-testid=post-item][data-unread=true]').count(),
      (n) => n === 2);
    await b.page.getByTestId('mark-course-read').click();
    await until('header count 0', headerCount, (n) => n === 0);
    await until('home count 0', homeCount, (n) => n === 0);
    assert.equal(await b.page.locator('[data-testid=unread-dot]:visible').count(), 0);
    assert.equal((await agrees()).unreadPostCount, 0);
    assert.deepEqual([...a.blocked, ...b.blocked, ...home.blocked], []);
  });
});

test('the Unread filter lists what the server lists as unread, stays in the URL, and Mark all read empties it', async () => {
  const alice = demoUser(server, 'alice');
  const bob = demoUser(server, 'bob');
  const course = await courseId(bob.token, 'CS101');
  const serverUnread = async () =>
    (await graphqlAs(server, bob.token, `query($id: ID!) { course(id: $id) { posts(first: 5, filter: { unread: true }) { nodes { id } } } }`,
      { id: course })).course.posts.nodes.map((n) => n.id);
  const b = await demoPageAs(browser, server, 'bob');
  pages = { bob: b.page };
  await screenshotsOnFailure('find-unread-filter', () => pages, async () => {
    await go(b.page, `#/course/${course}`);
    await b.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    // Read everything, then Alice writes two posts: exactly those are unread.
    await markAllRead(b.page);
    const ids = [];
    for (const title of ['First unread', 'Second unread']) {
      const { createPost } = await graphqlAs(server, alice.token,
        `mutation($c: ID!, $t: String!) { createPost(courseId: $c, title: $t, body: "For the filter.", kind: DISCUSSION,
           anonymous: false, private: false, tagIds: []) { id } }`, { c: course, t: title });
      ids.push(createPost.id);
    }
    const expected = await serverUnread();
    assert.deepEqual([...expected].sort(), [...ids].sort(), 'the server lists the two new posts as unread');

    const listOf = async (filter) => {
      await b.page.locator(`[data-testid=posts][data-pages="1"][data-filter='${JSON.stringify(filter)}']`).waitFor({ state: 'attached' });
      return b.page.getByTestId('post-item').evaluateAll((els) => els.map((el) => el.dataset.id));
    };
    await b.page.getByTestId('filter-unread').check();
    assert.deepEqual(await listOf({ unread: true }), expected);
    assert.equal(await b.page.locator('[data-testid=post-item][data-unread=true]').count(), expected.length);
    assert.equal(new URL(b.page.url()).hash, `#/course/${encodeURIComponent(course)}?unread`);
    // With another filter and order, the URL keeps both; a reload shows the same list.
    await b.page.getByTestId('order-TOP').click();
    assert.equal(new URL(b.page.url()).hash, `#/course/${encodeURIComponent(course)}/top?unread`);
    await b.page.reload();
    assert.equal(await b.page.getByTestId('filter-unread').isChecked(), true);
    const top = (await graphqlAs(server, bob.token, `query($id: ID!) { course(id: $id) { posts(first: 5, orderBy: TOP, filter: { unread: true }) { nodes { id } } } }`,
      { id: course })).course.posts.nodes.map((n) => n.id);
    assert.deepEqual(await listOf({ unread: true }), top);

    // Mark all read: the unread list walks again, empty as the server's.
    await b.page.getByTestId('mark-course-read').click();
    await until('unread list empty', () => b.page.getByTestId('post-item').count(), (n) => n === 0);
    assert.deepEqual(await serverUnread(), []);
    assert.equal(await b.page.getByTestId('course-unread').getAttribute('data-count'), '0');
  });
});
