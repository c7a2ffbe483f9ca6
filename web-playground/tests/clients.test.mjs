// Real GraphQL clients against a real server (the demo forum, buffered likes as users get
// them): Apollo Client with InMemoryCache, and urql with Graphcache, both over graphql-ws for
// subscriptions. Each pages a course's posts, likes one optimistically, hears another user's
// like live, and creates then deletes a comment. After every step the test reads the client's
// cache (never the network) and checks what it holds; the clients have no hand-written cache
// updates, only the libraries' own pagination helpers, and the test counts every HTTP request to
// prove that nothing was refetched.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { createClient as createWsClient } from 'graphql-ws';
import { ApolloClient, InMemoryCache, HttpLink, split } from '@apollo/client';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions';
import { relayStylePagination, getMainDefinition } from '@apollo/client/utilities';
import { Client as UrqlClient, fetchExchange, subscriptionExchange, gql } from '@urql/core';
import { cacheExchange as graphcache } from '@urql/exchange-graphcache';
import { relayPagination } from '@urql/exchange-graphcache/extras';
import { startServer } from './harness.mjs';

const COURSES = gql`
  query Courses {
    myCourses { id code }
  }
`;

const PAGE = gql`
  query CoursePosts($course: ID!, $after: String) {
    course(id: $course) {
      id
      posts(first: 5, after: $after) {
        edges { cursor node { id title likeCount likeVersion likedByMe commentCount } }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
`;

const LIKE = gql`
  mutation Like($post: ID!) {
    likePost(postId: $post) { id likeCount likeVersion likedByMe }
  }
`;

const LIKE_COUNTS = gql`
  subscription LikeCounts($ids: [ID!]!) {
    likeCounts(ids: $ids) { id likeCount likeVersion }
  }
`;

const POST = gql`
  query PostWithComments($post: ID!) {
    post(id: $post) { id title commentCount comments(first: 20) { edges { node { id body } } } }
  }
`;

const CREATE_COMMENT = gql`
  mutation Comment($post: ID!, $body: String!) {
    createComment(postId: $post, body: $body) { id body post { id commentCount } }
  }
`;

const DELETE_COMMENT = gql`
  mutation DeleteComment($comment: ID!) {
    deleteComment(commentId: $comment) { deletedId post { id commentCount } }
  }
`;

let server;
before(async () => {
  server = await startServer();
});
after(async () => {
  await server?.stop();
});

const user = (handle) => server.demo.users.find((u) => u.handle === handle);

/** Waits until `read()` returns a truthy value (polling the cache, not the network). */
async function until(what, read, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = read();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Another user's like, sent with plain fetch (not through the client under test). */
async function likeAs(handle, post) {
  const response = await fetch(`${server.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${user(handle).token}` },
    body: JSON.stringify({ query: 'mutation($p: ID!) { likePost(postId: $p) { id } }', variables: { p: post } }),
  });
  const body = await response.json();
  assert.equal(body.errors, undefined, JSON.stringify(body.errors));
}

/** A fetch that records each operation's name and can hold responses (to watch an optimistic
 * update while its request is in flight). */
function recordingFetch() {
  const operations = [];
  let hold = null;
  const impl = async (url, init) => {
    operations.push(JSON.parse(init.body).operationName);
    const response = await fetch(url, init);
    if (hold) await hold.promise;
    return response;
  };
  return {
    impl,
    operations,
    /** Holds every response until the returned function is called. */
    holdResponses() {
      let release;
      hold = { promise: new Promise((r) => (release = r)) };
      return () => {
        hold = null;
        release();
      };
    },
  };
}

function wsClient(token) {
  let connected;
  const ready = new Promise((r) => (connected = r));
  const client = createWsClient({
    url: `${server.url.replace('http', 'ws')}/graphql/ws`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${token}` },
    lazy: false,
    on: { connected },
  });
  return { client, ready };
}

/** The scenario both clients go through; `c` adapts one client library to it. */
async function scenario(c, recorder) {
  const courses = await c.query(COURSES, {});
  const course = courses.myCourses.find((x) => x.code === 'CS101').id;

  // 1. Two pages of a course's posts, merged by the library's relay pagination.
  const first = await c.query(PAGE, { course });
  // The first page also carries the course's pinned posts (the seed pins one), ahead of its five.
  const firstLength = first.course.posts.edges.length;
  assert.ok(firstLength > 5, `the pinned posts lead the first page's five (${firstLength})`);
  assert.equal(first.course.posts.pageInfo.hasNextPage, true);
  await c.query(PAGE, { course, after: first.course.posts.pageInfo.endCursor });
  const merged = c.read(PAGE, { course });
  assert.equal(merged.course.posts.edges.length, firstLength + 5, 'the cache holds both pages as one list');
  const ids = merged.course.posts.edges.map((e) => e.node.id);
  assert.equal(new Set(ids).size, firstLength + 5, 'no post twice');
  const cachedPost = (id) => c.read(PAGE, { course }).course.posts.edges.find((e) => e.node.id === id).node;

  // 2. Live counts for every post on screen.
  await c.subscribe(LIKE_COUNTS, { ids });
  await new Promise((r) => setTimeout(r, 300));

  // 3. An optimistic like: the cache shows it while the server's answer is held back.
  const target = ids.find((id) => !cachedPost(id).likedByMe);
  const start = cachedPost(target);
  const release = recorder.holdResponses();
  const liked = c.like(target, { ...start, likeCount: start.likeCount + 1, likedByMe: true });
  await until('the like request to leave', () => recorder.operations.includes('Like'));
  const optimistic = cachedPost(target);
  assert.equal(optimistic.likeCount, start.likeCount + 1, 'optimistic count');
  assert.equal(optimistic.likedByMe, true, 'optimistic likedByMe');
  release();
  const answer = await liked;
  assert.equal(answer.likePost.likeCount, start.likeCount + 1);
  assert.equal(cachedPost(target).likeCount, start.likeCount + 1, 'the server agreed');
  assert.equal(cachedPost(target).likedByMe, true);

  // 4. Another user's like arrives through the subscription, straight into the cached Post.
  await likeAs('bob', target);
  const heard = await until('bob\'s like to reach the cache', () => {
    const post = cachedPost(target);
    return post.likeCount === start.likeCount + 2 && post;
  });
  assert.ok(heard.likeVersion > start.likeVersion, 'a newer version came with it');
  assert.equal(heard.likedByMe, true, 'the update merged into the post: likedByMe is still there');
  assert.equal(heard.title, start.title);

  // 5. A comment created then deleted: the post's commentCount follows from the payloads.
  const post = await c.query(POST, { post: target });
  const comments = post.post.commentCount;
  const created = await c.mutate(CREATE_COMMENT, { post: target, body: 'from a real client' });
  assert.equal(c.read(POST, { post: target }).post.commentCount, comments + 1, 'the new count, from the payload');
  assert.equal(cachedPost(target).commentCount, comments + 1, 'the same Post on the course page');
  const deleted = await c.mutate(DELETE_COMMENT, { comment: created.createComment.id });
  assert.equal(deleted.deleteComment.deletedId, created.createComment.id);
  assert.equal(c.read(POST, { post: target }).post.commentCount, comments, 'back after the delete');
  assert.equal(cachedPost(target).commentCount, comments);

  // Nothing was fetched again: one request per operation the test sent.
  assert.deepEqual(recorder.operations, [
    'Courses', 'CoursePosts', 'CoursePosts', 'Like', 'PostWithComments', 'Comment', 'DeleteComment',
  ]);
}

test('Apollo Client with InMemoryCache keeps pages, likes, live counts and deletes right', async () => {
  const alice = user('alice');
  const recorder = recordingFetch();
  const ws = wsClient(alice.token);
  const http = new HttpLink({
    uri: `${server.url}/graphql`,
    headers: { authorization: `Bearer ${alice.token}` },
    fetch: recorder.impl,
  });
  const link = split(
    ({ query }) => {
      const definition = getMainDefinition(query);
      return definition.kind === 'OperationDefinition' && definition.operation === 'subscription';
    },
    new GraphQLWsLink(ws.client),
    http,
  );
  const client = new ApolloClient({
    link,
    cache: new InMemoryCache({
      possibleTypes: { Node: ['User', 'Course', 'Post', 'Comment', 'Reply'], Likeable: ['Post', 'Comment', 'Reply'] },
      typePolicies: { Course: { fields: { posts: relayStylePagination() } } },
    }),
  });
  const subscriptions = [];
  try {
    await ws.ready;
    await scenario(
      {
        query: async (query, variables) => {
          const result = await client.query({ query, variables, fetchPolicy: 'network-only' });
          return result.data;
        },
        read: (query, variables) => client.readQuery({ query, variables }, true),
        mutate: async (mutation, variables) => (await client.mutate({ mutation, variables })).data,
        like: async (post, optimistic) =>
          (
            await client.mutate({
              mutation: LIKE,
              variables: { post },
              optimisticResponse: {
                likePost: {
                  __typename: 'Post',
                  id: post,
                  likeCount: optimistic.likeCount,
                  likeVersion: optimistic.likeVersion,
                  likedByMe: true,
                },
              },
            })
          ).data,
        subscribe: async (query, variables) => {
          subscriptions.push(client.subscribe({ query, variables }).subscribe({ error: (e) => console.error(e) }));
        },
      },
      recorder,
    );
  } finally {
    subscriptions.forEach((s) => s.unsubscribe());
    await ws.client.dispose();
    client.stop();
  }
});

test('urql with Graphcache keeps pages, likes, live counts and deletes right', async () => {
  const alice = user('alice');
  const recorder = recordingFetch();
  const ws = wsClient(alice.token);
  const cache = graphcache({
    // Types without an id are embedded in their parent, not normalized.
    keys: { PostConnection: () => null, PostEdge: () => null, CommentConnection: () => null, CommentEdge: () => null, PageInfo: () => null, DeletePayload: () => null },
    resolvers: { Course: { posts: relayPagination() } },
    optimistic: {
      // What the like will look like, from the post as the cache holds it.
      likePost: (args, cache) => {
        const post = cache.readFragment(gql`fragment _ on Post { id likeCount likeVersion }`, { id: args.postId });
        return { __typename: 'Post', id: args.postId, likeCount: post.likeCount + 1, likeVersion: post.likeVersion, likedByMe: true };
      },
    },
  });
  const client = new UrqlClient({
    url: `${server.url}/graphql`,
    fetch: recorder.impl,
    fetchOptions: { headers: { authorization: `Bearer ${alice.token}` } },
    preferGetMethod: false,
    exchanges: [
      cache,
      fetchExchange,
      subscriptionExchange({
        forwardSubscription: (request) => ({
          subscribe: (sink) => ({ unsubscribe: ws.client.subscribe(request, sink) }),
        }),
      }),
    ],
  });
  const subscriptions = [];
  const data = (result) => {
    if (result.error) throw result.error;
    return result.data;
  };
  try {
    await ws.ready;
    await scenario(
      {
        query: async (query, variables) => data(await client.query(query, variables, { requestPolicy: 'network-only' }).toPromise()),
        read: (query, variables) => data(client.readQuery(query, variables, { requestPolicy: 'cache-only' })),
        mutate: async (mutation, variables) => data(await client.mutation(mutation, variables).toPromise()),
        like: async (post) => data(await client.mutation(LIKE, { post }).toPromise()),
        subscribe: async (query, variables) => {
          subscriptions.push(client.subscription(query, variables).subscribe(() => {}));
        },
      },
      recorder,
    );
  } finally {
    subscriptions.forEach((s) => s.unsubscribe());
    await ws.client.dispose();
  }
});
