// "Similar questions" under the title field of the new-post form: as the title is typed, after
// a short pause, the course's posts with a similar title (Course.similarPosts, which forgives
// typos and lists resolved questions first), each a link, resolved ones marked, so a question
// asked before may be found instead of asked again.
import { gql } from './api';
import { esc } from './text';

/** How long typing must pause before the server is asked. */
export const SIMILAR_DEBOUNCE_MS = 250;
/** How many similar posts to list. */
const SIMILAR_COUNT = 5;
/** The longest text the server compares. */
const MAX_TEXT = 200;

type Similar = { similarity: number; post: { id: string; title: string; kind: string; resolved: boolean } };

export type SimilarList = {
  /** Empties the list and forgets pending questions (the form was sent). */
  reset(): void;
  /** Stops following the field (the page's onLeave). */
  stop(): void;
};

/** Follows `input` (the title field) and lists similar posts in `list`. */
export function similarPosts(courseId: string, input: HTMLInputElement, list: HTMLElement): SimilarList {
  let timer: ReturnType<typeof setTimeout> | null = null;
  // Moves with every request: answers come back in any order, and only the latest request's
  // answer is shown, so an older, slower one cannot overwrite the list of a newer text.
  let asked = 0;
  let stopped = false;

  const show = (text: string, items: Similar[]) => {
    list.dataset.text = text;
    list.hidden = items.length === 0;
    list.innerHTML = items.length
      ? `<p class="muted">Similar posts: maybe yours was asked before</p><ul>${items.map((s) => `<li data-testid="similar-post" data-id="${esc(s.post.id)}"
          data-resolved="${s.post.resolved}"><a href="#/post/${esc(s.post.id)}">${esc(s.post.title)}</a>
          ${s.post.resolved ? '<span class="kind resolved" data-testid="similar-resolved">resolved</span>' : ''}</li>`).join('')}</ul>`
      : '';
  };

  const ask = async () => {
    timer = null;
    const text = input.value.trim().slice(0, MAX_TEXT);
    const mine = ++asked;
    if (!text) return show('', []);
    try {
      const data = await gql(
        `query($id: ID!, $text: String!, $first: Int) { course(id: $id) { id similarPosts(text: $text, first: $first) {
           similarity post { id title kind resolved } } } }`,
        { id: courseId, text, first: SIMILAR_COUNT },
      );
      if (mine !== asked || stopped) return;
      show(text, data.course.similarPosts ?? []);
    } catch {
      // A hint, not a gate: when it fails the form works as before.
      if (mine === asked && !stopped) show(text, []);
    }
  };

  const onInput = () => {
    if (timer) clearTimeout(timer);
    timer = setTimeout(ask, SIMILAR_DEBOUNCE_MS);
  };
  input.addEventListener('input', onInput);
  return {
    reset() {
      if (timer) clearTimeout(timer);
      timer = null;
      asked += 1;
      show('', []);
    },
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      input.removeEventListener('input', onInput);
    },
  };
}
