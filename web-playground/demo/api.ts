// A thin GraphQL layer: fetch for queries and mutations, graphql-ws for subscriptions.
// No client cache: each page keeps the few objects it shows and patches them in place.
import { createClient, type Client } from 'graphql-ws';

export class GraphQLError extends Error {
  constructor(public errors: { message: string; extensions?: { code?: string; retryAfterMs?: number } }[]) {
    super(errors.map((e) => e.message).join('; '));
  }
  /** The first error's `extensions.code` (FORBIDDEN, NOT_FOUND, ...), if the server gave one. */
  get code(): string | undefined {
    return this.errors[0]?.extensions?.code;
  }
}

/** What the server's error codes mean to the person who clicked. */
const CODE_TEXT: Record<string, string> = {
  FORBIDDEN: 'Not allowed',
  NOT_FOUND: 'Not found (deleted meanwhile?)',
  BAD_USER_INPUT: 'Not accepted',
  UNAUTHENTICATED: 'Signed out',
  RATE_LIMITED: 'Too many writes',
};

/** An error as a line to show: "Not allowed (FORBIDDEN): <server message>", and for
 * RATE_LIMITED when to try again. */
export function errorText(err: unknown): string {
  if (!(err instanceof GraphQLError)) return err instanceof Error ? err.message : String(err);
  const code = err.code;
  const wait = err.errors[0]?.extensions?.retryAfterMs;
  const retry = code === 'RATE_LIMITED' && wait ? ` Try again in ${Math.ceil(wait / 1000)} s.` : '';
  return `${code ? `${CODE_TEXT[code] ?? code} (${code}): ` : ''}${err.message}${retry}`;
}

let token: string | null = null;
let socket: Client | null = null;
/** The websocket's state: connected, reconnecting, or refused for good (a bad or expired token). */
export type LiveState = 'up' | 'down' | 'refused';
const liveListeners = new Set<(state: LiveState) => void>();
/** The server's close code for a refused or expired token: retrying with it cannot succeed. */
const TOKEN_REFUSED = 4403;
const closeCode = (event: unknown) =>
  typeof event === 'object' && event !== null && 'code' in event ? (event as { code: number }).code : undefined;

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

/** Calls `listener` on every change of the socket's state; returns the function that stops it. */
export function onLive(listener: (state: LiveState) => void): () => void {
  liveListeners.add(listener);
  return () => liveListeners.delete(listener);
}

function ws(): Client {
  if (!socket) {
    socket = createClient({
      url: `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/graphql/ws`,
      connectionParams: () => (token ? { authorization: `Bearer ${token}` } : {}),
      retryAttempts: Infinity,
      // Network trouble and restarts are retried forever; a refused token never is: the
      // same token would be refused again, so the page says so and waits for a new sign-in.
      shouldRetry: (event) => closeCode(event) !== TOKEN_REFUSED,
      on: {
        connected: () => liveListeners.forEach((l) => l('up')),
        closed: (event) => {
          const state = closeCode(event) === TOKEN_REFUSED ? 'refused' : 'down';
          liveListeners.forEach((l) => l(state));
        },
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
