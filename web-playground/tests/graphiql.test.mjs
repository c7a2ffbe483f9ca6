// GraphiQL is served from local files: it loads and runs a query with every request that
// leaves localhost blocked (and none is attempted).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, launchBrowser, blockOutside, screenshotsOnFailure } from './harness.mjs';

let server, browser;
before(async () => {
  [server, browser] = await Promise.all([startServer(), launchBrowser()]);
});
after(async () => {
  await browser?.close();
  await server?.stop();
});

test('GraphiQL loads offline, runs the demo query and shows the result', async () => {
  const context = await browser.newContext();
  const blocked = await blockOutside(context);
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await screenshotsOnFailure('graphiql', () => ({ graphiql: page }), async () => {
    await page.goto(`${server.url}/`);
    await page.locator('.graphiql-container').waitFor({ timeout: 15_000 });
    // Demo mode: the first demo user's token is in the headers editor, the example in the query editor.
    const user = server.demo.users[0];
    await page.locator('.graphiql-editor-tool', { hasText: 'Bearer' }).first().waitFor({ timeout: 5000 }).catch(() => {});
    await page.locator('.graphiql-query-editor').getByText('MyCourses').first().waitFor();
    await page.locator('.graphiql-execute-button').click();
    const result = page.locator('.result-window');
    await result.getByText(`"${user.handle}"`).first().waitFor({ timeout: 10_000 });
    const text = await result.innerText();
    assert.match(text, /"myCourses"/);
    assert.doesNotMatch(text, /"errors"/);
    assert.deepEqual(blocked, [], 'GraphiQL asked for something outside localhost');
    assert.deepEqual(consoleErrors, []);
  });
  await context.close();
});
