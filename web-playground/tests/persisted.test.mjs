// Automatic persisted queries with the clients' own support, against a real server: Apollo
// Client's persisted-query link and urql's persistedExchange, both asked to send hashed queries
// by GET. The first run of a query finds the hash unknown and sends the text once; every run
// after that sends the hash alone, by GET, and gets the answer.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { ApolloClient, InMemoryCache, HttpLink, gql } from '@apollo/client';
import { createPersistedQueryLink } from '@apollo/client/link/persisted-queries';
import { Client as UrqlClient, fetchExchange } from '@urql/core';
import { persistedExchange } from '@urql/exchange-persisted';
import { startServer } from './harness.mjs';

const sha256 = (text) => createHash('sha256').update(text).digest('hex');

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

/** A fetch that records what each request carried: its method, whether it had the query
 * text, and whether it named a hash. */
function recordingFetch() {
  const sent = [];
  const impl = async (url, init = {}) => {
    const method = (init.method ?? 'GET').toUpperCase();
    let carried;
    if (method === 'GET') {
      const params = new URL(url).searchParams;
      carried = { query: params.get('query'), extensions: params.get('extensions') };
    } else {
      const body = JSON.parse(init.body);
      carried = { query: body.query, extensions: body.extensions && JSON.stringify(body.extensions) };
    }
    const response = await fetch(url, init);
    const copy = response.clone();
    const answer = await copy.json().catch(() => null);
    sent.push({
      method,
      withText: Boolean(carried.query),
      withHash: Boolean(carried.extensions && carried.extensions.includes('sha256Hash')),
      notFound: JSON.stringify(answer?.errors ?? []).includes('PERSISTED_QUERY_NOT_FOUND'),
      answered: Boolean(answer?.data),
    });
    return response;
  };
  return { impl, sent };
}

/** Three runs of the same query: the text goes once, then the hash alone by GET. */
function assertPersisted(sent, label) {
  assert.equal(sent.filter((r) => r.withText).length, 1, `${label}: the text is sent once: ${JSON.stringify(sent)}`);
  assert.ok(sent[0].notFound && !sent[0].withText && sent[0].withHash, `${label}: the first try names the hash alone`);
  const last = sent.slice(-2);
  for (const r of last) {
    assert.deepEqual(
      { method: r.method, withText: r.withText, withHash: r.withHash, answered: r.answered },
      { method: 'GET', withText: false, withHash: true, answered: true },
      `${label}: later runs go by GET with the hash alone: ${JSON.stringify(sent)}`,
    );
  }
}

const ME = gql`
  query Me {
    me { handle }
  }
`;

test('Apollo Client: the persisted-query link registers a query once, then sends its hash by GET', async () => {
  const alice = server.demo.users.find((u) => u.handle === 'alice');
  const recorder = recordingFetch();
  const client = new ApolloClient({
    link: createPersistedQueryLink({ sha256, useGETForHashedQueries: true }).concat(
      new HttpLink({ uri: `${server.url}/graphql`, headers: { authorization: `Bearer ${alice.token}` }, fetch: recorder.impl }),
    ),
    cache: new InMemoryCache(),
  });
  for (let run = 0; run < 3; run++) {
    const { data } = await client.query({ query: ME, fetchPolicy: 'network-only' });
    assert.equal(data.me.handle, 'alice');
  }
  assertPersisted(recorder.sent, 'Apollo');
  client.stop();
});

test('urql: persistedExchange registers a query once, then sends its hash by GET', async () => {
  const alice = server.demo.users.find((u) => u.handle === 'alice');
  const recorder = recordingFetch();
  const client = new UrqlClient({
    url: `${server.url}/graphql`,
    fetch: recorder.impl,
    fetchOptions: { headers: { authorization: `Bearer ${alice.token}` } },
    exchanges: [persistedExchange({ preferGetForPersistedQueries: true, generateHash: async (q) => sha256(q) }), fetchExchange],
  });
  for (let run = 0; run < 3; run++) {
    const result = await client.query(ME, {}, { requestPolicy: 'network-only' }).toPromise();
    assert.equal(result.error, undefined, String(result.error));
    assert.equal(result.data.me.handle, 'alice');
  }
  assertPersisted(recorder.sent, 'urql');
});
