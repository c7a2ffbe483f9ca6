// A post's page: the post with its comments and replies, like/unlike with an optimistic
// update, counts live (likeCounts) and new comments, replies and deletions live
// (courseActivity).
import { gql, subscribe, GraphQLError } from './api';
import { noun, esc } from './text';
import { app, onLeave } from './page';

type Author = { handle: string; displayName?: string };
type Reply = { id: string; body: string; author: Author; replyTo: Author; likeCount: number; likedByMe: boolean; comment?: { id: string } };
type Comment = { id: string; body: string; author: Author; likeCount: number; likedByMe: boolean; replies: { nodes: Reply[] } };
type Post = {
  id: string; title: string; body: string; likeCount: number; likedByMe: boolean; commentCount: number;
  author: Author; course: { id: string; code: string; title: string }; createdAt: string;
};

const REPLY_FIELDS = `id body likeCount likedByMe author { handle } replyTo { handle }`;
const COMMENT_FIELDS = `id body likeCount likedByMe author { handle } replies(first: 20) { nodes { ${REPLY_FIELDS} } }`;

export async function post(postId: string) {
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
  onLeave(
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
