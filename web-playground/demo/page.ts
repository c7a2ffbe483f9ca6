// What the pages share: the element they draw into, and what to stop when the page changes.

export const app = document.getElementById('app')!;
let stops: (() => void)[] = [];

/** Runs `stop` when the next page replaces this one (a subscription's unsubscribe). */
export function onLeave(...stop: (() => void)[]) {
  stops.push(...stop);
}

/** Stops everything the current page started; route() calls it before drawing the next. */
export function leave() {
  stops.forEach((stop) => stop());
  stops = [];
}
