// Questions in the demo: accepting an answer (the asker; another member sees it live),
// staff's endorsements, pins and resolved marks, no staff buttons for a student, and the
// course page's filter bar listing what the server lists for the same `posts(filter:)`.
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

/** Opens `hash` (e.g. #/post/<id>) in a page already signed in. */
async function go(page, hash) {
  // After signing in the course list renders; a route set before it would be painted over.
  await page.getByTestId('course-CS101').or(page.getByTestId('post')).or(page.getByTestId('posts')).first().waitFor();
  await page.evaluate((h) => (location.hash = h), hash);
}

const STAFF_BUTTONS = ['mark-resolved', 'unresolve', 'endorse', 'unendorse', 'pin', 'unpin', 'make-public'];

test('the asker accepts an answer, live for others; staff endorse and pin; a student sees no staff buttons', async () => {
  const alice = demoUser(server, 'alice');
  const bob = demoUser(server, 'bob');
  const tran = demoUser(server, 'dr_tran');
  const course = await courseId(alice.token, 'CS101');
  const { createPost: q } = await graphqlAs(server, alice.token,
    `mutation($c: ID!) { createPost(courseId: $c, title: "How do I accept?", body: "Asking for a test.", kind: QUESTION,
       anonymous: false, private: false, tagIds: []) { id } }`, { c: course });
  const { createComment: answer } = await graphqlAs(server, bob.token,
    `mutation($p: ID!) { createComment(postId: $p, body: "Click Accept.", anonymous: false) { id } }`, { p: q.id });

  const a = await demoPageAs(browser, server, 'alice');
  const b = await demoPageAs(browser, server, 'bob');
  const t = await demoPageAs(browser, server, 'dr_tran');
  pages = { alice: a.page, bob: b.page, tran: t.page };
  await screenshotsOnFailure('questions-accept', () => pages, async () => {
    for (const { page } of [a, b, t]) {
      await go(page, `#/post/${q.id}`);
      await page.getByTestId('comment').first().waitFor();
    }
    const comment = (page) => page.locator(`[data-testid=comment][data-id="${answer.id}"]`);

    // Bob, a student who did not ask: no Accept, no staff buttons.
    assert.equal(await b.page.getByTestId('accept').count(), 0);
    for (const id of STAFF_BUTTONS) assert.equal(await b.page.getByTestId(id).count(), 0, `bob sees ${id}`);
    // Alice asked: Accept, but no staff buttons either.
    for (const id of STAFF_BUTTONS) assert.equal(await a.page.getByTestId(id).count(), 0, `alice sees ${id}`);

    await comment(a.page).getByTestId('accept').click();
    await comment(a.page).getByTestId('badge-accepted').waitFor();
    await a.page.getByTestId('post-badges').getByTestId('badge-resolved').waitFor();
    // Live for Bob and for the instructor.
    await comment(b.page).getByTestId('badge-accepted').waitFor();
    await b.page.getByTestId('post-badges').getByTestId('badge-resolved').waitFor();
    await comment(t.page).getByTestId('badge-accepted').waitFor();
    assert.equal(await comment(a.page).getByTestId('accept').count(), 0, 'no Accept on the accepted answer');

    // Staff endorse Bob's comment: marked for the instructor at once and for Alice live.
    await comment(t.page).getByTestId('endorse').click();
    await comment(t.page).getByTestId('badge-endorsed').waitFor();
    await comment(a.page).getByTestId('badge-endorsed').getByText('@dr_tran').waitFor();
    const { node } = await graphqlAs(server, bob.token, `query($id: ID!) { node(id: $id) { ... on Comment { endorsement { by { handle } } } } }`, { id: answer.id });
    assert.equal(node.endorsement.by.handle, 'dr_tran');
    await comment(t.page).getByTestId('unendorse').waitFor();

    // Staff pin the question: Alice sees it pinned live, and it leads the course's list.
    await t.page.getByTestId('post').getByTestId('pin').click();
    await t.page.getByTestId('post').getByTestId('unpin').waitFor();
    await a.page.getByTestId('post-badges').getByTestId('badge-pinned').waitFor();
    await go(b.page, `#/course/${course}`);
    await b.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    const { course: c } = await graphqlAs(server, bob.token,
      `query($id: ID!) { course(id: $id) { posts(first: 5) { nodes { id pinned } } } }`, { id: course });
    const pins = c.posts.nodes.filter((n) => n.pinned).map((n) => n.id);
    assert.ok(pins.includes(q.id), 'the server lists it pinned');
    const listed = await b.page.getByTestId('post-item').evaluateAll((els) => els.map((el) => el.dataset.id));
    assert.deepEqual(listed.slice(0, pins.length), pins, 'the pinned posts lead the list');
    assert.ok(listed.indexOf(q.id) < pins.length);

    // Clearing the accepted answer reopens the question for everyone.
    await a.page.getByTestId('post').getByTestId('clear-accepted').click();
    await comment(a.page).getByTestId('accept').waitFor();
    await until('accepted mark gone for the instructor', () => comment(t.page).getByTestId('badge-accepted').count(), (n) => n === 0);
    await t.page.getByTestId('post').getByTestId('mark-resolved').click();
    await t.page.getByTestId('post').getByTestId('unresolve').waitFor();
    await a.page.getByTestId('post-badges').getByTestId('badge-resolved').waitFor();
  });
});

test('the filter bar lists what the server lists for the same filter', async () => {
  const alice = demoUser(server, 'alice');
  const course = await courseId(alice.token, 'CS101');
  const a = await demoPageAs(browser, server, 'alice');
  pages = { alice: a.page };
  await screenshotsOnFailure('questions-filter', () => pages, async () => {
    await go(a.page, `#/course/${course}`);
    await a.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    const serverFirstPage = async (filter) => {
      const { course: c } = await graphqlAs(server, alice.token,
        `query($id: ID!, $filter: PostFilter) { course(id: $id) { posts(first: 5, filter: $filter) { nodes { id } } } }`,
        { id: course, filter });
      return c.posts.nodes.map((n) => n.id);
    };
    const pageList = async (filter) => {
      await a.page.locator(`[data-testid=posts][data-pages="1"][data-filter='${JSON.stringify(filter)}']`).waitFor({ state: 'attached' });
      return a.page.getByTestId('post-item').evaluateAll((els) => els.map((el) => el.dataset.id));
    };

    await a.page.getByTestId('filter-unresolved').check();
    const unresolved = await serverFirstPage({ unresolved: true });
    assert.ok(unresolved.length > 0, 'the seed has unresolved questions');
    assert.deepEqual(await pageList({ unresolved: true }), unresolved);
    await a.page.getByTestId('filter-unresolved').uncheck();

    const options = await a.page.getByTestId('filter-tag').locator('option').evaluateAll((os) => os.map((o) => o.value).filter(Boolean));
    assert.ok(options.length > 0, 'CS101 has tags');
    let someTagged = false;
    for (const tagId of options) {
      await a.page.getByTestId('filter-tag').selectOption(tagId);
      const expected = await serverFirstPage({ tagId });
      someTagged ||= expected.length > 0;
      assert.deepEqual(await pageList({ tagId }), expected, `tag ${tagId}`);
    }
    assert.ok(someTagged, 'some tag has posts');
    // Both at once.
    const tagId = options[0];
    await a.page.getByTestId('filter-tag').selectOption(tagId);
    await a.page.getByTestId('filter-unresolved').check();
    assert.deepEqual(await pageList({ unresolved: true, tagId }), await serverFirstPage({ unresolved: true, tagId }));
    // The filter stays in the URL: a reload shows the same list.
    assert.equal(new URL(a.page.url()).hash, `#/course/${encodeURIComponent(course)}?unresolved&tag=${encodeURIComponent(tagId)}`);
    await a.page.reload();
    assert.deepEqual(await pageList({ unresolved: true, tagId }), await serverFirstPage({ unresolved: true, tagId }));
    assert.equal(await a.page.getByTestId('filter-unresolved').isChecked(), true);
    assert.equal(await a.page.getByTestId('filter-tag').inputValue(), tagId);
  });
});
