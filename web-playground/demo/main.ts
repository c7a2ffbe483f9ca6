// The demo forum: pick a demo user, see their courses, then a course's posts (course.ts) and
// a post with its comments and replies (post.ts); a bell in the header counts unread
// notifications live (bell.ts). The course list shows each course's unread count, live, and a
// search across all the user's courses (search.ts).
// Plain TypeScript; routes live in the URL hash: #/, #/courses[?q=...],
// #/course/<id>[/hot|/top][?unresolved&unread&tag=<id>&q=...], #/post/<id>.
import { gql, setToken, onLive, subscribe } from './api';
import { counted, esc } from './text';
import { bellFor } from './bell';
import { app, leave, onLeave } from './page';
import { course, orderOf, unreadText } from './course';
import { post } from './post';
import { searchBox } from './search';

type DemoUser = { id: string; handle: string; token: string; courses: string[] };
const whoami = document.getElementById('whoami')!;
const live = document.getElementById('live')!;

onLive((state) => {
  live.textContent = { up: '● live', down: '○ offline', refused: '✕ signed out: token refused or expired' }[state];
  live.dataset.state = state;
});

// --- who is signed in ------------------------------------------------------------------------

let users: DemoUser[] | null = null;
async function demoUsers(): Promise<DemoUser[]> {
  if (users) return users;
  const res = await fetch('/demo/users.json', { cache: 'no-store' });
  users = res.ok ? (await res.json()).users ?? [] : [];
  return users!;
}

function currentUser(): { handle: string; token: string } | null {
  const raw = sessionStorage.getItem('cf-demo-user');
  return raw ? JSON.parse(raw) : null;
}

function signIn(handle: string, token: string) {
  sessionStorage.setItem('cf-demo-user', JSON.stringify({ handle, token }));
  setToken(token);
}

// --- pages -----------------------------------------------------------------------------------

async function pickUser() {
  const list = await demoUsers();
  const me = currentUser();
  app.innerHTML = `
    <h1>Pick a demo user</h1>
    ${list.length === 0 ? `<p class="muted">No demo users: the server is not in demo mode (start it with
      <code>script/server</code>). Paste a token instead:</p>` : ''}
    <div data-testid="users">
      ${list.map((u) => `<div class="card"><button data-testid="user-${esc(u.handle)}" data-handle="${esc(u.handle)}">
        @${esc(u.handle)}</button> <span class="muted">${counted(u.courses.length, 'course')}</span>
        ${me?.handle === u.handle ? '<strong>(signed in)</strong>' : ''}</div>`).join('')}
    </div>
    <form id="token-form" class="card"><label>Bearer token <input name="token" size="50"></label>
      <button>Use token</button></form>`;
  app.querySelectorAll<HTMLButtonElement>('button[data-handle]').forEach((b) =>
    b.addEventListener('click', () => {
      const u = list.find((x) => x.handle === b.dataset.handle)!;
      signIn(u.handle, u.token);
      location.hash = '#/courses';
    }),
  );
  app.querySelector<HTMLFormElement>('#token-form')!.addEventListener('submit', (e) => {
    e.preventDefault();
    const token = String(new FormData(e.target as HTMLFormElement).get('token') ?? '').trim();
    if (token) {
      signIn('?', token);
      location.hash = '#/courses';
    }
  });
}

async function courses(params: URLSearchParams) {
  const data = await gql(`query { me { handle displayName } myCourses { id code title myRole memberCount unreadPostCount } }`);
  const list: { id: string; code: string; title: string; myRole: string; memberCount: number; unreadPostCount: number }[] = data.myCourses ?? [];
  app.innerHTML = `<h1>Your courses</h1>
    ${list.map((c) => `<div class="card"><a data-testid="course-${esc(c.code)}" href="#/course/${esc(c.id)}">
      ${esc(c.code)} · ${esc(c.title)}</a> <span class="unread-count" data-testid="unread-${esc(c.code)}" data-course="${esc(c.id)}"
      data-count="${c.unreadPostCount}">${unreadText(c.unreadPostCount)}</span>
      <span class="muted">${esc(c.myRole.toLowerCase())}, ${counted(c.memberCount, 'member')}</span></div>`).join('')}
    <h2>Search</h2><div id="search" data-testid="home-search"></div>`;
  const setCount = (id: string, n: number) => {
    const el = app.querySelector<HTMLElement>(`.unread-count[data-course="${CSS.escape(id)}"]`);
    if (!el) return;
    el.dataset.count = String(n);
    el.textContent = unreadText(n);
  };
  // Each course's count, live: one unreadCounts subscription per course (a handful).
  for (const c of list) {
    onLeave(
      subscribe(`subscription($course: ID!) { unreadCounts(courseId: $course) { course { id unreadPostCount } } }`, { course: c.id }, (d: any) => {
        const u = d.unreadCounts?.course;
        if (u) setCount(u.id, u.unreadPostCount);
      }),
    );
  }
  // Events missed while the socket was down never arrive: after a reconnect, read the counts afresh.
  let wasDown = false;
  onLeave(
    onLive((state) => {
      if (state === 'up' && wasDown) {
        gql(`query { myCourses { id unreadPostCount } }`).then(
          (d) => (d.myCourses ?? []).forEach((c: { id: string; unreadPostCount: number }) => setCount(c.id, c.unreadPostCount)),
          () => {},
        );
      }
      wasDown = state !== 'up';
    }),
  );
  // Search across every course; the query stays in the URL (#/courses?q=...).
  const search = searchBox(app.querySelector<HTMLElement>('#search')!, {
    onQuery: (q) => history.replaceState(null, '', `#/courses${q ? `?q=${encodeURIComponent(q)}` : ''}`),
  });
  if (params.get('q')) void search.run(params.get('q')!);
}

// --- routing ---------------------------------------------------------------------------------

async function route() {
  leave();
  const me = currentUser();
  if (me) setToken(me.token);
  whoami.textContent = me ? `signed in as @${me.handle}` : '';
  bellFor(me?.token ?? null);
  // A course's filter rides after a "?": #/course/<id>/top?unresolved&tag=<id>.
  const [path, query = ''] = location.hash.replace(/^#/, '').split('?');
  const [, page, id, extra] = path.split('/');
  try {
    if (!me || !page) return await pickUser();
    if (page === 'courses') return await courses(new URLSearchParams(query));
    if (page === 'course' && id) return await course(decodeURIComponent(id), orderOf(extra), new URLSearchParams(query));
    if (page === 'post' && id) return await post(decodeURIComponent(id));
    return await pickUser();
  } catch (err) {
    app.innerHTML = `<p class="error" data-testid="error">${esc((err as Error).message)}</p><p><a href="#/">Pick a user</a></p>`;
  }
}

window.addEventListener('hashchange', route);
route();
