// A course's page: its posts page by page (Relay first/after), newest, hot or top first
// (orderBy; the order stays in the URL, #/course/<id>/top).
import { gql } from './api';
import { counted, esc } from './text';
import { app } from './page';

const PAGE_SIZE = 5;
const POST_FIELDS = `id title likeCount likedByMe commentCount createdAt author { handle }`;

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

export async function course(courseId: string, initialOrder: PostOrder) {
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
