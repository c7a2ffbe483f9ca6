// GraphiQL from npm, bundled by vite: nothing is loaded from a CDN. Queries and mutations go
// to POST /graphql; subscriptions to ws://<host>/graphql/ws (graphql-transport-ws), with the
// Authorization value from the headers editor as the connection_init payload.
import { createElement } from 'react';
import { createRoot } from 'react-dom/client';
import { GraphiQL } from 'graphiql';
import 'graphiql/style.css';
import { createGraphiQLFetcher } from '@graphiql/toolkit';
import { createClient } from 'graphql-ws';
import { parse, getOperationAST } from 'graphql';

const httpFetcher = createGraphiQLFetcher({ url: '/graphql' });
const wsUrl = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/graphql/ws`;

// One websocket per Authorization value: changing the token in the headers editor opens a
// socket for the new user (the server authenticates once, at connection_init).
const sockets = new Map();
function socketFor(authorization) {
  const key = authorization ?? '';
  if (!sockets.has(key)) {
    sockets.set(
      key,
      createClient({
        url: wsUrl,
        lazy: true,
        connectionParams: authorization ? { authorization } : {},
      }),
    );
  }
  return sockets.get(key);
}

function authorizationOf(headers) {
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (name.toLowerCase() === 'authorization') return String(value);
  }
  return undefined;
}

function isSubscription(params) {
  try {
    const op = getOperationAST(parse(params.query), params.operationName || undefined);
    return op?.operation === 'subscription';
  } catch {
    return false;
  }
}

function fetcher(params, opts) {
  if (!isSubscription(params)) return httpFetcher(params, opts);
  const client = socketFor(authorizationOf(opts?.headers));
  return client.iterate({ query: params.query, variables: params.variables, operationName: params.operationName });
}

const EXAMPLE = `# The demo user's courses and each course's newest posts (a Relay connection).
# Press the run button (or Ctrl-Enter). Try also:
#   subscription { likeCounts(ids: ["<a post id>"]) { id likeCount } }
query MyCourses {
  me { handle displayName }
  myCourses {
    id
    code
    title
    myRole
    posts(first: 3) {
      pageInfo { hasNextPage endCursor }
      edges { node { id title likeCount commentCount likedByMe author { handle } } }
    }
  }
}
`;

async function demoConfig() {
  // In demo mode (DEMO_USERS_FILE set) the server hands out the seeded users and tokens.
  try {
    const res = await fetch('/demo/users.json', { cache: 'no-store' });
    if (!res.ok) return null;
    const demo = await res.json();
    const user = demo.users?.[0];
    return user ? { user } : null;
  } catch {
    return null;
  }
}

const demo = await demoConfig();
const props = { fetcher, defaultQuery: EXAMPLE, shouldPersistHeaders: false };
if (demo) {
  props.headers = JSON.stringify({ Authorization: `Bearer ${demo.user.token}` }, null, 2);
  props.defaultHeaders = props.headers;
  props.query = EXAMPLE;
  props.defaultEditorToolsVisibility = 'headers';
  document.title = `course-forum · GraphiQL (demo: @${demo.user.handle})`;
}
createRoot(document.getElementById('graphiql')).render(createElement(GraphiQL, props));
