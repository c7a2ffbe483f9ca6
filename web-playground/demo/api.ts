// A thin GraphQL layer: fetch for queries and mutations, graphql-ws for subscriptions.
// No client cache: each page keeps the few objects it shows and patches them in place.
import { createClient, type Client } from 'graphql-ws';

export class GraphQLError extends Error {
  constructor(public errors: { message: string; extensions?: { code?: string } }[]) {
    super(errors.map((e) => e.message).join('; '));
  }
}

let token: string | null = null;
let socket: Client | null = null;
const liveListeners = new Set<(up: boolean) => void>();

export function setToken(next: string | null) {
  if (next === token) return;
  token = next;
  socket?.dispose();
  socket = null;
}

export async function gql<T = any>(query: string, variables: Record<string, unknown> = {}): Promise<T> {
  const res = await fetch('/graphql', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify({ query, variables }),
  });
  const body = await res.json();
  if (body.errors?.length) throw new GraphQLError(body.errors);
  return body.data as T;
}

export function onLive(listener: (up: boolean) => void) {
  liveListeners.add(listener);
}

function ws(): Client {
  if (!socket) {
    socket = createClient({
      url: `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/graphql/ws`,
      connectionParams: () => (token ? { authorization: `Bearer ${token}` } : {}),
      retryAttempts: Infinity,
      shouldRetry: () => true,
      on: {
        connected: () => liveListeners.forEach((l) => l(true)),
        closed: () => liveListeners.forEach((l) => l(false)),
      },
    });
  }
  return socket;
}

/** Subscribes; returns the function that stops it. */
export function subscribe<T = any>(
  query: string,
  variables: Record<string, unknown>,
  next: (data: T) => void,
): () => void {
  return ws().subscribe<T>(
    { query, variables },
    {
      next: (msg) => msg.data && next(msg.data as T),
      error: (err) => console.warn('subscription error', err),
      complete: () => {},
    },
  );
}
