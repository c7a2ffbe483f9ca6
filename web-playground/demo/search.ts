// Full-text search: a box and its results, on a course's page (Course.search) and on the home
// page across the viewer's courses (Query.search). Each hit shows the server's snippet with
// the matches highlighted, whether the post itself, a comment or a reply matched, and a link
// to the post; "More results" pages on with the connection's cursor, which the server binds
// to the query (a new query starts over).
import { gql, errorText } from './api';
import { counted, esc } from './text';

/** Hits a page. */
const PAGE_SIZE = 5;
/** The longest query the server takes. */
export const MAX_QUERY = 200;
const MATCHED_TEXT: Record<string, string> = { POST: 'in the post', COMMENT: 'in a comment', REPLY: 'in a reply' };

type Hit = {
  matched: 'POST' | 'COMMENT' | 'REPLY';
  snippet: string;
  score: number;
  post: { id: string; title: string; course: { id: string; code: string } };
  comment: { id: string } | null;
  reply: { id: string } | null;
};
type Page = { pageInfo: { hasNextPage: boolean; endCursor: string | null }; edges: { cursor: string; node: Hit }[] };

const HIT_FIELDS = `matched snippet score post { id title course { id code } } comment { id } reply { id }`;
const CONNECTION = `pageInfo { hasNextPage endCursor } edges { cursor node { ${HIT_FIELDS} } }`;

/** The snippet as HTML. By contract the server sends escaped text with <mark> elements and
 * nothing else, so it goes in as it is; should anything else ever turn up (an element other
 * than a bare <mark>), it shows as plain text instead of being trusted. A <template> parses it
 * inertly: nothing in it loads or runs while it is checked. */
export function snippetHtml(snippet: string): string {
  const t = document.createElement('template');
  t.innerHTML = snippet;
  const elements = [...t.content.querySelectorAll('*')];
  const clean = elements.every((el) => el.tagName === 'MARK' && el.attributes.length === 0);
  return clean ? snippet : esc(t.content.textContent);
}

export type SearchBox = {
  /** Runs a query (as if typed and submitted); blank clears the results. */
  run(query: string): Promise<void>;
};

/**
 * Draws a search box and its results into `root`. With `courseId` it searches that course;
 * without, every course of the viewer (hits then name their course). `onQuery` hears each
 * query run (blank when cleared), for the page to keep it in its URL.
 */
export function searchBox(root: HTMLElement, opts: { courseId?: string; onQuery?: (q: string) => void }): SearchBox {
  const across = !opts.courseId;
  root.innerHTML = `<form class="search" role="search" data-testid="search-form">
      <input type="search" name="q" data-testid="search-input" maxlength="${MAX_QUERY}"
        placeholder="${across ? 'Search all your courses' : 'Search this course'}: words, &quot;a phrase&quot;, -not, or"
        aria-label="${across ? 'Search all your courses' : 'Search this course'}">
      <button data-testid="search-submit">Search</button>
      <button type="button" data-testid="search-clear" hidden>Clear</button></form>
    <section class="search-results" data-testid="search-results" data-pages="0" hidden>
      <p class="muted" data-testid="search-summary"></p>
      <ol class="hits" data-testid="search-hits"></ol>
      <p><button type="button" data-testid="more-results" hidden>More results</button>
        <span class="error" data-testid="search-error"></span></p></section>`;
  const form = root.querySelector<HTMLFormElement>('form')!;
  const input = form.querySelector<HTMLInputElement>('input')!;
  const clear = form.querySelector<HTMLButtonElement>('[data-testid=search-clear]')!;
  const results = root.querySelector<HTMLElement>('[data-testid=search-results]')!;
  const summary = results.querySelector<HTMLElement>('[data-testid=search-summary]')!;
  const list = results.querySelector<HTMLElement>('[data-testid=search-hits]')!;
  const more = results.querySelector<HTMLButtonElement>('[data-testid=more-results]')!;
  const errorEl = results.querySelector<HTMLElement>('[data-testid=search-error]')!;

  let query = '';
  let after: string | null = null;
  let pages = 0;
  let hasNext = false;
  // Moves with every new query: a page that arrives for an older one is dropped, so a slow
  // answer cannot mix into (or replace) the results of the query typed after it.
  let runs = 0;

  const hitHtml = (h: Hit) => `<li class="card hit" data-testid="search-hit" data-post="${esc(h.post.id)}" data-matched="${esc(h.matched)}"
      data-node="${esc(h.reply?.id ?? h.comment?.id ?? h.post.id)}">
      <a data-testid="search-post-link" href="#/post/${esc(h.post.id)}">${esc(h.post.title)}</a>
      <span class="kind matched-${esc(h.matched.toLowerCase())}" data-testid="search-matched">${esc(MATCHED_TEXT[h.matched] ?? h.matched)}</span>
      ${across ? `<span class="chip" data-testid="search-course">${esc(h.post.course.code)}</span>` : ''}
      <div class="snippet" data-testid="search-snippet">${snippetHtml(h.snippet)}</div></li>`;

  const describe = () => {
    const n = list.children.length;
    summary.textContent = n === 0 ? `Nothing found for “${query}”.` : `${counted(n, 'result')} for “${query}”${hasNext ? ', more below' : ''}`;
  };

  const loadPage = async () => {
    const mine = runs;
    more.disabled = true;
    errorEl.textContent = '';
    try {
      const vars = { q: query, first: PAGE_SIZE, after };
      const conn: Page = across
        ? (await gql(`query($q: String!, $first: Int!, $after: String) { search(query: $q, first: $first, after: $after) { ${CONNECTION} } }`, vars)).search
        : (await gql(
            `query($id: ID!, $q: String!, $first: Int!, $after: String) { course(id: $id) { id search(query: $q, first: $first, after: $after) { ${CONNECTION} } } }`,
            { ...vars, id: opts.courseId },
          )).course.search;
      if (mine !== runs) return;
      list.insertAdjacentHTML('beforeend', conn.edges.map((e) => hitHtml(e.node)).join(''));
      after = conn.pageInfo.endCursor;
      hasNext = conn.pageInfo.hasNextPage;
      more.hidden = !hasNext;
      pages += 1;
      results.dataset.pages = String(pages);
      describe();
    } catch (err) {
      if (mine === runs) errorEl.textContent = errorText(err);
    } finally {
      if (mine === runs) more.disabled = false;
    }
  };

  const run = async (q: string) => {
    runs += 1;
    query = q.trim();
    input.value = q;
    after = null;
    pages = 0;
    hasNext = false;
    list.innerHTML = '';
    more.hidden = true;
    errorEl.textContent = '';
    results.dataset.query = query;
    results.dataset.pages = '0';
    results.hidden = !query;
    clear.hidden = !query;
    opts.onQuery?.(query);
    if (!query) return;
    summary.textContent = 'Searching…';
    await loadPage();
  };

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    void run(input.value);
  });
  clear.addEventListener('click', () => void run(''));
  more.addEventListener('click', () => void loadPage());
  return { run };
}
