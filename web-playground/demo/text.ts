// Small text helpers shared by the pages (main.ts) and the notification bell (bell.ts).

/** "1 like", "2 likes", "0 likes": the count and its noun, in agreement. */
export const counted = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
/** The noun alone, for a count shown in its own element. */
export const noun = (n: number, one: string, many = `${one}s`) => (n === 1 ? one : many);

/** Escapes text for innerHTML: everything shown comes from other users. */
export const esc = (s: unknown) =>
  String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
