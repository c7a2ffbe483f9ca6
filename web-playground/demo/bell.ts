// The notification bell in the header: the signed-in user's unread count, live, and a panel
// with their latest notifications and "mark all read". It outlives pages (route() only tells
// it who is signed in through bellFor), so its subscription is its own, not one of a page's.
//
// The count has two sources: HTTP answers (the first load, a reload of the list, the
// mark-read mutation) and `notifications` events, which always carry the current count. An
// answer can be older than an event that arrived while it was in flight (a reply that landed
// just after the server read the count), so an answer's count is used only if no event came
// meanwhile: the events alone then keep the count right.
import { gql, subscribe, onLive } from './api';
import { counted, esc, byline } from './text';

type Notification = {
  id: string;
  kind: 'REPLY' | 'MENTION' | 'LIKE_MILESTONE';
  milestone: number | null;
  read: boolean;
  createdAt: string;
  actor: { handle: string; displayName: string } | null;
  /** The pseudonym of an actor who wrote anonymously (actor is then null unless you may see them). */
  actorPseudonym: string | null;
  post: { id: string; title: string };
  comment: { __typename: 'Comment' | 'Reply'; id: string } | null;
};

const FIELDS = `id kind milestone read createdAt actor { handle displayName } actorPseudonym post { id title } comment { __typename id }`;
/** How many of the newest notifications the panel shows. */
const LIST_SIZE = 10;

const bell = document.getElementById('bell') as HTMLButtonElement;
const countEl = document.getElementById('unread-count')!;
const panel = document.getElementById('notifications')!;
const listEl = document.getElementById('notification-list')!;
const errorEl = document.getElementById('notifications-error')!;
const markAllBtn = document.getElementById('mark-all-read') as HTMLButtonElement;

let token: string | null = null;
let stopLive: (() => void) | null = null;
/** The newest notifications, newest first; null until the first list arrives. */
let items: Notification[] | null = null;
let unread = 0;
/** Moves with every notification event: an HTTP answer is stale on count if it moved meanwhile. */
let events = 0;
/** Moves with every list load and sign-in: only the latest load's answer is shown. */
let loads = 0;
let wasDown = false;

/** Points the bell at the signed-in user (null: nobody), once per token. */
export function bellFor(next: string | null) {
  if (next === token) return;
  token = next;
  stopLive?.();
  stopLive = null;
  items = null;
  unread = 0;
  loads += 1; // answers still in flight were for the previous user
  close();
  bell.hidden = !next;
  paint();
  if (!next) return;
  stopLive = subscribe(`subscription { notifications { unreadCount notification { ${FIELDS} } } }`, {}, (d: any) =>
    onUpdate(d.notifications),
  );
  void load();
}

function onUpdate(u: { unreadCount: number; notification: Notification | null } | null) {
  if (!u) return;
  events += 1;
  unread = u.unreadCount;
  if (u.notification) {
    const n = u.notification;
    if (items && !items.some((x) => x.id === n.id)) items = [n, ...items].slice(0, LIST_SIZE);
  } else if (!panel.hidden) {
    // Some were withdrawn (their cause deleted) or read in another tab: which ones, only a
    // fresh list can say. A closed panel reloads when it opens.
    void load();
  }
  paint();
}

/** Loads the newest notifications and the count. An event during the request may mean the
 * list missed it, so the request is repeated (twice at most, then the events carry on). */
async function load() {
  const mine = ++loads;
  try {
    for (let attempt = 0; ; attempt++) {
      const seen = events;
      const data = await gql(
        `query($first: Int) { notifications(first: $first) { unreadCount nodes { ${FIELDS} } } }`,
        { first: LIST_SIZE },
      );
      if (mine !== loads) return;
      const conn = data.notifications;
      if (seen === events || attempt === 2) {
        items = conn?.nodes ?? [];
        if (seen === events) unread = conn?.unreadCount ?? 0;
        errorEl.textContent = '';
        break;
      }
    }
  } catch (err) {
    if (mine === loads) errorEl.textContent = (err as Error).message;
  }
  paint();
}

async function markAllRead() {
  const shown = items ?? [];
  if (shown.length === 0) return;
  const forToken = token;
  const seen = events;
  loads += 1; // a list still loading was read before this mutation: its read flags are old
  markAllBtn.disabled = true;
  try {
    // The newest one listed: the server marks it and everything older read. Notifications
    // that arrive meanwhile are newer, so they stay unread here as on the server.
    const res = await gql(`mutation($upTo: ID!) { markNotificationsRead(upTo: $upTo) { unreadCount } }`, {
      upTo: shown[0].id,
    });
    if (forToken !== token) return;
    const marked = new Set(shown.map((n) => n.id));
    items = (items ?? []).map((n) => (marked.has(n.id) ? { ...n, read: true } : n));
    if (seen === events && res.markNotificationsRead) unread = res.markNotificationsRead.unreadCount;
    errorEl.textContent = '';
  } catch (err) {
    errorEl.textContent = (err as Error).message;
  }
  paint();
}

const KIND_LABELS: Record<Notification['kind'], string> = { REPLY: 'reply', MENTION: 'mention', LIKE_MILESTONE: 'likes' };

/** What happened, in words: "@bob commented on <post>", "Your reply on <post> reached 10 likes". */
function sentence(n: Notification) {
  const post = `<a data-testid="notification-post" href="#/post/${esc(n.post.id)}">${esc(n.post.title)}</a>`;
  const actor = `<strong data-testid="notification-actor">${byline(n.actor, n.actorPseudonym)}</strong>`;
  const commentNoun = n.comment?.__typename === 'Reply' ? 'reply' : 'comment';
  switch (n.kind) {
    case 'MENTION':
      return `${actor} mentioned you in ${n.comment ? `a ${commentNoun} on ` : ''}${post}`;
    case 'REPLY':
      return `${actor} ${n.comment?.__typename === 'Reply' ? 'replied to you on' : 'commented on'} ${post}`;
    case 'LIKE_MILESTONE': {
      // No actor: many people did it. A deleted comment's milestone keeps its post.
      const what = n.comment ? `Your ${commentNoun} on ${post}` : `Your post ${post}`;
      return `${what} reached <strong>${counted(n.milestone ?? 0, 'like')}</strong>`;
    }
    default:
      return `${actor} · ${post}`; // a kind newer than this page
  }
}

const itemHtml = (n: Notification) => `<li data-testid="notification" data-id="${esc(n.id)}" data-kind="${esc(n.kind)}"
    data-read="${n.read}" class="${n.read ? '' : 'unread'}">
    <span class="kind">${KIND_LABELS[n.kind] ?? esc(n.kind.toLowerCase())}</span> ${sentence(n)}
    <div class="muted">${new Date(n.createdAt).toLocaleString()} · ${n.read ? 'read' : '<strong>unread</strong>'}</div></li>`;

function paint() {
  countEl.textContent = String(unread);
  bell.classList.toggle('has-unread', unread > 0);
  bell.title = counted(unread, 'unread notification');
  markAllBtn.disabled = unread === 0 || !items?.length;
  if (panel.hidden) return;
  listEl.innerHTML =
    items === null
      ? '<li class="muted">Loading…</li>'
      : items.length === 0
        ? '<li class="muted" data-testid="no-notifications">No notifications yet.</li>'
        : items.map(itemHtml).join('');
}

function open() {
  panel.hidden = false;
  bell.setAttribute('aria-expanded', 'true');
  paint();
  void load(); // the list may have changed while the panel was closed
}

function close() {
  panel.hidden = true;
  bell.setAttribute('aria-expanded', 'false');
}

bell.addEventListener('click', () => (panel.hidden ? open() : close()));
markAllBtn.addEventListener('click', markAllRead);
// Following a notification's link changes the page: the panel closes with it.
window.addEventListener('hashchange', close);
document.addEventListener('keydown', (e) => e.key === 'Escape' && close());
// graphql-ws subscribes again after a reconnect, but what happened while the socket was down
// never arrives: read the count (and the list) afresh.
onLive((state) => {
  if (state === 'up' && wasDown && token) void load();
  wasDown = state !== 'up';
});
