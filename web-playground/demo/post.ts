// A post's page: the post with its comments and replies. Like/unlike is optimistic; counts
// arrive live (likeCounts), and so do new comments and replies and deletions (courseActivity).
// Anyone replies to a comment or to a reply; authors edit and delete what they wrote, and the
// course's instructors may delete anything (the server decides: a refusal shows its code).
// A post shows its kind, tags and a question's state; anonymous writing shows its pseudonym
// (and, to those who may see through it, the writer too); comments and replies can be written
// anonymously where the course allows it. Opening a post reads it (markPostRead), and so
// does a comment or reply of others arriving while it is open.
import { gql, subscribe, errorText } from './api';
import { noun, esc, byline, badges } from './text';
import { app, onLeave } from './page';

/** A writer: null when they wrote anonymously and are hidden from the reader. */
type Author = { id: string; handle: string; displayName?: string } | null;
type Endorsement = { by: { handle: string }; at: string } | null;
type Reply = {
  id: string; body: string; author: Author; pseudonym: string | null; replyTo: Author; replyToPseudonym: string | null;
  likeCount: number; likedByMe: boolean; createdAt: string; editedAt: string | null; endorsement: Endorsement;
  comment?: { id: string };
};
type Comment = {
  id: string; body: string; author: Author; pseudonym: string | null; likeCount: number; likedByMe: boolean;
  createdAt: string; editedAt: string | null; endorsement: Endorsement; isAcceptedAnswer: boolean;
  replies: { nodes: Reply[] };
};
type Post = {
  id: string; title: string; body: string; likeCount: number; likedByMe: boolean; commentCount: number;
  author: Author; pseudonym: string | null; course: { id: string; code: string; title: string; myRole: string; anonymity: string };
  createdAt: string; editedAt: string | null; kind: string; private: boolean; pinned: boolean; resolved: boolean;
  answered: boolean; endorsement: Endorsement; tags: { id: string; name: string }[];
  acceptedAnswer: { id: string } | null;
};

const WHO = `author { id handle } anonymous pseudonym endorsement { by { handle } at }`;
const REPLY_FIELDS = `id body likeCount likedByMe createdAt editedAt ${WHO} replyTo { id handle } replyToPseudonym comment { id }`;
const COMMENT_FIELDS = `id body likeCount likedByMe createdAt editedAt ${WHO} isAcceptedAnswer
  replies(first: 20) { nodes { ${REPLY_FIELDS} } }`;
/** Comments a page: with their replies (20 each) a page stays under the server's query cost limit. */
const COMMENTS_PAGE = 25;
const POST_STATE = `kind private pinned resolved answered endorsement { by { handle } at } tags { id name } acceptedAnswer { id }`;

/** Staff's endorsement of a comment or reply, and the accepted answer, as markers. */
const marks = (c: { endorsement: Endorsement; isAcceptedAnswer?: boolean }) =>
  (c.isAcceptedAnswer ? ' <span class="kind accepted" data-testid="badge-accepted">✓ accepted answer</span>' : '') +
  (c.endorsement ? ` <span class="kind endorsed" data-testid="badge-endorsed">endorsed by @${esc(c.endorsement.by.handle)}</span>` : '');
/** How a writer is addressed in "Reply to …": "@alice", or their pseudonym. */
const addressOf = (author: Author, pseudonym: string | null) => (author ? `@${author.handle}` : pseudonym ?? 'someone');
/** How many ids one likeCounts subscription may watch. */
const MAX_WATCHED = 100;

/** When it was written, and "edited" once its author changed it. */
const when = (createdAt: string, editedAt: string | null) =>
  `${esc(new Date(createdAt).toLocaleString())}<span data-testid="edited">${editedAt ? ' · edited' : ''}</span>`;

/** The inline "really?" that a Delete button turns into. */
const confirmHtml = (what: string) => `<span class="confirm" data-testid="confirm">Delete this ${what}?
  <button type="button" data-action="confirm-delete" data-testid="confirm-delete">Yes, delete</button>
  <button type="button" data-action="keep">Keep</button></span>`;

export async function post(postId: string) {
  const data = await gql(
    `query($id: ID!, $first: Int!) { me { id } post(id: $id) { id title body likeCount likedByMe commentCount createdAt editedAt
       author { id handle displayName } anonymous pseudonym ${POST_STATE} course { id code title myRole anonymity }
       comments(first: $first) { pageInfo { hasNextPage endCursor } nodes { ${COMMENT_FIELDS} } } } }`,
    { id: postId, first: COMMENTS_PAGE },
  );
  const me: string = data.me.id;
  const p: Post & { comments: { nodes: Comment[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } } } = data.post;
  const staff = p.course.myRole === 'INSTRUCTOR';
  const mayEdit = (a: Author) => a?.id === me;
  const mayDelete = (a: Author) => a?.id === me || staff;
  // Questions: the asker (the viewer, when the post's author is them) and staff accept an
  // answer; staff alone resolve, endorse, pin and make public. The server decides in the end.
  const question = () => p.kind === 'QUESTION';
  const mayAccept = () => question() && (p.author?.id === me || staff);
  /** What the page knows of each comment's and reply's state, to draw their markers and buttons. */
  const nodes = new Map<string, { what: string; endorsement: Endorsement; accepted: boolean }>();
  const track = (id: string, what: string, endorsement: Endorsement, accepted = false) => nodes.set(id, { what, endorsement, accepted });
  const btn = (action: string, text: string) => `<button type="button" class="small" data-action="${action}" data-testid="${action}">${text}</button>`;
  /** The accept / endorse / resolve / pin buttons of the post, a comment or a reply. */
  function modHtml(id: string, what: string) {
    const out: string[] = [];
    if (what === 'post') {
      if (p.acceptedAnswer && mayAccept()) out.push(btn('clear-accepted', 'Clear accepted answer'));
      if (staff && question()) {
        if (!p.resolved) out.push(btn('mark-resolved', 'Mark resolved'));
        else if (!p.acceptedAnswer) out.push(btn('unresolve', 'Unresolve'));
      }
      if (staff) out.push(p.endorsement ? btn('unendorse', 'Withdraw endorsement') : btn('endorse', 'Endorse'));
      if (staff && !p.private) out.push(p.pinned ? btn('unpin', 'Unpin') : btn('pin', 'Pin'));
      if (staff && p.private) out.push(btn('make-public', 'Make public'));
      return out.join(' ');
    }
    const n = nodes.get(id);
    if (!n) return '';
    if (what === 'comment' && mayAccept() && !n.accepted) out.push(btn('accept', 'Accept'));
    if (staff) out.push(n.endorsement ? btn('unendorse', 'Withdraw endorsement') : btn('endorse', 'Endorse'));
    return out.join(' ');
  }
  // Where the course allows it, comments and replies can be written under a pseudonym.
  const anonymousBox = (testid: string) =>
    p.course.anonymity === 'OFF' ? '' : `<label class="anon-choice"><input type="checkbox" name="anonymous" data-testid="${testid}">
      Anonymous${p.course.anonymity === 'EVERYONE' ? ' (to everyone, instructors too)' : ' (to other students)'}</label>`;
  /** Edit and Delete for what the signed-in user may change; Reply for comments and replies. */
  const actions = (id: string, author: Author, what: string, reply: boolean) =>
    `<div class="actions" data-actions-of="${esc(id)}" data-what="${what}">
      ${reply ? `<button type="button" class="small" data-action="reply" data-testid="reply-button">Reply</button>` : ''}
      ${mayEdit(author) ? `<button type="button" class="small" data-action="edit" data-testid="edit">Edit</button>` : ''}
      ${mayDelete(author) ? `<button type="button" class="small" data-action="delete" data-testid="delete">Delete</button>` : ''}
      <span data-mod-of="${esc(id)}">${modHtml(id, what)}</span>
      <span class="error" data-testid="action-error"></span></div>`;

  app.innerHTML = `<p><a href="#/course/${esc(p.course.id)}">← ${esc(p.course.code)}</a></p>
    <article class="card" data-testid="post" data-id="${esc(p.id)}">
      <div data-testid="post-badges">${badges(p)}</div>
      <h1 data-testid="post-title">${esc(p.title)}</h1>
      <div class="muted"><span data-testid="post-author">${byline(p.author, p.pseudonym)}</span> · ${when(p.createdAt, p.editedAt)}</div>
      <p class="body" data-testid="post-body">${esc(p.body)}</p>
      <button class="like" data-testid="like" aria-pressed="false"></button>
      <span data-testid="like-count"></span> <span data-testid="like-noun"></span> · <span data-testid="comment-count">${p.commentCount}</span> <span data-testid="comment-noun">${noun(p.commentCount, 'comment')}</span>
      ${actions(p.id, p.author, 'post', false)}
    </article>
    <h2>Comments</h2>
    <div id="comments" data-testid="comments"></div>
    <p><button id="more-comments" data-testid="more-comments" hidden>More comments</button> <span class="error" id="more-comments-error"></span></p>
    <form id="comment-form" class="card"><textarea name="body" data-testid="comment-body" placeholder="Write a comment"></textarea>
      ${anonymousBox('comment-anonymous')}
      <button data-testid="comment-submit">Comment</button> <span class="error" id="comment-error" data-testid="comment-error"></span></form>`;
  const article = app.querySelector<HTMLElement>('[data-testid=post]')!;
  /** Redraws the post's markers and buttons, and each comment's and reply's, from state. */
  const paintPost = () => {
    article.querySelector('[data-testid=post-badges]')!.innerHTML = badges(p);
    const slot = article.querySelector(`[data-mod-of="${CSS.escape(p.id)}"]`);
    if (slot) slot.innerHTML = modHtml(p.id, 'post');
  };
  const paintNode = (id: string) => {
    const n = nodes.get(id);
    if (!n) return;
    const marksEl = app.querySelector(`[data-marks-of="${CSS.escape(id)}"]`);
    if (marksEl) marksEl.innerHTML = marks({ endorsement: n.endorsement, isAcceptedAnswer: n.accepted });
    const slot = app.querySelector(`[data-mod-of="${CSS.escape(id)}"]`);
    if (slot) slot.innerHTML = modHtml(id, n.what);
    app.querySelector(`[data-testid=comment][data-id="${CSS.escape(id)}"]`)?.classList.toggle('accepted', n.accepted);
  };
  /** A post as the server now has it (a mutation's answer, or POST_UPDATED). */
  const applyPost = (np: Partial<Post> | null | undefined) => {
    if (!np) return;
    Object.assign(p, np);
    for (const [id, n] of nodes) {
      if (n.what !== 'comment') continue;
      n.accepted = p.acceptedAnswer?.id === id;
      paintNode(id);
    }
    paintPost();
  };
  /** A comment's or reply's endorsement (and a comment's acceptance) as the server now has it. */
  const applyNode = (c: { id: string; endorsement: Endorsement; isAcceptedAnswer?: boolean } | null | undefined) => {
    const n = c && nodes.get(c.id);
    if (!c || !n) return;
    n.endorsement = c.endorsement;
    if (c.isAcceptedAnswer !== undefined) n.accepted = c.isAcceptedAnswer;
    paintNode(c.id);
  };

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
      alert(`Like failed: ${errorText(err)}`);
    } finally {
      inFlight -= 1;
      paint();
    }
  });

  const commentsEl = app.querySelector<HTMLElement>('#comments')!;
  const shown = new Set<string>();
  const commentCountEl = app.querySelector('[data-testid=comment-count]')!;
  const commentNounEl = app.querySelector('[data-testid=comment-noun]')!;
  // The post's commentCount counts comments and replies together.
  const setComments = (comments: number) => {
    commentCountEl.textContent = String(Math.max(0, comments));
    commentNounEl.textContent = noun(Math.max(0, comments), 'comment');
  };
  const bumpComments = (by: number) => setComments(Number(commentCountEl.textContent) + by);
  // A comment's or reply's like button: optimistic, corrected by the mutation's answer and by
  // committed counts from likeCounts (which patch every [data-like-of] element).
  const likeButton = (id: string, liked: boolean, count: number) =>
    `<button class="like small" data-testid="like-comment" data-target="${esc(id)}" aria-pressed="${liked}">${liked ? '♥' : '♡'}</button>
     <span data-like-of="${esc(id)}">${count}</span>`;
  const replyHtml = (r: Reply) => (track(r.id, 'reply', r.endorsement), '') + `<div data-testid="reply" data-id="${esc(r.id)}" data-author="${esc(addressOf(r.author, r.pseudonym))}">
    <span class="muted"><span data-testid="reply-author">${byline(r.author, r.pseudonym)}</span> → ${byline(r.replyTo, r.replyToPseudonym)} · ${when(r.createdAt, r.editedAt)} · ${likeButton(r.id, r.likedByMe, r.likeCount)}<span data-marks-of="${esc(r.id)}">${marks(r)}</span></span>
    <p class="body" data-testid="reply-text">${esc(r.body)}</p>
    ${actions(r.id, r.author, 'reply', true)}</div>`;
  // Comments come oldest first. New ones (yours, or live) go at the end, marked fresh; pages
  // loaded later ("More comments") go before them, and skip any already shown.
  const addComment = (c: Comment, bump = false) => {
    if (shown.has(c.id)) return;
    shown.add(c.id);
    track(c.id, 'comment', c.endorsement, c.isAcceptedAnswer);
    (c.replies?.nodes ?? []).forEach((r) => shown.add(r.id));
    const firstFresh = commentsEl.querySelector(':scope > [data-fresh]');
    const [where, at] = bump || !firstFresh ? (['beforeend', commentsEl] as const) : (['beforebegin', firstFresh] as const);
    at.insertAdjacentHTML(where, `<div ${bump ? 'data-fresh ' : ''}class="card${c.isAcceptedAnswer ? ' accepted' : ''}" data-testid="comment" data-id="${esc(c.id)}" data-author="${esc(addressOf(c.author, c.pseudonym))}">
      <div class="muted"><span data-testid="comment-author">${byline(c.author, c.pseudonym)}</span> · ${when(c.createdAt, c.editedAt)} · ${likeButton(c.id, c.likedByMe, c.likeCount)}<span data-marks-of="${esc(c.id)}">${marks(c)}</span></div>
      <p class="body" data-testid="comment-text">${esc(c.body)}</p>
      ${actions(c.id, c.author, 'comment', true)}
      <div class="replies">${(c.replies?.nodes ?? []).map(replyHtml).join('')}</div></div>`);
    if (bump) bumpComments(1);
    watchLikes();
  };
  const addReply = (r: Reply, commentId: string) => {
    if (shown.has(r.id)) return;
    const parent = commentsEl.querySelector(`[data-testid=comment][data-id="${CSS.escape(commentId)}"] .replies`);
    if (!parent) return; // under a comment this page does not show
    shown.add(r.id);
    parent.insertAdjacentHTML('beforeend', replyHtml(r));
    bumpComments(1);
    watchLikes();
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

  // Like counts of the post and of every comment and reply shown, live. The set of ids moves
  // as comments come and go, so the subscription is renewed (once per burst of changes).
  let stopLikes: (() => void) | null = null;
  let watchTimer: ReturnType<typeof setTimeout> | null = null;
  let watching = '';
  let left = false;
  const subscribeLikes = () => {
    watchTimer = null;
    if (left) return;
    const ids = [p.id, ...[...commentsEl.querySelectorAll<HTMLElement>('[data-like-of]')].map((el) => el.dataset.likeOf!)]
      .slice(0, MAX_WATCHED);
    if (ids.join() === watching) return;
    watching = ids.join();
    stopLikes?.();
    stopLikes = subscribe(`subscription($ids: [ID!]!) { likeCounts(ids: $ids) { id likeCount } }`, { ids }, (d: any) => {
      const u = d.likeCounts;
      if (u.id === p.id) {
        if (inFlight === 0) {
          count = u.likeCount;
          paint();
        }
      } else {
        app.querySelectorAll(`[data-like-of="${CSS.escape(u.id)}"]`).forEach((el) => (el.textContent = String(u.likeCount)));
      }
    });
  };
  function watchLikes() {
    if (stopLikes && !watchTimer) watchTimer = setTimeout(subscribeLikes, 250);
  }
  onLeave(() => {
    left = true;
    if (watchTimer) clearTimeout(watchTimer);
    stopLikes?.();
  });

  // Clicks on comments and replies: like, reply, edit, delete.
  commentsEl.addEventListener('click', async (e) => {
    const btn = (e.target as HTMLElement).closest<HTMLButtonElement>('button');
    if (!btn) return;
    if (btn.dataset.testid === 'like-comment') return likeComment(btn);
    const bar = btn.closest<HTMLElement>('[data-actions-of]');
    if (bar) return act(bar, btn.dataset.action);
    if (btn.dataset.action === 'cancel-reply') btn.closest('form')?.remove();
  });
  article.addEventListener('click', (e) => {
    const btn = (e.target as HTMLElement).closest<HTMLButtonElement>('[data-actions-of] button');
    if (btn) void act(btn.closest<HTMLElement>('[data-actions-of]')!, btn.dataset.action);
  });

  async function likeComment(btn: HTMLButtonElement) {
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
      alert(`Like failed: ${errorText(err)}`);
    }
  }

  /** One of the action buttons of the post, a comment or a reply (`bar` holds them). */
  async function act(bar: HTMLElement, action: string | undefined) {
    const id = bar.dataset.actionsOf!;
    const what = bar.dataset.what!;
    const errorEl = bar.querySelector<HTMLElement>('[data-testid=action-error]')!;
    const holder = bar.parentElement!;
    const run = async (mutation: string, vars: Record<string, unknown>, apply: (r: any) => void) => {
      errorEl.textContent = '';
      bar.querySelectorAll('button').forEach((b) => (b.disabled = true));
      try {
        apply((await gql(mutation, vars)).r);
      } catch (err) {
        errorEl.textContent = errorText(err);
      } finally {
        bar.querySelectorAll('button').forEach((b) => (b.disabled = false));
      }
    };
    const POST_ANSWER = `{ id ${POST_STATE} }`;
    switch (action) {
      case 'accept':
      case 'clear-accepted':
        return run(`mutation($p: ID!, $c: ID) { r: acceptAnswer(postId: $p, commentId: $c) ${POST_ANSWER} }`,
          { p: p.id, c: action === 'accept' ? id : null }, applyPost);
      case 'mark-resolved':
      case 'unresolve':
        return run(`mutation($p: ID!, $v: Boolean!) { r: markResolved(postId: $p, resolved: $v) ${POST_ANSWER} }`,
          { p: p.id, v: action === 'mark-resolved' }, applyPost);
      case 'pin':
      case 'unpin':
        return run(`mutation($p: ID!, $v: Boolean!) { r: pinPost(postId: $p, pinned: $v) ${POST_ANSWER} }`,
          { p: p.id, v: action === 'pin' }, applyPost);
      case 'make-public':
        return run(`mutation($p: ID!) { r: makePostPublic(postId: $p) ${POST_ANSWER} }`, { p: p.id }, applyPost);
      case 'endorse':
      case 'unendorse':
        return run(`mutation($id: ID!, $v: Boolean!) { r: endorse(id: $id, endorsed: $v) { id endorsement { by { handle } at } } }`,
          { id, v: action === 'endorse' }, (r) => (r.id === p.id ? applyPost({ endorsement: r.endorsement }) : applyNode(r)));
      case 'reply':
        return openReplyForm(bar, id);
      case 'edit':
        return what === 'post' ? editPostForm() : editCommentForm(holder, id);
      case 'delete':
        errorEl.textContent = '';
        bar.querySelector('.confirm')?.remove();
        errorEl.insertAdjacentHTML('beforebegin', confirmHtml(what));
        return;
      case 'keep':
        bar.querySelector('.confirm')?.remove();
        return;
      case 'confirm-delete': {
        bar.querySelectorAll('button').forEach((b) => (b.disabled = true));
        try {
          if (what === 'post') {
            await gql(`mutation($id: ID!) { deletePost(postId: $id) { deletedId } }`, { id });
            location.hash = `#/course/${encodeURIComponent(p.course.id)}`;
            return;
          }
          const res = await gql(`mutation($id: ID!) { deleteComment(commentId: $id) { deletedId post { commentCount } } }`, { id });
          removeNode(id);
          if (res.deleteComment.post) setComments(res.deleteComment.post.commentCount);
        } catch (err) {
          bar.querySelector('.confirm')?.remove();
          errorEl.textContent = errorText(err);
          bar.querySelectorAll('button').forEach((b) => (b.disabled = false));
        }
        return;
      }
    }
  }

  /** The reply form, under the comment whose thread it joins; one open at a time. */
  function openReplyForm(bar: HTMLElement, to: string) {
    app.querySelector('form.reply-form')?.remove();
    const thread = bar.closest<HTMLElement>('[data-testid=comment]')!;
    const handle = bar.closest<HTMLElement>('[data-author]')!.dataset.author!;
    thread.insertAdjacentHTML('beforeend', `<form class="reply-form" data-testid="reply-form">
      <textarea name="body" data-testid="reply-body" placeholder="Reply to ${esc(handle)}"></textarea>
      ${anonymousBox('reply-anonymous')}
      <button data-testid="reply-submit">Reply</button> <button type="button" data-action="cancel-reply">Cancel</button>
      <span class="error" data-testid="reply-error"></span></form>`);
    const form = thread.querySelector<HTMLFormElement>('form.reply-form')!;
    form.querySelector('textarea')!.focus();
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const fields = new FormData(form);
      const body = String(fields.get('body') ?? '').trim();
      if (!body) return;
      const anonymous = fields.get('anonymous') === 'on';
      const errEl = form.querySelector('[data-testid=reply-error]')!;
      errEl.textContent = '';
      form.querySelector<HTMLButtonElement>('[data-testid=reply-submit]')!.disabled = true;
      try {
        const res = await gql(
          `mutation($to: ID!, $body: String!, $anonymous: Boolean!) { createReply(commentId: $to, body: $body, anonymous: $anonymous) { ${REPLY_FIELDS} } }`,
          { to, body, anonymous },
        );
        addReply(res.createReply, res.createReply.comment.id);
        form.remove();
      } catch (err) {
        errEl.textContent = errorText(err);
        form.querySelector<HTMLButtonElement>('[data-testid=reply-submit]')!.disabled = false;
      }
    });
  }

  /** Swaps a comment's or reply's text for an editor; Save sends editComment. */
  function editCommentForm(holder: HTMLElement, id: string) {
    const textEl = holder.querySelector<HTMLElement>(':scope > .body')!;
    if (holder.querySelector(':scope > form.edit-form')) return;
    textEl.hidden = true;
    textEl.insertAdjacentHTML('afterend', `<form class="edit-form" data-testid="edit-form">
      <textarea name="body" data-testid="edit-body">${esc(textEl.textContent)}</textarea>
      <button data-testid="edit-save">Save</button> <button type="button" data-testid="edit-cancel">Cancel</button>
      <span class="error" data-testid="edit-error"></span></form>`);
    const form = holder.querySelector<HTMLFormElement>(':scope > form.edit-form')!;
    const done = () => {
      form.remove();
      textEl.hidden = false;
    };
    form.querySelector('[data-testid=edit-cancel]')!.addEventListener('click', done);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const body = String(new FormData(form).get('body') ?? '').trim();
      if (!body) return;
      try {
        const res = await gql(`mutation($id: ID!, $body: String!) { editComment(commentId: $id, body: $body) { id body editedAt } }`, { id, body });
        textEl.textContent = res.editComment.body;
        markEdited(holder, res.editComment.editedAt);
        done();
      } catch (err) {
        form.querySelector('[data-testid=edit-error]')!.textContent = errorText(err);
      }
    });
  }

  /** Swaps the post's title and body for an editor; Save sends editPost. */
  function editPostForm() {
    if (article.querySelector('form.edit-form')) return;
    const titleEl = article.querySelector<HTMLElement>('[data-testid=post-title]')!;
    const bodyEl = article.querySelector<HTMLElement>('[data-testid=post-body]')!;
    titleEl.hidden = bodyEl.hidden = true;
    bodyEl.insertAdjacentHTML('afterend', `<form class="edit-form" data-testid="edit-form">
      <label>Title <input name="title" data-testid="edit-title" maxlength="200" value="${esc(titleEl.textContent)}"></label>
      <textarea name="body" data-testid="edit-body">${esc(bodyEl.textContent)}</textarea>
      <button data-testid="edit-save">Save</button> <button type="button" data-testid="edit-cancel">Cancel</button>
      <span class="error" data-testid="edit-error"></span></form>`);
    const form = article.querySelector<HTMLFormElement>('form.edit-form')!;
    const done = () => {
      form.remove();
      titleEl.hidden = bodyEl.hidden = false;
    };
    form.querySelector('[data-testid=edit-cancel]')!.addEventListener('click', done);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const fields = new FormData(form);
      const title = String(fields.get('title') ?? '').trim();
      const body = String(fields.get('body') ?? '').trim();
      if (!title || !body) return;
      try {
        const res = await gql(
          `mutation($id: ID!, $title: String!, $body: String!) { editPost(postId: $id, title: $title, body: $body) { id title body editedAt } }`,
          { id: p.id, title, body },
        );
        titleEl.textContent = res.editPost.title;
        bodyEl.textContent = res.editPost.body;
        markEdited(article, res.editPost.editedAt);
        done();
      } catch (err) {
        form.querySelector('[data-testid=edit-error]')!.textContent = errorText(err);
      }
    });
  }

  function markEdited(holder: HTMLElement, editedAt: string | null) {
    const el = holder.querySelector(':scope > .muted [data-testid=edited]');
    if (el && editedAt) el.textContent = ' · edited';
  }

  p.comments.nodes.forEach((c) => addComment(c));
  const moreComments = app.querySelector<HTMLButtonElement>('#more-comments')!;
  let commentsAfter: string | null = p.comments.pageInfo.endCursor;
  moreComments.hidden = !p.comments.pageInfo.hasNextPage;
  moreComments.addEventListener('click', async () => {
    moreComments.disabled = true;
    const errEl = app.querySelector('#more-comments-error')!;
    errEl.textContent = '';
    try {
      const res = await gql(
        `query($id: ID!, $first: Int!, $after: String) { post(id: $id) { id
           comments(first: $first, after: $after) { pageInfo { hasNextPage endCursor } nodes { ${COMMENT_FIELDS} } } } }`,
        { id: p.id, first: COMMENTS_PAGE, after: commentsAfter },
      );
      res.post.comments.nodes.forEach((c: Comment) => addComment(c));
      commentsAfter = res.post.comments.pageInfo.endCursor;
      moreComments.hidden = !res.post.comments.pageInfo.hasNextPage;
    } catch (err) {
      errEl.textContent = errorText(err);
    } finally {
      moreComments.disabled = false;
    }
  });

  app.querySelector<HTMLFormElement>('#comment-form')!.addEventListener('submit', async (e) => {
    e.preventDefault();
    const form = e.target as HTMLFormElement;
    const fields = new FormData(form);
    const body = String(fields.get('body') ?? '').trim();
    if (!body) return;
    const errEl = app.querySelector('#comment-error')!;
    errEl.textContent = '';
    try {
      const res = await gql(
        `mutation($id: ID!, $body: String!, $anonymous: Boolean!) { createComment(postId: $id, body: $body, anonymous: $anonymous) { ${COMMENT_FIELDS} } }`,
        { id: p.id, body, anonymous: fields.get('anonymous') === 'on' },
      );
      addComment(res.createComment, true);
      form.reset();
    } catch (err) {
      errEl.textContent = errorText(err);
    }
  });

  // Opening the post reads it and its comments up to now; what others write while it is open
  // is read as it arrives (once per burst). The article says when the server has it read.
  let readTimer: ReturnType<typeof setTimeout> | null = null;
  const markRead = async () => {
    readTimer = null;
    if (left) return;
    try {
      const res = await gql(`mutation($id: ID!) { markPostRead(postId: $id) { id isUnread unreadCommentCount } }`, { id: p.id });
      if (!left && res.markPostRead) article.dataset.read = String(!res.markPostRead.isUnread && res.markPostRead.unreadCommentCount === 0);
    } catch {
      // Unread marks are a convenience: the page works without them.
    }
  };
  const readSoon = () => {
    if (!readTimer && !left) readTimer = setTimeout(markRead, 500);
  };
  onLeave(() => readTimer && clearTimeout(readTimer));
  void markRead();

  // Live: committed like counts of the post and everything shown; new comments in the course.
  subscribeLikes();
  onLeave(
    subscribe(
      `subscription($course: ID!) { courseActivity(courseId: $course) { kind nodeId postId post { id ${POST_STATE} }
         comment { ${COMMENT_FIELDS} } reply { ${REPLY_FIELDS} } } }`,
      { course: p.course.id },
      (d: any) => {
        const a = d.courseActivity;
        if ((a.postId ?? a.post?.id) !== p.id) return;
        if (a.kind === 'POST_UPDATED') applyPost(a.post);
        if (a.kind === 'COMMENT_UPDATED') applyNode(a.comment);
        if (a.kind === 'REPLY_UPDATED') applyNode(a.reply);
        if (a.kind === 'COMMENT_CREATED' && a.comment) addComment(a.comment, true);
        if (a.kind === 'REPLY_CREATED' && a.reply?.comment) addReply(a.reply, a.reply.comment.id);
        // Others' writing is read as it arrives; one's own is never unread.
        if ((a.kind === 'COMMENT_CREATED' || a.kind === 'REPLY_CREATED') && (a.comment ?? a.reply)?.author?.id !== me) readSoon();
        if (a.kind === 'COMMENT_DELETED' || a.kind === 'REPLY_DELETED') removeNode(a.nodeId);
        if (a.kind === 'POST_DELETED' && !article.querySelector('[data-testid=post-deleted]')) {
          article.insertAdjacentHTML('afterbegin', '<p class="error" data-testid="post-deleted">This post was deleted.</p>');
        }
      },
    ),
  );
}
