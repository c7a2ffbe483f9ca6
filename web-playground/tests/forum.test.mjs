// The demo as a forum to use, not only to read: start a post (it tops the course's list, for
// its author at once and for other members live), reply to a comment and to a reply, edit and
// delete what you wrote, and an instructor deleting a student's comment. Refusals show the
// server's error code. Nouns agree with their counts on every page.
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

async function signedIn(handle) {
  const { page, blocked } = await demoPageAs(browser, server, handle);
  pages[handle] = page;
  return { page, blocked };
}

/** Waits until the page's socket is up and its subscriptions had a moment to register. */
async function liveOn(page) {
  await page.locator('#live[data-state=up]').waitFor({ timeout: 5000 });
  await new Promise((r) => setTimeout(r, 300));
}

const firstItemTitle = (page) => page.getByTestId('post-item').first().locator('a').innerText();
const postIdOf = (page) => decodeURIComponent(page.url().split('#/post/')[1]);

/** Starts a post through the form on the course page that `page` shows. */
async function startPost(page, title, body) {
  if (!(await page.getByTestId('post-form-title').isVisible())) await page.getByTestId('new-post-open').click();
  await page.getByTestId('post-form-title').fill(title);
  await page.getByTestId('post-form-body').fill(body);
  await page.getByTestId('post-form-submit').click();
}

/** The comment or reply whose text is `text`. */
const comment = (page, text) => page.getByTestId('comment').filter({ has: page.getByTestId('comment-text').getByText(text, { exact: true }) });
const reply = (page, text) => page.getByTestId('reply').filter({ has: page.getByTestId('reply-text').getByText(text, { exact: true }) });
const commentCount = async (page) => Number(await page.getByTestId('comment-count').innerText());

test('the start page counts courses with the right noun', async () => {
  await screenshotsOnFailure('forum-nouns', () => pages, async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    pages.start = page;
    await page.goto(`${server.url}/demo`);
    await page.getByTestId('user-dave').waitFor();
    const line = (handle) => page.getByTestId(`user-${handle}`).locator('..').innerText();
    assert.match(await line('dave'), /\b1 course\b(?!s)/);
    assert.match(await line('alice'), /\b3 courses\b/);
    assert.doesNotMatch(await page.getByTestId('users').innerText(), /\b1 courses\b/);
  });
});

test('a new post tops the course list: at once for its author, live for another member', async () => {
  await screenshotsOnFailure('forum-new-post', () => pages, async () => {
    const a = await signedIn('alice');
    const b = await signedIn('bob');
    for (const { page } of [a, b]) {
      await page.getByTestId('course-CS101').click();
      await page.locator('[data-testid=posts][data-pages="1"]').waitFor();
      await liveOn(page);
    }
    const title = `Office hours moved? ${Date.now()}`;
    // Blank fields are refused in the page, before the server.
    await startPost(a.page, '   ', ' ');
    await a.page.getByTestId('post-form-error').getByText('A post needs a title and a text.').waitFor();
    await startPost(a.page, title, 'Is Thursday still on?\nAsking for the lab group.');
    await a.page.getByTestId('post-item').first().getByText(title).waitFor({ timeout: 3000 });
    assert.equal(await firstItemTitle(a.page), title);
    assert.match(await a.page.getByTestId('post-item').first().innerText(), /@alice · 0 likes\s*· 0 comments/);
    // Bob's list gets it live, on top.
    await b.page.getByTestId('post-item').first().getByText(title).waitFor({ timeout: 3000 });
    assert.equal(await b.page.getByTestId('post-item').filter({ hasText: title }).count(), 1);
    // Bob comments on it from another client: the count on Alice's list follows, with its noun.
    const id = await a.page.getByTestId('post-item').first().getAttribute('data-id');
    await graphqlAs(server, demoUser(server, 'bob').token,
      'mutation($p: ID!) { createComment(postId: $p, body: "Still on.") { id } }', { p: id });
    await a.page.getByTestId('post-item').first().getByText('1 comment', { exact: true }).waitFor({ timeout: 3000 });
    // It is a post like the others: it opens, with its body as written.
    await a.page.getByTestId('post-item').first().locator('a').click();
    await a.page.getByTestId('post-title').getByText(title).waitFor();
    assert.equal(await a.page.getByTestId('post-body').innerText(), 'Is Thursday still on?\nAsking for the lab group.');
    // And a reload of the course still has it on top (from the server this time), after the
    // pinned posts, which lead every first page.
    await a.page.goBack();
    await a.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    const unpinned = a.page.getByTestId('post-item').filter({ hasNot: a.page.getByTestId('badge-pinned') });
    assert.equal(await unpinned.first().locator('a').innerText(), title);
    assert.deepEqual([...a.blocked, ...b.blocked], []);
  });
});

test('replies to a comment and to a reply, through the page, arrive live for the other', async () => {
  await screenshotsOnFailure('forum-replies', () => pages, async () => {
    const a = await signedIn('alice');
    const b = await signedIn('bob');
    await a.page.getByTestId('course-CS101').click();
    await a.page.getByTestId('post-item').first().locator('a').click();
    await a.page.getByTestId('post-title').waitFor();
    await b.page.goto(a.page.url());
    await b.page.getByTestId('post-title').waitFor();
    await liveOn(a.page);
    await liveOn(b.page);
    const before = await commentCount(a.page);
    const stamp = Date.now();

    await a.page.getByTestId('comment-body').fill(`Question ${stamp}`);
    await a.page.getByTestId('comment-submit').click();
    await comment(b.page, `Question ${stamp}`).waitFor({ timeout: 3000 });

    // Bob replies to Alice's comment.
    await comment(b.page, `Question ${stamp}`).locator('[data-actions-of]').first().getByTestId('reply-button').click();
    assert.equal(await b.page.getByTestId('reply-body').getAttribute('placeholder'), 'Reply to @alice');
    await b.page.getByTestId('reply-body').fill(`Answer ${stamp}`);
    await b.page.getByTestId('reply-submit').click();
    await reply(b.page, `Answer ${stamp}`).waitFor({ timeout: 3000 });
    // The reply may arrive live before the mutation's answer closes the form.
    await until('the form closes once sent', () => b.page.getByTestId('reply-form').count(), (n) => n === 0);
    await reply(a.page, `Answer ${stamp}`).waitFor({ timeout: 3000 });
    assert.match(await reply(a.page, `Answer ${stamp}`).innerText(), /@bob → @alice/);

    // Alice replies to Bob's reply: it joins the same thread, answering Bob.
    await reply(a.page, `Answer ${stamp}`).getByTestId('reply-button').click();
    assert.equal(await a.page.getByTestId('reply-body').getAttribute('placeholder'), 'Reply to @bob');
    await a.page.getByTestId('reply-body').fill(`Thanks ${stamp}`);
    await a.page.getByTestId('reply-submit').click();
    for (const page of [a.page, b.page]) {
      const thanks = reply(page, `Thanks ${stamp}`);
      await thanks.waitFor({ timeout: 3000 });
      assert.match(await thanks.innerText(), /@alice → @bob/);
      // Under Alice's comment, after Bob's reply.
      assert.deepEqual(
        await comment(page, `Question ${stamp}`).getByTestId('reply-text').allInnerTexts(),
        [`Answer ${stamp}`, `Thanks ${stamp}`],
      );
      assert.equal(await commentCount(page), before + 3);
      assert.equal(await reply(page, `Thanks ${stamp}`).count(), 1, 'shown once');
    }
    assert.deepEqual([...a.blocked, ...b.blocked], []);
  });
});

test('authors edit and delete their own post, comment and reply; others get no such buttons', async () => {
  await screenshotsOnFailure('forum-edit-delete', () => pages, async () => {
    const a = await signedIn('alice');
    await a.page.getByTestId('course-CS101').click();
    const stamp = Date.now();
    await startPost(a.page, `Draft ${stamp}`, 'First words');
    await a.page.getByTestId('post-item').first().getByText(`Draft ${stamp}`).click();
    await a.page.getByTestId('post-title').getByText(`Draft ${stamp}`).waitFor();
    const postId = postIdOf(a.page);
    const b = await signedIn('bob');
    await b.page.getByTestId('course-CS101').waitFor(); // else the late course list paints over the post
    await b.page.goto(a.page.url());
    await b.page.getByTestId('post-title').waitFor();
    await liveOn(a.page);
    await liveOn(b.page);

    // The post: Alice edits title and body.
    await a.page.getByTestId('post').getByTestId('edit').click();
    await a.page.getByTestId('edit-title').fill(`Final ${stamp}`);
    await a.page.getByTestId('edit-body').fill('Better words');
    await a.page.getByTestId('edit-save').click();
    await a.page.getByTestId('post-title').getByText(`Final ${stamp}`).waitFor({ timeout: 3000 });
    assert.equal(await a.page.getByTestId('post-body').innerText(), 'Better words');
    assert.match(await a.page.getByTestId('post').innerText(), /edited/);

    // A comment and a reply of Alice's, and one comment of Bob's.
    await a.page.getByTestId('comment-body').fill(`mine ${stamp}`);
    await a.page.getByTestId('comment-submit').click();
    await comment(a.page, `mine ${stamp}`).locator('[data-actions-of]').first().getByTestId('reply-button').click();
    await a.page.getByTestId('reply-body').fill(`my reply ${stamp}`);
    await a.page.getByTestId('reply-submit').click();
    await reply(a.page, `my reply ${stamp}`).waitFor({ timeout: 3000 });
    await b.page.getByTestId('comment-body').fill(`bobs ${stamp}`);
    await b.page.getByTestId('comment-submit').click();
    await comment(a.page, `bobs ${stamp}`).waitFor({ timeout: 3000 });
    await reply(b.page, `my reply ${stamp}`).waitFor({ timeout: 3000 });

    // Edit and Delete only on one's own (neither is an instructor in CS101).
    assert.equal(await comment(a.page, `bobs ${stamp}`).getByTestId('edit').count(), 0);
    assert.equal(await comment(a.page, `bobs ${stamp}`).getByTestId('delete').count(), 0);
    assert.equal(await b.page.getByTestId('post').getByTestId('edit').count(), 0);
    assert.equal(await b.page.getByTestId('post').getByTestId('delete').count(), 0);
    assert.equal(await reply(b.page, `my reply ${stamp}`).getByTestId('edit').count(), 0);
    assert.equal(await comment(b.page, `bobs ${stamp}`).locator('[data-actions-of]').first().getByTestId('edit').count(), 1);

    // Alice edits her comment and her reply; Cancel first leaves the text as it was.
    const mine = comment(a.page, `mine ${stamp}`);
    await mine.locator('[data-actions-of]').first().getByTestId('edit').click();
    await mine.getByTestId('edit-body').fill('never sent');
    await mine.getByTestId('edit-cancel').click();
    assert.equal(await mine.getByTestId('comment-text').innerText(), `mine ${stamp}`);
    await mine.locator('[data-actions-of]').first().getByTestId('edit').click();
    await mine.getByTestId('edit-body').fill(`mine, edited ${stamp}`);
    await mine.getByTestId('edit-save').click();
    const edited = comment(a.page, `mine, edited ${stamp}`);
    await edited.waitFor({ timeout: 3000 });
    const myReply = reply(a.page, `my reply ${stamp}`);
    await myReply.getByTestId('edit').click();
    await myReply.getByTestId('edit-body').fill(`my reply, edited ${stamp}`);
    await myReply.getByTestId('edit-save').click();
    await reply(a.page, `my reply, edited ${stamp}`).waitFor({ timeout: 3000 });
    assert.match(await reply(a.page, `my reply, edited ${stamp}`).locator('.muted').innerText(), /edited/);

    // The server kept the edits: a reload reads them.
    await a.page.reload();
    await a.page.getByTestId('post-title').getByText(`Final ${stamp}`).waitFor();
    await comment(a.page, `mine, edited ${stamp}`).waitFor();
    await reply(a.page, `my reply, edited ${stamp}`).waitFor();
    await liveOn(a.page);
    const count = await commentCount(a.page);
    assert.equal(count, 3);

    // Delete asks first; Keep keeps.
    const replyNow = reply(a.page, `my reply, edited ${stamp}`);
    await replyNow.getByTestId('delete').click();
    await replyNow.getByText('Keep').click();
    assert.equal(await replyNow.count(), 1);
    await replyNow.getByTestId('delete').click();
    await replyNow.getByTestId('confirm-delete').click();
    await replyNow.waitFor({ state: 'detached', timeout: 3000 });
    assert.equal(await commentCount(a.page), 2);
    // Bob's page loses it live.
    await b.page.getByTestId('reply').filter({ hasText: `my reply` }).waitFor({ state: 'detached', timeout: 3000 });

    const commentNow = comment(a.page, `mine, edited ${stamp}`);
    await commentNow.locator('[data-actions-of]').first().getByTestId('delete').click();
    await commentNow.getByTestId('confirm-delete').click();
    await commentNow.waitFor({ state: 'detached', timeout: 3000 });
    assert.equal(await commentCount(a.page), 1);
    assert.equal(await a.page.getByTestId('comment-noun').innerText(), 'comment');

    // The post: Alice is taken back to the course, where it is gone; Bob is told.
    await a.page.getByTestId('post').getByTestId('delete').click();
    await a.page.getByTestId('post').getByTestId('confirm-delete').click();
    await a.page.waitForURL(/#\/course\//);
    await a.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    assert.equal(await a.page.locator(`[data-testid=post-item][data-id="${postId}"]`).count(), 0);
    await b.page.getByTestId('post-deleted').waitFor({ timeout: 3000 });
    assert.deepEqual([...a.blocked, ...b.blocked], []);
  });
});

test("an instructor deletes a student's comment; a refused edit shows the server's code", async () => {
  await screenshotsOnFailure('forum-staff', () => pages, async () => {
    const a = await signedIn('alice');
    await a.page.getByTestId('course-CS101').click();
    const stamp = Date.now();
    await startPost(a.page, `Staff test ${stamp}`, 'body');
    await a.page.getByTestId('post-item').first().getByText(`Staff test ${stamp}`).click();
    await a.page.getByTestId('post-title').getByText(`Staff test ${stamp}`).waitFor();
    const postId = postIdOf(a.page);
    await a.page.getByTestId('comment-body').fill(`off topic ${stamp}`);
    await a.page.getByTestId('comment-submit').click();
    await comment(a.page, `off topic ${stamp}`).waitFor();
    await liveOn(a.page);

    // Dr. Tran teaches CS101: Delete on Alice's post and comment, but no Edit.
    const t = await signedIn('dr_tran');
    // The course list renders after signing in; a route taken before it would be painted over.
    await t.page.getByTestId('course-CS101').waitFor();
    await t.page.goto(a.page.url());
    await t.page.getByTestId('post-title').waitFor();
    assert.equal(await t.page.getByTestId('post').getByTestId('delete').count(), 1);
    assert.equal(await t.page.getByTestId('post').getByTestId('edit').count(), 0);
    const offTopic = comment(t.page, `off topic ${stamp}`);
    assert.equal(await offTopic.locator('[data-actions-of]').first().getByTestId('edit').count(), 0);
    await offTopic.locator('[data-actions-of]').first().getByTestId('delete').click();
    await offTopic.getByTestId('confirm-delete').click();
    await offTopic.waitFor({ state: 'detached', timeout: 3000 });
    await comment(a.page, `off topic ${stamp}`).waitFor({ state: 'detached', timeout: 3000 });
    assert.equal(await commentCount(a.page), 0);

    // Alice starts editing; meanwhile the instructor deletes the post from another client.
    await a.page.getByTestId('post').getByTestId('edit').click();
    await a.page.getByTestId('edit-body').fill('too late');
    await graphqlAs(server, demoUser(server, 'dr_tran').token,
      'mutation($id: ID!) { deletePost(postId: $id) { deletedId } }', { id: postId });
    await a.page.getByTestId('post-deleted').waitFor({ timeout: 3000 });
    await a.page.getByTestId('edit-save').click();
    await a.page.getByTestId('edit-error').getByText('NOT_FOUND').waitFor({ timeout: 3000 });
    assert.match(await a.page.getByTestId('edit-error').innerText(), /^Not found \(deleted meanwhile\?\) \(NOT_FOUND\): /);
  });
});

/** Tags for a course, made in its database (no mutation makes them yet): [{ id, name }] as
 * the API names them. */
async function addTags(code, names) {
  const values = names.map((n) => `('${n.replaceAll("'", "''")}')`).join(', ');
  await server.sql(`INSERT INTO course_tags (course_id, name) SELECT c.id, v.name FROM courses c, (VALUES ${values}) AS v(name) WHERE c.code = '${code}'`);
  const course = demoUser(server, 'alice').courses;
  for (const id of course) {
    const { course: c } = await graphqlAs(server, demoUser(server, 'alice').token, 'query($id: ID!) { course(id: $id) { code tags { id name } } }', { id });
    if (c.code === code) return c.tags;
  }
  throw new Error(`alice is not in ${code}`);
}

const item = (page, title) => page.getByTestId('post-item').filter({ hasText: title });
const badgesOf = (locator) => locator.locator('[data-testid^=badge-]').evaluateAll((els) => els.map((e) => e.dataset.testid.slice(6)));

test('a private question with tags: its author and the instructor see it, marked; another student never does', async () => {
  await screenshotsOnFailure('forum-question', () => pages, async () => {
    // The seed gives CS101 three tags; a fourth shows the limit of three a post.
    const tags = await addTags('CS101', ['Labs']);
    assert.equal(tags.length, 4);
    const a = await signedIn('alice');
    const b = await signedIn('bob');
    const t = await signedIn('dr_tran');
    for (const { page } of [a, b, t]) {
      await page.getByTestId('course-CS101').click();
      await page.locator('[data-testid=posts][data-pages="1"]').waitFor();
      await liveOn(page);
    }
    // Students ask and discuss; only staff announce.
    assert.deepEqual(await a.page.getByTestId('post-form-kind').locator('option').evaluateAll((os) => os.map((o) => o.value)),
      ['DISCUSSION', 'QUESTION']);
    assert.deepEqual(await t.page.getByTestId('post-form-kind').locator('option').evaluateAll((os) => os.map((o) => o.value)),
      ['DISCUSSION', 'QUESTION', 'ANNOUNCEMENT']);

    const title = `Is recursion on the exam? ${Date.now()}`;
    await a.page.getByTestId('new-post-open').click();
    await a.page.getByTestId('post-form-kind').selectOption('QUESTION');
    await a.page.getByTestId('post-form-private').check();
    // At most three tags: the fourth box locks once three are ticked.
    const boxes = a.page.getByTestId('post-form-tag');
    for (const i of [0, 2, 1]) await boxes.nth(i).check();
    assert.equal(await boxes.nth(3).isDisabled(), true);
    await boxes.nth(1).uncheck();
    assert.equal(await boxes.nth(3).isDisabled(), false);
    await startPost(a.page, title, 'And if so, which kind?');
    const mine = item(a.page, title);
    await mine.waitFor({ timeout: 3000 });
    assert.deepEqual(await badgesOf(mine), ['question', 'private', 'unanswered']);
    assert.deepEqual(await mine.getByTestId('tag').allInnerTexts(), [tags[0].name, tags[2].name]);

    // The instructor's list gets it live, marked private; Bob's does not.
    await item(t.page, title).waitFor({ timeout: 3000 });
    assert.deepEqual(await badgesOf(item(t.page, title)), ['question', 'private', 'unanswered']);
    const id = await mine.getAttribute('data-id');
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(await item(b.page, title).count(), 0);
    await b.page.goto(`${server.url}/demo/#/post/${encodeURIComponent(id)}`);
    await b.page.getByTestId('error').waitFor();
    assert.match(await b.page.getByTestId('error').innerText(), /NOT_FOUND|not found/i);

    // The instructor answers: the question is answered, no longer "unanswered".
    await t.page.goto(`${server.url}/demo/#/post/${encodeURIComponent(id)}`);
    await t.page.getByTestId('post-title').getByText(title).waitFor();
    assert.deepEqual(await badgesOf(t.page.getByTestId('post-badges')), ['question', 'private', 'unanswered']);
    await t.page.getByTestId('comment-body').fill('Yes: tail recursion, see week 7.');
    await t.page.getByTestId('comment-submit').click();
    await comment(t.page, 'Yes: tail recursion, see week 7.').waitFor({ timeout: 3000 });
    await a.page.goto(t.page.url());
    await a.page.getByTestId('post-title').getByText(title).waitFor();
    assert.deepEqual(await badgesOf(a.page.getByTestId('post-badges')), ['question', 'private']);
    assert.deepEqual(await a.page.getByTestId('post-badges').getByTestId('tag').allInnerTexts(), [tags[0].name, tags[2].name]);

    // And the instructor's announcement reads as one, live on Bob's list too.
    await b.page.goto(`${server.url}/demo/#/courses`);
    await b.page.getByTestId('course-CS101').click();
    await b.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    await liveOn(b.page);
    await t.page.goBack();
    await t.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    await t.page.getByTestId('new-post-open').click();
    await t.page.getByTestId('post-form-kind').selectOption('ANNOUNCEMENT');
    assert.equal(await t.page.getByTestId('post-form-private').isVisible(), false, 'private is for questions');
    await startPost(t.page, `Room change ${title}`, 'Lecture 8 is in B201.');
    await item(b.page, `Room change ${title}`).waitFor({ timeout: 3000 });
    assert.deepEqual(await badgesOf(item(b.page, `Room change ${title}`)), ['announcement']);
    assert.deepEqual([...a.blocked, ...b.blocked, ...t.blocked], []);
  });
});

test('anonymous writing where the course allows it: classmates see a pseudonym, the writer and staff see through it', async () => {
  await screenshotsOnFailure('forum-anonymous', () => pages, async () => {
    await server.sql(`UPDATE courses SET anonymity = 'classmates' WHERE code = 'CS101'`);
    const a = await signedIn('alice');
    const b = await signedIn('bob');
    const t = await signedIn('dr_tran');
    for (const { page } of [a, b, t]) {
      await page.getByTestId('course-CS101').click();
      await page.locator('[data-testid=posts][data-pages="1"]').waitFor();
      await liveOn(page);
    }
    const title = `A silly question ${Date.now()}`;
    await a.page.getByTestId('new-post-open').click();
    assert.match(await a.page.getByTestId('post-form-anonymous').locator('..').innerText(), /other students see a pseudonym/);
    await a.page.getByTestId('post-form-anonymous').check();
    await startPost(a.page, title, 'What is a stack frame, really?');
    await item(a.page, title).waitFor({ timeout: 3000 });
    const pseudonym = await item(a.page, title).getByTestId('pseudonym').innerText();
    assert.match(pseudonym, /^as Anonymous /);
    const name = pseudonym.slice(3);
    assert.match(await item(a.page, title).locator('.muted').innerText(), /^@alice as Anonymous /);
    // Bob sees the pseudonym alone, live; the instructor sees through it.
    await item(b.page, title).waitFor({ timeout: 3000 });
    assert.equal(await item(b.page, title).getByTestId('pseudonym').innerText(), name);
    assert.doesNotMatch(await item(b.page, title).innerText(), /alice/);
    await item(t.page, title).waitFor({ timeout: 3000 });
    assert.match(await item(t.page, title).locator('.muted').innerText(), new RegExp(`^@alice as ${name}`));

    // On the post: Bob comments signed; Alice replies anonymously, under the same name.
    await b.page.getByTestId('post-item').filter({ hasText: title }).locator('a').click();
    await b.page.getByTestId('post-title').getByText(title).waitFor();
    assert.equal(await b.page.getByTestId('post-author').innerText(), name);
    await a.page.goto(b.page.url());
    await a.page.getByTestId('post-title').waitFor();
    await liveOn(a.page);
    await liveOn(b.page);
    await b.page.getByTestId('comment-body').fill('The locals and return address of one call.');
    await b.page.getByTestId('comment-submit').click();
    const bobs = comment(a.page, 'The locals and return address of one call.');
    await bobs.waitFor({ timeout: 3000 });
    await bobs.locator('[data-actions-of]').first().getByTestId('reply-button').click();
    await a.page.getByTestId('reply-anonymous').check();
    await a.page.getByTestId('reply-body').fill('Thanks, and who pops it?');
    await a.page.getByTestId('reply-submit').click();
    const anonReply = reply(b.page, 'Thanks, and who pops it?');
    await anonReply.waitFor({ timeout: 3000 });
    assert.equal(await anonReply.getByTestId('reply-author').innerText(), name, 'the same name in the whole thread');
    assert.doesNotMatch(await anonReply.innerText(), /alice/);
    // Bob answers the pseudonym: the form and the reply name it, not Alice.
    await anonReply.getByTestId('reply-button').click();
    assert.equal(await b.page.getByTestId('reply-body').getAttribute('placeholder'), `Reply to ${name}`);
    await b.page.getByTestId('reply-body').fill('The caller, on return.');
    await b.page.getByTestId('reply-submit').click();
    const answer = reply(b.page, 'The caller, on return.');
    await answer.waitFor({ timeout: 3000 });
    assert.match(await answer.locator('.muted').innerText(), new RegExp(`^@bob → ${name}`));
    // Alice still edits what she wrote anonymously (she is its author).
    assert.equal(await reply(a.page, 'Thanks, and who pops it?').getByTestId('edit').count(), 1);
    // Bob's bell names who replied to him by the pseudonym.
    await b.page.getByTestId('bell').click();
    const note = b.page.getByTestId('notification').filter({ hasText: title }).first();
    await note.waitFor({ timeout: 3000 });
    assert.equal(await note.getByTestId('notification-actor').innerText(), name);

    // Where the course keeps writing signed, the box is absent.
    await a.page.goto(`${server.url}/demo/#/courses`);
    await a.page.getByTestId('course-MATH201').click();
    await a.page.locator('[data-testid=posts][data-pages="1"]').waitFor();
    assert.equal(await a.page.getByTestId('post-form-anonymous').count(), 0);
    assert.deepEqual([...a.blocked, ...b.blocked, ...t.blocked], []);
  });
});
