// A course's page: its posts page by page (Relay first/after), newest, hot or top first
// (orderBy; the order stays in the URL, #/course/<id>/top), and a form to start a post: a
// discussion, a question (private if asked) or, for instructors, an announcement, with up to
// three of the course's tags, and anonymous where the course allows it. New posts (anyone's)
// arrive at the top live, deleted ones leave, and counts follow (courseActivity for comments,
// likeCounts for likes). Unread posts carry a dot and their new comments a count, the header
// the course's unread count, all live (unreadCounts); "Mark all read" reads the course. A
// search box searches the course (search.ts); the new-post form lists posts with a similar
// title as one is typed (similar.ts).
import { gql, subscribe, errorText, onLive } from './api';
import { counted, esc, byline, badges } from './text';
import { app, onLeave } from './page';
import { searchBox } from './search';
import { similarPosts } from './similar';

const PAGE_SIZE = 5;
/** The filter bar's boxes: each sets one field of `posts(filter:)` to true. */
const FILTERS = [['unresolved', 'Unresolved'], ['unanswered', 'Unanswered'], ['mine', 'Mine'], ['private', 'Private'], ['unread', 'Unread']] as const;
type Filter = { unresolved?: boolean; unanswered?: boolean; mine?: boolean; private?: boolean; unread?: boolean; tagId?: string };
const POST_FIELDS = `id title likeCount likedByMe commentCount createdAt author { id handle } anonymous pseudonym
  kind private pinned resolved answered endorsement { by { handle } } tags { id name } isUnread unreadCommentCount`;
/** How many listed posts a reconnect reads the unread state of afresh. */
const MAX_REREAD = 25;
/** How many tags a post may carry. */
const MAX_TAGS = 3;
/** How many ids one likeCounts subscription may watch. */
const MAX_WATCHED = 100;

/** The orders of `Course.posts(orderBy:)`; the route's third part picks one (#/course/<id>/top). */
const ORDERS = ['NEW', 'HOT', 'TOP'] as const;
export type PostOrder = (typeof ORDERS)[number];
const ORDER_LABELS: Record<PostOrder, [string, string]> = {
  NEW: ['New', 'newest first'],
  HOT: ['Hot', 'liked and discussed lately'],
  TOP: ['Top', 'most liked first'],
};
export const orderOf = (part: string | undefined): PostOrder =>
  ORDERS.find((o) => o === part?.toUpperCase()) ?? 'NEW';

type PostItem = {
  id: string; title: string; likeCount: number; commentCount: number; author: { handle: string } | null;
  pseudonym: string | null; kind: string; private: boolean; pinned: boolean; resolved: boolean; answered: boolean;
  endorsement: { by: { handle: string } } | null; tags: { id: string; name: string }[];
  isUnread: boolean; unreadCommentCount: number;
};
/** A post's unread state for the viewer, as the list shows it. */
type Unread = { id: string; isUnread: boolean; unreadCommentCount: number };
type Tag = { id: string; name: string };

/** What anonymous writing means in a course, for the checkbox's label; null where it is off. */
const ANONYMITY_TEXT: Record<string, string | null> = {
  OFF: null,
  CLASSMATES: 'other students see a pseudonym; instructors see your name',
  EVERYONE: 'everyone sees a pseudonym, instructors too',
};

/** One post in the list; its counts are patched in place (data-likes, data-comments), and so
 * is its unread state (data-unread, the dot, "N new comments"). */
const itemHtml = (p: PostItem, fresh = false) => `<div class="card${fresh ? ' fresh' : ''}" data-testid="post-item" data-id="${esc(p.id)}" data-unread="${p.isUnread}">
  <span class="unread-dot" data-testid="unread-dot" title="unread" role="img" aria-label="unread"${p.isUnread ? '' : ' hidden'}></span>
  <a href="#/post/${esc(p.id)}">${esc(p.title)}</a>${fresh ? ' <span class="kind" data-testid="new-badge">new</span>' : ''} ${badges(p)}
  <div class="muted">${byline(p.author, p.pseudonym)} · <span data-likes="${p.likeCount}">${counted(p.likeCount, 'like')}</span>
    · <span data-comments="${p.commentCount}">${counted(p.commentCount, 'comment')}</span>
    <span class="new-comments" data-testid="new-comments" data-count="${p.unreadCommentCount}"${p.unreadCommentCount > 0 ? '' : ' hidden'}>· ${counted(p.unreadCommentCount, 'new comment')}</span></div></div>`;

/** The course's unread count, for the header (and the course list). */
export const unreadText = (n: number) => (n > 0 ? counted(n, 'unread post') : 'all read');

export async function course(courseId: string, initialOrder: PostOrder, params = new URLSearchParams()) {
  const head = await gql(`query($id: ID!) { course(id: $id) { id code title myRole anonymity tags { id name } unreadPostCount } }`, { id: courseId });
  const staff = head.course.myRole === 'INSTRUCTOR';
  const tags: Tag[] = head.course.tags ?? [];
  const anonymity = ANONYMITY_TEXT[head.course.anonymity] ?? null;
  app.innerHTML = `<p><a href="#/courses">← courses</a></p>
    <h1>${esc(head.course.code)} · ${esc(head.course.title)}</h1>
    <p class="unread-bar"><span class="unread-count" data-testid="course-unread" data-count="${head.course.unreadPostCount}">${unreadText(head.course.unreadPostCount)}</span>
      <button type="button" data-testid="mark-course-read"${head.course.unreadPostCount > 0 ? '' : ' disabled'}>Mark all read</button>
      <span class="error" data-testid="mark-course-read-error"></span></p>
    <div id="search" data-testid="course-search"></div>
    <details class="card" id="new-post" data-testid="new-post"><summary data-testid="new-post-open">Start a post</summary>
      <form id="post-form">
        <label>Kind <select name="kind" data-testid="post-form-kind">
          <option value="DISCUSSION">Discussion</option><option value="QUESTION">Question</option>
          ${staff ? '<option value="ANNOUNCEMENT">Announcement (notifies every member)</option>' : ''}</select></label>
        <label>Title <input name="title" data-testid="post-form-title" maxlength="200" required autocomplete="off"></label>
        <div class="similar" data-testid="similar-posts" aria-live="polite" hidden></div>
        <textarea name="body" data-testid="post-form-body" placeholder="What do you want to say or ask?" required></textarea>
        ${tags.length ? `<fieldset class="tag-picker" data-testid="post-form-tags"><legend>Tags (up to ${MAX_TAGS})</legend>
          ${tags.map((t) => `<label class="chip"><input type="checkbox" name="tag" value="${esc(t.id)}" data-testid="post-form-tag"> ${esc(t.name)}</label>`).join(' ')}</fieldset>` : ''}
        <label hidden data-testid="post-form-private-label"><input type="checkbox" name="private" data-testid="post-form-private">
          Private: only you and the instructors can read it</label>
        ${anonymity ? `<label><input type="checkbox" name="anonymous" data-testid="post-form-anonymous"> Anonymous: ${anonymity}</label>` : ''}
        <button data-testid="post-form-submit">Post</button> <span class="error" data-testid="post-form-error"></span>
      </form></details>
    <p class="order" role="group" aria-label="Order of posts" data-testid="post-order">
      ${ORDERS.map((o) => `<button data-order="${o}" data-testid="order-${o}" title="${ORDER_LABELS[o][1]}"
        aria-pressed="false">${ORDER_LABELS[o][0]}</button>`).join(' ')}</p>
    <form class="filters" data-testid="post-filter" aria-label="Filter posts">
      ${FILTERS.map(([key, label]) => `<label><input type="checkbox" name="${key}" data-testid="filter-${key}"> ${label}</label>`).join(' ')}
      ${tags.length ? `<label>Tag <select name="tagId" data-testid="filter-tag"><option value="">any</option>
        ${tags.map((t) => `<option value="${esc(t.id)}">${esc(t.name)}</option>`).join('')}</select></label>` : ''}</form>
    <div id="posts" data-testid="posts"></div>
    <p><button id="more" data-testid="more-posts" hidden>More posts</button> <span id="page-info" class="muted"></span></p>`;
  const postsEl = app.querySelector<HTMLElement>('#posts')!;
  const more = app.querySelector<HTMLButtonElement>('#more')!;
  const info = app.querySelector('#page-info')!;
  const itemOf = (id: string) => postsEl.querySelector<HTMLElement>(`[data-testid=post-item][data-id="${CSS.escape(id)}"]`);
  // The list in one order: its cursor only means something in that order (the server refuses
  // a cursor of another), so switching starts over from the first page. `shown` moves with
  // every switch; a page that arrives for an older switch is dropped, so quick clicks cannot
  // mix two orders in one list.
  let order = initialOrder;
  // The filter, like the order, restarts the walk: a cursor only works with its own filter.
  const filterForm = app.querySelector<HTMLFormElement>('[data-testid=post-filter]')!;
  const readFilter = (): Filter => {
    const f: Filter = {};
    for (const [key] of FILTERS) if (filterForm.querySelector<HTMLInputElement>(`[name=${key}]`)!.checked) f[key] = true;
    const tag = filterForm.querySelector<HTMLSelectElement>('[name=tagId]')?.value;
    if (tag) f.tagId = tag;
    return f;
  };
  // The filter comes from the URL (#/course/<id>?unresolved&tag=<id>) and goes back into it.
  for (const [key] of FILTERS) filterForm.querySelector<HTMLInputElement>(`[name=${key}]`)!.checked = params.has(key);
  const tagSelect = filterForm.querySelector<HTMLSelectElement>('[name=tagId]');
  if (tagSelect && params.get('tag') && tags.some((t) => t.id === params.get('tag'))) tagSelect.value = params.get('tag')!;
  let filter: Filter = readFilter();
  // The search box's query rides in the URL too (?q=...), so a reload shows the same results.
  let searched = params.get('q') ?? '';
  /** The URL of the list as shown, kept for a reload or a link, without a hashchange (which would rebuild the page). */
  const keepInUrl = () => {
    const parts: string[] = FILTERS.filter(([key]) => filter[key]).map(([key]) => key);
    if (filter.tagId) parts.push(`tag=${encodeURIComponent(filter.tagId)}`);
    if (searched) parts.push(`q=${encodeURIComponent(searched)}`);
    const query = parts.join('&');
    history.replaceState(null, '', `#/course/${encodeURIComponent(courseId)}${order === 'NEW' ? '' : `/${order.toLowerCase()}`}${query ? `?${query}` : ''}`);
  };
  let after: string | null = null;
  let pages = 0;
  let shown = 0;
  const describe = () => {
    info.textContent = `${counted(postsEl.children.length, 'post')}, ${counted(pages, 'page')}, ${ORDER_LABELS[order][1]}`;
  };
  const loadPage = async () => {
    const mine = shown;
    more.disabled = true;
    try {
      const data = await gql(
        `query($id: ID!, $first: Int!, $after: String, $order: PostOrder!, $filter: PostFilter) { course(id: $id) {
           posts(first: $first, after: $after, orderBy: $order, filter: $filter) { pageInfo { hasNextPage endCursor } edges { cursor node { ${POST_FIELDS} } } } } }`,
        { id: courseId, first: PAGE_SIZE, after, order, filter },
      );
      if (mine !== shown) return;
      const conn = data.course.posts;
      pages += 1;
      postsEl.setAttribute('data-pages', String(pages));
      // A post that arrived live at the top may come again in a later page: it stays once.
      const nodes: PostItem[] = conn.edges.map((e: any) => e.node).filter((n: PostItem) => !itemOf(n.id));
      postsEl.insertAdjacentHTML('beforeend', nodes.map((n) => itemHtml(n)).join(''));
      after = conn.pageInfo.endCursor;
      more.hidden = !conn.pageInfo.hasNextPage;
      describe();
      watchLikes();
    } catch (err) {
      if (mine === shown) info.innerHTML = `<span class="error" data-testid="posts-error">${esc(errorText(err))}</span>`;
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
    postsEl.setAttribute('data-filter', JSON.stringify(filter));
    postsEl.setAttribute('data-pages', '0');
    return loadPage();
  };
  app.querySelector('[data-testid=post-order]')!.addEventListener('click', (e) => {
    const b = (e.target as HTMLElement).closest<HTMLButtonElement>('[data-order]');
    if (!b || b.dataset.order === order) return;
    const shown = show(b.dataset.order as PostOrder);
    keepInUrl();
    void shown;
  });
  more.addEventListener('click', loadPage);
  filterForm.addEventListener('change', () => {
    filter = readFilter();
    void show(order);
    keepInUrl();
  });

  /** A new post goes on top, in every order: it is what the reader has not seen yet. */
  const addFresh = (p: PostItem) => {
    if (itemOf(p.id)) return;
    postsEl.insertAdjacentHTML('afterbegin', itemHtml(p, true));
    describe();
    watchLikes();
  };
  const setCount = (id: string, what: 'likes' | 'comments', n: number) => {
    const el = itemOf(id)?.querySelector<HTMLElement>(`[data-${what}]`);
    if (!el) return;
    el.dataset[what] = String(n);
    el.textContent = counted(Math.max(0, n), what === 'likes' ? 'like' : 'comment');
  };
  const countOf = (id: string, what: 'likes' | 'comments') => Number(itemOf(id)?.querySelector<HTMLElement>(`[data-${what}]`)?.dataset[what] ?? 0);

  // Unread: the header's count and each listed post's dot and "N new comments", as the server
  // last said (the first load, unreadCounts events, a mutation's answer).
  const unreadEl = app.querySelector<HTMLElement>('[data-testid=course-unread]')!;
  const markAllBtn = app.querySelector<HTMLButtonElement>('[data-testid=mark-course-read]')!;
  const setCourseUnread = (n: number) => {
    unreadEl.dataset.count = String(n);
    unreadEl.textContent = unreadText(n);
    markAllBtn.disabled = n === 0;
  };
  const setUnread = (u: Unread) => {
    const item = itemOf(u.id);
    if (!item) return;
    item.dataset.unread = String(u.isUnread);
    item.querySelector<HTMLElement>('[data-testid=unread-dot]')!.hidden = !u.isUnread;
    const news = item.querySelector<HTMLElement>('[data-testid=new-comments]')!;
    news.dataset.count = String(u.unreadCommentCount);
    news.textContent = `· ${counted(u.unreadCommentCount, 'new comment')}`;
    news.hidden = u.unreadCommentCount <= 0;
  };
  /** Everything listed is read (the course was marked read, here or in another tab). */
  /** Moves with every unreadCounts event: a mutation's answer may be older than one. */
  let unreadEvents = 0;
  const allRead = () =>
    postsEl.querySelectorAll<HTMLElement>('[data-testid=post-item]').forEach((el) => setUnread({ id: el.dataset.id!, isUnread: false, unreadCommentCount: 0 }));
  markAllBtn.addEventListener('click', async () => {
    const errEl = app.querySelector('[data-testid=mark-course-read-error]')!;
    errEl.textContent = '';
    markAllBtn.disabled = true;
    const seen = unreadEvents;
    try {
      const res = await gql(`mutation($id: ID!) { markCourseRead(courseId: $id) { id unreadPostCount } }`, { id: courseId });
      // An event that came meanwhile may be newer than this answer (a post written just after
      // the mark): then the events keep the count, as they carry it whole.
      if (seen === unreadEvents) setCourseUnread(res.markCourseRead.unreadPostCount);
      // With "Unread" ticked the list is now out of date as a whole: walk it again.
      if (filter.unread) void show(order);
      else allRead();
    } catch (err) {
      errEl.textContent = errorText(err);
      markAllBtn.disabled = false;
    }
  });
  // Live: the viewer's unread state of this course. Others' posts, comments and deletions, and
  // the viewer's own reads (here or in another tab) arrive here; a null post means the whole
  // course was marked read.
  onLeave(
    subscribe(
      `subscription($course: ID!) { unreadCounts(courseId: $course) { course { id unreadPostCount } post { id isUnread unreadCommentCount } } }`,
      { course: courseId },
      (d: any) => {
        const u = d.unreadCounts;
        if (!u) return;
        unreadEvents += 1;
        setCourseUnread(u.course.unreadPostCount);
        if (u.post) setUnread(u.post);
        else allRead();
      },
    ),
  );
  // After a reconnect graphql-ws subscribes again, but what happened while the socket was
  // down never arrives: read the count, and the state of the posts listed, afresh.
  let wasDown = false;
  onLeave(
    onLive((state) => {
      if (state === 'up' && wasDown) void rereadUnread();
      wasDown = state !== 'up';
    }),
  );
  async function rereadUnread() {
    const ids = [...postsEl.querySelectorAll<HTMLElement>('[data-testid=post-item]')].map((el) => el.dataset.id!).slice(0, MAX_REREAD);
    const posts = ids.map((_, i) => `p${i}: node(id: $p${i}) { ... on Post { id isUnread unreadCommentCount } }`).join(' ');
    const vars: Record<string, string> = { id: courseId };
    ids.forEach((id, i) => (vars[`p${i}`] = id));
    try {
      const data = await gql(`query($id: ID!${ids.map((_, i) => `, $p${i}: ID!`).join('')}) { course(id: $id) { id unreadPostCount } ${posts} }`, vars);
      setCourseUnread(data.course.unreadPostCount);
      ids.forEach((_, i) => data[`p${i}`]?.id && setUnread(data[`p${i}`]));
    } catch {
      // The next event corrects it.
    }
  }

  // Search: the course's posts, comments and replies; the query stays in the URL.
  const search = searchBox(app.querySelector<HTMLElement>('#search')!, {
    courseId,
    onQuery: (q) => {
      searched = q;
      keepInUrl();
    },
  });
  if (searched) void search.run(searched);

  const form = app.querySelector<HTMLFormElement>('#post-form')!;
  // "Private" is for questions only; at most MAX_TAGS tags can be ticked.
  const syncForm = () => {
    const kind = form.querySelector<HTMLSelectElement>('[name=kind]')!.value;
    form.querySelector<HTMLElement>('[data-testid=post-form-private-label]')!.hidden = kind !== 'QUESTION';
    const boxes = [...form.querySelectorAll<HTMLInputElement>('[name=tag]')];
    const full = boxes.filter((b) => b.checked).length >= MAX_TAGS;
    boxes.forEach((b) => (b.disabled = full && !b.checked));
  };
  form.addEventListener('change', syncForm);
  // Similar posts under the title, as it is typed.
  const similar = similarPosts(
    courseId,
    form.querySelector<HTMLInputElement>('[name=title]')!,
    form.querySelector<HTMLElement>('[data-testid=similar-posts]')!,
  );
  onLeave(similar.stop);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const fields = new FormData(form);
    const title = String(fields.get('title') ?? '').trim();
    const body = String(fields.get('body') ?? '').trim();
    const errEl = form.querySelector('[data-testid=post-form-error]')!;
    errEl.textContent = '';
    if (!title || !body) {
      errEl.textContent = 'A post needs a title and a text.';
      return;
    }
    const submit = form.querySelector<HTMLButtonElement>('[data-testid=post-form-submit]')!;
    submit.disabled = true;
    try {
      const res = await gql(
        `mutation($course: ID!, $title: String!, $body: String!, $kind: PostKind!, $anonymous: Boolean!, $private: Boolean!, $tagIds: [ID!]!) {
           createPost(courseId: $course, title: $title, body: $body, kind: $kind, anonymous: $anonymous, private: $private, tagIds: $tagIds) { ${POST_FIELDS} } }`,
        {
          course: courseId, title, body,
          kind: String(fields.get('kind') ?? 'DISCUSSION'),
          anonymous: fields.get('anonymous') === 'on',
          // Only a question can be private; the box hides for other kinds but may stay ticked.
          private: fields.get('kind') === 'QUESTION' && fields.get('private') === 'on',
          tagIds: fields.getAll('tag').map(String),
        },
      );
      addFresh(res.createPost);
      form.reset();
      similar.reset();
      syncForm();
      app.querySelector<HTMLDetailsElement>('#new-post')!.open = false;
    } catch (err) {
      errEl.textContent = errorText(err);
    } finally {
      submit.disabled = false;
    }
  });

  // Live like counts of the posts listed; renewed (once per burst) as the list grows.
  let stopLikes: (() => void) | null = null;
  let watchTimer: ReturnType<typeof setTimeout> | null = null;
  let watching = '';
  let left = false;
  function watchLikes() {
    if (watchTimer || left) return;
    watchTimer = setTimeout(() => {
      watchTimer = null;
      if (left) return;
      const ids = [...postsEl.querySelectorAll<HTMLElement>('[data-testid=post-item]')].map((el) => el.dataset.id!).slice(0, MAX_WATCHED);
      if (ids.join() === watching || ids.length === 0) return;
      watching = ids.join();
      stopLikes?.();
      stopLikes = subscribe(`subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }`, { ids }, (d: any) =>
        setCount(d.likeCounts.id, 'likes', d.likeCounts.likeCount),
      );
    }, 250);
  }
  onLeave(() => {
    left = true;
    if (watchTimer) clearTimeout(watchTimer);
    stopLikes?.();
  });
  // Live: new posts, deleted posts, and comment counts moving.
  onLeave(
    subscribe(
      `subscription($course: ID!) { courseActivity(courseId: $course) { kind nodeId postId post { ${POST_FIELDS} } } }`,
      { course: courseId },
      (d: any) => {
        const a = d.courseActivity;
        // With a filter set, a new post may not belong in the list: it shows once the filter is cleared.
        if (a.kind === 'POST_CREATED' && a.post && Object.keys(filter).length === 0) addFresh(a.post);
        if (a.kind === 'POST_DELETED') {
          itemOf(a.nodeId)?.remove();
          describe();
        }
        if ((a.kind === 'COMMENT_CREATED' || a.kind === 'REPLY_CREATED') && itemOf(a.postId)) {
          setCount(a.postId, 'comments', countOf(a.postId, 'comments') + 1);
        }
        // A deleted comment takes its replies along: how many, the post's new count says.
        if ((a.kind === 'COMMENT_DELETED' || a.kind === 'REPLY_DELETED') && itemOf(a.postId)) {
          gql(`query($id: ID!) { post(id: $id) { id commentCount } }`, { id: a.postId }).then(
            (r) => r.post && setCount(r.post.id, 'comments', r.post.commentCount),
            () => {},
          );
        }
      },
    ),
  );
  await show(order);
}
