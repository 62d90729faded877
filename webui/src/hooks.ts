// Live data without reloads: polling that pauses while the tab is hidden, and server streams that
// are held open while the page shows them.

import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { isAbort } from "./api/http";

export function usePageVisible(): boolean {
  const [visible, setVisible] = useState(document.visibilityState !== "hidden");
  useEffect(() => {
    const update = () => setVisible(document.visibilityState !== "hidden");
    document.addEventListener("visibilitychange", update);
    return () => document.removeEventListener("visibilitychange", update);
  }, []);
  return visible;
}

export interface Polled<T> {
  data: T | undefined;
  error: Error | undefined;
  refresh: () => void;
}

/**
 * Calls `load` now and then every `intervalMs` after the previous call ends (never two at once),
 * only while the tab is visible; a change of `deps` starts over. The last data stays shown while
 * a new request is in flight, so tables do not flicker.
 */
export function usePoll<T>(
  load: (signal: AbortSignal) => Promise<T>,
  intervalMs: number,
  deps: unknown[],
): Polled<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<Error | undefined>(undefined);
  const [kick, setKick] = useState(0);
  const visible = usePageVisible();
  const loadRef = useRef(load);
  loadRef.current = load;

  useEffect(() => {
    if (!visible) return undefined;
    const controller = new AbortController();
    let timer: number | undefined;
    const run = async () => {
      try {
        const result = await loadRef.current(controller.signal);
        if (controller.signal.aborted) return;
        setData(result);
        setError(undefined);
      } catch (e) {
        if (isAbort(e) || controller.signal.aborted) return;
        setError(e instanceof Error ? e : new Error(String(e)));
      }
      if (!controller.signal.aborted && intervalMs > 0) timer = window.setTimeout(run, intervalMs);
    };
    void run();
    return () => {
      controller.abort();
      window.clearTimeout(timer);
    };
  }, [visible, intervalMs, kick, ...deps]);

  const refresh = useCallback(() => setKick((n) => n + 1), []);
  return { data, error, refresh };
}

/**
 * Holds a server stream open while the tab is visible and `enabled`; reopens it after `retryMs`
 * when it ends or fails while still wanted (the master ends follow streams of finished work).
 */
export function useStream(
  open: (signal: AbortSignal) => Promise<void>,
  options: { enabled: boolean; retryMs: number; reopenAfterEnd: boolean; keepWhenHidden?: boolean },
  deps: unknown[],
): { error: Error | undefined; ended: boolean } {
  const [error, setError] = useState<Error | undefined>(undefined);
  const [ended, setEnded] = useState(false);
  const visible = usePageVisible();
  const openRef = useRef(open);
  openRef.current = open;
  const active = options.enabled && (visible || options.keepWhenHidden === true);

  useEffect(() => {
    if (!active) return undefined;
    const controller = new AbortController();
    let timer: number | undefined;
    const run = async () => {
      setEnded(false);
      try {
        await openRef.current(controller.signal);
        if (controller.signal.aborted) return;
        setError(undefined);
        setEnded(true);
        if (!options.reopenAfterEnd) return;
      } catch (e) {
        if (isAbort(e) || controller.signal.aborted) return;
        setError(e instanceof Error ? e : new Error(String(e)));
      }
      timer = window.setTimeout(run, options.retryMs);
    };
    void run();
    return () => {
      controller.abort();
      window.clearTimeout(timer);
    };
  }, [active, options.reopenAfterEnd, options.retryMs, ...deps]);

  return { error, ended };
}
