// The demo's notification bell: Alice has the demo open while Bob, from another client,
// comments on her post and mentions her; her unread count goes up live and the panel lists
// what happened; withdrawing a cause (Bob deletes his comment) takes it back off live; "mark
// all read" brings the count to 0 on the server too; marking read from another client
// reaches the open page live.
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

const shownCount = async (page) => Number(await page.getByTestId('unread-count').innerText());
const serverCount = async (token) =>
  (await graphqlAs(server, token, 'query { notifications(first: 1) { unreadCount } }')).notifications.unreadCount;

/** Waits until the bell shows `expected` (live: the page is never reloaded while waiting). */
const bellShows = (page, expected, what) => until(what, () => shownCount(page), (n) => n === expected);

/** The panel's rows as the user reads them. */
const rows = (page) =>
  page.getByTestId('notification').evaluateAll((els) =>
    els.map((el) => ({
      id: el.dataset.id,
      kind: el.dataset.kind,
      read: el.dataset.read === 'true',
      actor: el.querySelector('[data-testid=notification-actor]')?.textContent.trim(),
      post: el.querySelector('[data-testid=notification-post]')?.textContent.trim(),
    })),
  );

test('B comments on and mentions A: A\'s bell counts up live, lists both, and mark all read clears it', async () => {
  await screenshotsOnFailure('notifications', () => pages, async () => {
    const alice = demoUser(server, 'alice');
    const bob = demoUser(server, 'bob');
    const { myCourses } = await graphqlAs(server, alice.token, 'query { myCourses { id code } }');
    const cs101 = myCourses.find((c) => c.code === 'CS101').id;
    const stamp = Date.now();
    const { createPost: alicesPost } = await graphqlAs(server, alice.token,
      'mutation($c: ID!, $t: String!, $b: String!) { createPost(courseId: $c, title: $t, body: $b) { id title } }',
      { c: cs101, t: `Alice asks ${stamp}`, b: 'Does anyone have the slides?' });

    const a = await demoPageAs(browser, server, 'alice');
    pages.alice = a.page;
    const bell = a.page.getByTestId('bell');
    await bell.waitFor();
    await a.page.locator('#live[data-state=up]').waitFor({ timeout: 5000 });
    // Whatever the seed left unread is the starting point; the page must agree with the server.
    const start = await serverCount(alice.token);
    await bellShows(a.page, start, 'the bell shows the server\'s unread count on load');
    // graphql-ws sends `subscribe` right after connection_ack; give the server a moment to register it.
    await new Promise((r) => setTimeout(r, 300));

    // Bob comments on Alice's post: her count goes up without a reload.
    const { createComment } = await graphqlAs(server, bob.token,
      'mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }',
      { p: alicesPost.id, b: `Here they are ${stamp}` });
    await bellShows(a.page, start + 1, 'a comment on her post counts live');
    assert.equal(await bell.getAttribute('title'), `${start + 1} unread notification${start + 1 === 1 ? '' : 's'}`);

    // The panel lists it, newest first: a reply by @bob about her post, unread.
    await bell.click();
    await a.page.getByTestId('notifications').waitFor();
    const newest = await until('the panel lists the comment', () => rows(a.page), (r) => r[0]?.post === alicesPost.title);
    const { id: replyRow, ...seen } = newest[0];
    assert.deepEqual(seen, { kind: 'REPLY', read: false, actor: '@bob', post: alicesPost.title });

    // With the panel open, Bob mentions @alice in a post of his: counted and listed live, on top.
    const { createPost: mention } = await graphqlAs(server, bob.token,
      'mutation($c: ID!, $t: String!, $b: String!) { createPost(courseId: $c, title: $t, body: $b) { id title } }',
      { c: cs101, t: `Study group ${stamp}`, b: 'Who is in? @alice you said you might come.' });
    await bellShows(a.page, start + 2, 'a mention counts live');
    const listed = await until('the mention is listed live', () => rows(a.page), (r) => r[0]?.post === mention.title);
    assert.deepEqual(listed.slice(0, 2).map(({ kind, actor, read }) => ({ kind, actor, read })), [
      { kind: 'MENTION', actor: '@bob', read: false },
      { kind: 'REPLY', actor: '@bob', read: false },
    ]);

    // Bob deletes his comment: its notification is withdrawn, live, from the count and the list.
    await graphqlAs(server, bob.token, 'mutation($id: ID!) { deleteComment(commentId: $id) { deletedId } }', { id: createComment.id });
    await bellShows(a.page, start + 1, 'a withdrawn notification leaves the count live');
    await until('the withdrawn one leaves the list', () => rows(a.page), (r) => !r.some((x) => x.id === replyRow));
    assert.equal(await serverCount(alice.token), start + 1);

    // One more comment from Bob, so two are unread: the mention and this one.
    await graphqlAs(server, bob.token, 'mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }',
      { p: alicesPost.id, b: `Found more slides ${stamp}` });
    await bellShows(a.page, start + 2, 'the second comment counts live');
    await until('both unread ones are listed', () => rows(a.page),
      (r) => r.filter((x) => !x.read).length >= 2 && r[0].kind === 'REPLY');

    // Mark all read: 0 on the page and on the server, every row read, and still 0 after a reload.
    await a.page.getByTestId('mark-all-read').click();
    await bellShows(a.page, 0, 'mark all read clears the count');
    await until('every listed row reads as read', () => rows(a.page), (r) => r.length > 0 && r.every((x) => x.read));
    assert.equal(await serverCount(alice.token), 0);
    assert.equal(await a.page.getByTestId('mark-all-read').isDisabled(), true);
    await a.page.reload();
    await bell.waitFor();
    await a.page.locator('#live[data-state=up]').waitFor({ timeout: 5000 });
    await bellShows(a.page, 0, 'still 0 after a reload');
    await new Promise((r) => setTimeout(r, 300)); // the new page's subscription, as above

    // Bob replies again; Alice reads it in another client: the open page follows both, live.
    await graphqlAs(server, bob.token, 'mutation($p: ID!, $b: String!) { createComment(postId: $p, body: $b) { id } }',
      { p: alicesPost.id, b: `One more thing ${stamp}` });
    await bellShows(a.page, 1, 'a new comment after mark-all-read counts 1');
    const { notifications } = await graphqlAs(server, alice.token, 'query { notifications(first: 1) { nodes { id } } }');
    const { markNotificationsRead } = await graphqlAs(server, alice.token,
      'mutation($id: ID!) { markNotificationsRead(upTo: $id) { unreadCount } }', { id: notifications.nodes[0].id });
    assert.equal(markNotificationsRead.unreadCount, 0);
    await bellShows(a.page, 0, 'read in another client: the open page follows live');
    assert.deepEqual(a.blocked, []);
  });
});

test('a mention notifies members of the course only: Bob\'s bell counts Alice\'s @bob in CS101, not in MATH201 (not his)', async () => {
  await screenshotsOnFailure('notifications-per-user', () => pages, async () => {
    const alice = demoUser(server, 'alice');
    const bob = demoUser(server, 'bob');
    const { myCourses } = await graphqlAs(server, alice.token, 'query { myCourses { id code } }');
    const math = myCourses.find((c) => c.code === 'MATH201').id; // alice, carol, dr_tran: not bob
    const b = await demoPageAs(browser, server, 'bob');
    pages.bob = b.page;
    await b.page.locator('#live[data-state=up]').waitFor({ timeout: 5000 });
    const bobStart = await serverCount(bob.token);
    const aliceStart = await serverCount(alice.token);
    await bellShows(b.page, bobStart, 'Bob\'s bell shows his own count');
    await new Promise((r) => setTimeout(r, 300));

    // Alice mentions @bob in MATH201, a course he is not in (no notification), then @carol
    // there (a notification for Carol, not for Bob); then she mentions @bob in CS101 (his).
    const post = (c, t, body) => graphqlAs(server, alice.token,
      'mutation($c: ID!, $t: String!, $b: String!) { createPost(courseId: $c, title: $t, body: $b) { id } }', { c, t, b: body });
    await post(math, 'Matrices', 'Has @bob seen this? Not in this course, so no.');
    await post(math, 'Matrices again', '@carol could you share your notes?');
    const cs101 = myCourses.find((c) => c.code === 'CS101').id;
    await post(cs101, 'Recursion help', 'Thanks @bob for the fib question!');
    // The CS101 mention arrives; the two before it (sent first, on the same path) did not count.
    await bellShows(b.page, bobStart + 1, 'only the mention in his own course counts');
    assert.equal(await serverCount(bob.token), bobStart + 1);
    assert.equal(await serverCount(alice.token), aliceStart, 'her own posts notify Alice of nothing');
    await b.page.getByTestId('bell').click();
    const listed = await until('the mention is listed', () => rows(b.page), (r) => r.length > 0);
    assert.deepEqual({ kind: listed[0].kind, actor: listed[0].actor, post: listed[0].post },
      { kind: 'MENTION', actor: '@alice', post: 'Recursion help' });
    assert.equal(listed.filter((r) => r.post?.startsWith('Matrices')).length, 0);
  });
});
