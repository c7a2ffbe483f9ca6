// The demo forum: pick a demo user, see their courses, page through a course's posts (Relay
// first/after), read a post with its comments and replies, like/unlike with an optimistic
// update, watch counts live (likeCounts) and new comments arrive live (courseActivity).
// A course's posts come newest, hot or top first (orderBy), and a bell in the header counts
// unread notifications live (bell.ts).
// Plain TypeScript; routes live in the URL hash: #/, #/courses, #/course/<id>[/hot|/top], #/post/<id>.
import { gql, subscribe, setToken, onLive, GraphQLError } from './api';
import { counted, noun, esc } from './text';
import { bellFor } from './bell';

type DemoUser = { id: string; handle: string; token: string; courses: string[] };
type Author = { handle: string; displayName?: string };
type Reply = { id: string; body: string; author: Author; replyTo: Author; likeCount: number; likedByMe: boolean; comment?: { id: string } };
type Comment = { id: string; body: string; author: Author; likeCount: number; likedByMe: boolean; replies: { nodes: Reply[] } };
type Post = {
  id: string; title: string; body: string; likeCount: number; likedByMe: boolean; commentCount: number;
  author: Author; course: { id: string; code: string; title: string }; createdAt: string;
};

const PAGE_SIZE = 5;
const app = document.getElementById('app')!;
const whoami = document.getElementById('whoami')!;
const live = document.getElementById('live')!;
let stopPage: (() => void)[] = [];

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
        @${esc(u.handle)}</button> <span class="muted">${u.courses.length} courses</span>
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

async function courses() {
  const data = await gql(`query { me { handle displayName } myCourses { id code title myRole memberCount } }`);
  app.innerHTML = `<h1>Your courses</h1>
    ${data.myCourses.map((c: any) => `<div class="card"><a data-testid="course-${esc(c.code)}" href="#/course/${esc(c.id)}">
      ${esc(c.code)} · ${esc(c.title)}</a> <span class="muted">${esc(c.myRole.toLowerCase())}, ${counted(c.memberCount, 'member')}</span></div>`).join('')}`;
}

const POST_FIELDS = `id title likeCount likedByMe commentCount createdAt author { handle }`;

/** The orders of `Course.posts(orderBy:)`; the route's third part picks one (#/course/<id>/top). */
const ORDERS = ['NEW', 'HOT', 'TOP'] as const;
type PostOrder = (typeof ORDERS)[number];
const ORDER_LABELS: Record<PostOrder, [string, string]> = {
  NEW: ['New', 'newest first'],
  HOT: ['Hot', 'liked and discussed lately'],
  TOP: ['Top', 'most liked first'],
};
const orderOf = (part: string | undefined): PostOrder =>
  ORDERS.find((o) => o === part?.toUpperCase()) ?? 'NEW';

async function course(courseId: string, initialOrder: PostOrder) {
  const head = await gql(`query($id: ID!) { course(id: $id) { id code title } }`, { id: courseId });
  app.innerHTML = `<p><a href="#/courses">← courses</a></p>
    <h1>${esc(head.course.code)} · ${esc(head.course.title)}</h1>
    <p class="order" role="group" aria-label="Order of posts" data-testid="post-order">
      ${ORDERS.map((o) => `<button data-order="${o}" data-testid="order-${o}" title="${ORDER_LABELS[o][1]}"
        aria-pressed="false">${ORDER_LABELS[o][0]}</button>`).join(' ')}</p>
    <div id="posts" data-testid="posts"></div>
    <p><button id="more" data-testid="more-posts" hidden>More posts</button> <span id="page-info" class="muted"></span></p>`;
  const postsEl = app.querySelector('#posts')!;
  const more = app.querySelector<HTMLButtonElement>('#more')!;
  const info = app.querySelector('#page-info')!;
  // The list in one order: its cursor only means something in that order (the server refuses
  // a cursor of another), so switching starts over from the first page. `shown` moves with
  // every switch; a page that arrives for an older switch is dropped, so quick clicks cannot
  // mix two orders in one list.
  let order = initialOrder;
  let after: string | null = null;
  let pages = 0;
  let shown = 0;
  const loadPage = async () => {
    const mine = shown;
    more.disabled = true;
    try {
      const data = await gql(
        `query($id: ID!, $first: Int!, $after: String, $order: PostOrder!) { course(id: $id) {
           posts(first: $first, after: $after, orderBy: $order) { pageInfo { hasNextPage endCursor } edges { cursor node { ${POST_FIELDS} } } } } }`,
        { id: courseId, first: PAGE_SIZE, after, order },
      );
      if (mine !== shown) return;
      const conn = data.course.posts;
      pages += 1;
      postsEl.setAttribute('data-pages', String(pages));
      postsEl.insertAdjacentHTML('beforeend', conn.edges.map((e: any) => `<div class="card" data-testid="post-item" data-id="${esc(e.node.id)}">
        <a href="#/post/${esc(e.node.id)}">${esc(e.node.title)}</a>
        <div class="muted">@${esc(e.node.author.handle)} · ${counted(e.node.likeCount, 'like')} · ${counted(e.node.commentCount, 'comment')}</div></div>`).join(''));
      after = conn.pageInfo.endCursor;
      more.hidden = !conn.pageInfo.hasNextPage;
      info.textContent = `${counted(postsEl.children.length, 'post')}, ${counted(pages, 'page')}, ${ORDER_LABELS[order][1]}`;
    } catch (err) {
      if (mine === shown) info.innerHTML = `<span class="error" data-testid="posts-error">${esc((err as Error).message)}</span>`;
    } finally {
      if (mine === shown) more.disabled = false;
    }
  };
  const show = (next: PostOrder) => {
    order = next;
    shown += 1;
    after = null;
    pages = 0;
    postsEl.innerHTML = '';
    more.hidden = true;
    app.querySelectorAll<HTMLButtonElement>('[data-order]').forEach((b) => b.setAttribute('aria-pressed', String(b.dataset.order === order)));
    postsEl.setAttribute('data-order', order);
    postsEl.setAttribute('data-pages', '0');
    return loadPage();
  };
  app.querySelector('[data-testid=post-order]')!.addEventListener('click', (e) => {
    const b = (e.target as HTMLElement).closest<HTMLButtonElement>('[data-order]');
    if (!b || b.dataset.order === order) return;
    // Kept in the URL for a reload or a link, without a hashchange (which would rebuild the page).
    history.replaceState(null, '', `#/course/${encodeURIComponent(courseId)}${b.dataset.order === 'NEW' ? '' : `/${b.dataset.order!.toLowerCase()}`}`);
    void show(b.dataset.order as PostOrder);
  });
  more.addEventListener('click', loadPage);
  await show(order);
}

const REPLY_FIELDS = `id body likeCount likedByMe author { handle } replyTo { handle }`;
const COMMENT_FIELDS = `id body likeCount likedByMe author { handle } replies(first: 20) { nodes { ${REPLY_FIELDS} } }`;

async function post(postId: string) {
  const data = await gql(
    `query($id: ID!) { post(id: $id) { id title body likeCount likedByMe commentCount createdAt
       author { handle displayName } course { id code title }
       comments(first: 50) { pageInfo { hasNextPage } nodes { ${COMMENT_FIELDS} } } } }`,
    { id: postId },
  );
  const p: Post & { comments: { nodes: Comment[] } } = data.post;
  app.innerHTML = `<p><a href="#/course/${esc(p.course.id)}">← ${esc(p.course.code)}</a></p>
    <article class="card" data-testid="post">
      <h1 data-testid="post-title">${esc(p.title)}</h1>
      <div class="muted">@${esc(p.author.handle)} · ${new Date(p.createdAt).toLocaleString()}</div>
      <p>${esc(p.body)}</p>
      <button class="like" data-testid="like" aria-pressed="false"></button>
      <span data-testid="like-count"></span> <span data-testid="like-noun"></span> · <span data-testid="comment-count">${p.commentCount}</span> <span data-testid="comment-noun">${noun(p.commentCount, 'comment')}</span>
    </article>
    <h2>Comments</h2>
    <div id="comments" data-testid="comments"></div>
    <form id="comment-form" class="card"><textarea name="body" data-testid="comment-body" placeholder="Write a comment"></textarea>
      <button data-testid="comment-submit">Comment</button> <span class="error" id="comment-error"></span></form>`;

  // Likes: the button and count show local state at once (optimistic); the mutation's answer
  // and committed counts from likeCounts then correct it. While our own mutation is in
  // flight, pushed counts for this post are ignored so they cannot undo the click.
  let liked = p.likedByMe;
  let count = p.likeCount;
  let inFlight = 0;
  const likeBtn = app.querySelector<HTMLButtonElement>('[data-testid=like]')!;
  const countEl = app.querySelector<HTMLElement>('[data-testid=like-count]')!;
  const likeNounEl = app.querySelector<HTMLElement>('[data-testid=like-noun]')!;
  const paint = () => {
    likeBtn.textContent = liked ? '♥ Unlike' : '♡ Like';
    likeBtn.setAttribute('aria-pressed', String(liked));
    countEl.textContent = String(count);
    likeNounEl.textContent = noun(count, 'like');
  };
  paint();
  likeBtn.addEventListener('click', async () => {
    const before = { liked, count };
    liked = !liked;
    count += liked ? 1 : -1;
    inFlight += 1;
    paint();
    try {
      const field = liked ? 'likePost' : 'unlikePost';
      const res = await gql(`mutation($id: ID!) { r: ${field}(postId: $id) { id likeCount likedByMe } }`, { id: p.id });
      if (inFlight === 1) {
        liked = res.r.likedByMe;
        count = res.r.likeCount;
      }
    } catch (err) {
      ({ liked, count } = before);
      alert(`Like failed: ${(err as Error).message}`);
    } finally {
      inFlight -= 1;
      paint();
    }
  });

  const commentsEl = app.querySelector('#comments')!;
  const shown = new Set<string>();
  const commentCountEl = app.querySelector('[data-testid=comment-count]')!;
  const commentNounEl = app.querySelector('[data-testid=comment-noun]')!;
  // The post's commentCount counts comments and replies together.
  const bumpComments = (by: number) => {
    const comments = Math.max(0, Number(commentCountEl.textContent) + by);
    commentCountEl.textContent = String(comments);
    commentNounEl.textContent = noun(comments, 'comment');
  };
  // A comment's or reply's like button: optimistic, corrected by the mutation's answer and by
  // committed counts from likeCounts (which patch every [data-like-of] element).
  const likeButton = (id: string, liked: boolean, count: number) =>
    `<button class="like small" data-testid="like-comment" data-target="${esc(id)}" aria-pressed="${liked}">${liked ? '♥' : '♡'}</button>
     <span data-like-of="${esc(id)}">${count}</span>`;
  const replyHtml = (r: Reply) => `<div data-testid="reply" data-id="${esc(r.id)}">
    <span class="muted">@${esc(r.author.handle)} → @${esc(r.replyTo.handle)} · ${likeButton(r.id, r.likedByMe, r.likeCount)}</span>
    <p data-testid="reply-text">${esc(r.body)}</p></div>`;
  const addComment = (c: Comment, bump = false) => {
    if (shown.has(c.id)) return;
    shown.add(c.id);
    (c.replies?.nodes ?? []).forEach((r) => shown.add(r.id));
    commentsEl.insertAdjacentHTML('beforeend', `<div class="card" data-testid="comment" data-id="${esc(c.id)}">
      <div class="muted">@${esc(c.author.handle)} · ${likeButton(c.id, c.likedByMe, c.likeCount)}</div>
      <p data-testid="comment-text">${esc(c.body)}</p>
      <div class="replies">${(c.replies?.nodes ?? []).map(replyHtml).join('')}</div></div>`);
    if (bump) bumpComments(1);
  };
  const addReply = (r: Reply, commentId: string) => {
    if (shown.has(r.id)) return;
    const parent = commentsEl.querySelector(`[data-testid=comment][data-id="${CSS.escape(commentId)}"] .replies`);
    if (!parent) return; // under a comment this page does not show
    shown.add(r.id);
    parent.insertAdjacentHTML('beforeend', replyHtml(r));
    bumpComments(1);
  };
  const removeNode = (id: string) => {
    const el = commentsEl.querySelector(`[data-id="${CSS.escape(id)}"]`);
    if (!el) return;
    // A deleted comment takes its replies with it.
    const gone = [el, ...el.querySelectorAll('[data-testid=reply]')];
    gone.forEach((node) => shown.delete((node as HTMLElement).dataset.id ?? ''));
    el.remove();
    bumpComments(-gone.length);
  };
  commentsEl.addEventListener('click', async (e) => {
    const btn = (e.target as HTMLElement).closest<HTMLButtonElement>('[data-testid=like-comment]');
    if (!btn) return;
    const id = btn.dataset.target!;
    const countOf = commentsEl.querySelector<HTMLElement>(`[data-like-of="${CSS.escape(id)}"]`)!;
    const before = { liked: btn.getAttribute('aria-pressed') === 'true', count: Number(countOf.textContent) };
    const show = (liked: boolean, count: number) => {
      btn.setAttribute('aria-pressed', String(liked));
      btn.textContent = liked ? '♥' : '♡';
      countOf.textContent = String(count);
    };
    show(!before.liked, before.count + (before.liked ? -1 : 1));
    try {
      const field = before.liked ? 'unlikeComment' : 'likeComment';
      const res = await gql(`mutation($id: ID!) { r: ${field}(commentId: $id) { likeCount likedByMe } }`, { id });
      show(res.r.likedByMe, res.r.likeCount);
    } catch (err) {
      show(before.liked, before.count);
      alert(`Like failed: ${(err as Error).message}`);
    }
  });
  p.comments.nodes.forEach((c) => addComment(c));

  app.querySelector<HTMLFormElement>('#comment-form')!.addEventListener('submit', async (e) => {
    e.preventDefault();
    const form = e.target as HTMLFormElement;
    const body = String(new FormData(form).get('body') ?? '').trim();
    if (!body) return;
    const errEl = app.querySelector('#comment-error')!;
    errEl.textContent = '';
    try {
      const res = await gql(`mutation($id: ID!, $body: String!) { createComment(postId: $id, body: $body) { ${COMMENT_FIELDS} } }`, {
        id: p.id,
        body,
      });
      addComment(res.createComment, true);
      form.reset();
    } catch (err) {
      errEl.textContent = err instanceof GraphQLError ? err.message : String(err);
    }
  });

  // Live: committed like counts of the post and everything shown; new comments in the course.
  const ids = [p.id, ...p.comments.nodes.flatMap((c) => [c.id, ...(c.replies?.nodes ?? []).map((r) => r.id)])].slice(0, 100);
  stopPage.push(
    subscribe(`subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }`, { ids }, (d: any) => {
      const u = d.likeCounts;
      if (u.id === p.id) {
        if (inFlight === 0) {
          count = u.likeCount;
          paint();
        }
      } else {
        app.querySelectorAll(`[data-like-of="${CSS.escape(u.id)}"]`).forEach((el) => (el.textContent = String(u.likeCount)));
      }
    }),
    subscribe(
      `subscription($course: ID!) { courseActivity(courseId: $course) { kind nodeId postId
         comment { ${COMMENT_FIELDS} } reply { ${REPLY_FIELDS} comment { id } } } }`,
      { course: p.course.id },
      (d: any) => {
        const a = d.courseActivity;
        if (a.postId !== p.id) return;
        if (a.kind === 'COMMENT_CREATED' && a.comment) addComment(a.comment, true);
        if (a.kind === 'REPLY_CREATED' && a.reply?.comment) addReply(a.reply, a.reply.comment.id);
        if (a.kind === 'COMMENT_DELETED' || a.kind === 'REPLY_DELETED') removeNode(a.nodeId);
        if (a.kind === 'POST_DELETED') {
          app.querySelector('[data-testid=post]')!.insertAdjacentHTML(
            'afterbegin',
            '<p class="error" data-testid="post-deleted">This post was deleted.</p>',
          );
        }
      },
    ),
  );
}

// --- routing ---------------------------------------------------------------------------------

async function route() {
  stopPage.forEach((stop) => stop());
  stopPage = [];
  const me = currentUser();
  if (me) setToken(me.token);
  whoami.textContent = me ? `signed in as @${me.handle}` : '';
  bellFor(me?.token ?? null);
  const [, page, id, extra] = location.hash.replace(/^#/, '').split('/');
  try {
    if (!me || !page) return await pickUser();
    if (page === 'courses') return await courses();
    if (page === 'course' && id) return await course(decodeURIComponent(id), orderOf(extra));
    if (page === 'post' && id) return await post(decodeURIComponent(id));
    return await pickUser();
  } catch (err) {
    app.innerHTML = `<p class="error" data-testid="error">${esc((err as Error).message)}</p><p><a href="#/">Pick a user</a></p>`;
  }
}

window.addEventListener('hashchange', route);
route();
