// Small text helpers shared by the pages (main.ts, course.ts, post.ts) and the notification
// bell (bell.ts).

/** "1 like", "2 likes", "0 likes": the count and its noun, in agreement. */
export const counted = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
/** The noun alone, for a count shown in its own element. */
export const noun = (n: number, one: string, many = `${one}s`) => (n === 1 ? one : many);

/** Escapes text for innerHTML: everything shown comes from other users. */
export const esc = (s: unknown) =>
  String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

type Writer = { handle: string } | null | undefined;

/** Who wrote something: "@handle"; a pseudonym when the writer is hidden from the reader;
 * both when the reader may see through it (the writer themself, or staff). */
export const byline = (author: Writer, pseudonym?: string | null) =>
  author
    ? `@${esc(author.handle)}${pseudonym ? ` <span class="anon" data-testid="pseudonym" title="written anonymously: others see this name">as ${esc(pseudonym)}</span>` : ''}`
    : `<span class="anon" data-testid="pseudonym">${esc(pseudonym ?? 'someone')}</span>`;

/** A post's markers: its kind (discussions need none), private, pinned, a question's state,
 * staff's endorsement, then its tags. */
export function badges(p: {
  kind?: string; private?: boolean; pinned?: boolean; resolved?: boolean; answered?: boolean;
  endorsement?: { by: { handle: string } } | null; tags?: { id: string; name: string }[];
}) {
  const out: string[] = [];
  const badge = (what: string, text: string, title = '') =>
    out.push(`<span class="kind ${what}" data-testid="badge-${what}"${title ? ` title="${esc(title)}"` : ''}>${esc(text)}</span>`);
  if (p.pinned) badge('pinned', 'pinned');
  if (p.kind === 'QUESTION') badge('question', 'question');
  if (p.kind === 'ANNOUNCEMENT') badge('announcement', 'announcement');
  if (p.private) badge('private', 'private', 'only its author and the instructors can read it');
  if (p.kind === 'QUESTION') {
    if (p.resolved) badge('resolved', 'resolved');
    else if (!p.answered) badge('unanswered', 'unanswered');
  }
  if (p.endorsement) badge('endorsed', `endorsed by @${p.endorsement.by.handle}`);
  for (const t of p.tags ?? []) out.push(`<span class="chip" data-testid="tag" data-tag="${esc(t.id)}">${esc(t.name)}</span>`);
  return out.join(' ');
}
