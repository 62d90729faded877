// A small history-API router: the master answers every non-API path with index.html, so deep
// links like /experiments/3 load the app, which then picks the page from location.pathname.

import { useEffect, useState } from "preact/hooks";

const listeners = new Set<() => void>();

function notify(): void {
  listeners.forEach((listener) => listener());
}

window.addEventListener("popstate", notify);

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (to === location.pathname + location.search) return;
  if (options.replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  window.scrollTo(0, 0);
  notify();
}

export interface Location {
  path: string;
  query: URLSearchParams;
}

export function useLocation(): Location {
  const [, setTick] = useState(0);
  useEffect(() => {
    const listener = () => setTick((n) => n + 1);
    listeners.add(listener);
    return () => {
      listeners.delete(listener);
    };
  }, []);
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

/** Replaces query parameters of the current page without a new history entry. */
export function setQuery(changes: Record<string, string | null>): void {
  const query = new URLSearchParams(location.search);
  for (const [key, value] of Object.entries(changes)) {
    if (value === null || value === "") query.delete(key);
    else query.set(key, value);
  }
  const text = query.toString();
  navigate(location.pathname + (text ? `?${text}` : ""), { replace: true });
}

/** Matches "/experiments/:id" style patterns; returns the named parts or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const want = pattern.split("/").filter(Boolean);
  const have = path.split("/").filter(Boolean);
  if (want.length !== have.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    if (want[i].startsWith(":")) params[want[i].slice(1)] = decodeURIComponent(have[i]);
    else if (want[i] !== have[i]) return null;
  }
  return params;
}
