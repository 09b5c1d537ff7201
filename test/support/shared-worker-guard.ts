import { afterAll, beforeAll } from 'vitest';

/**
 * The setup file of the 'tests-shared' project (vitest.config.mts), whose files run one after another
 * in a worker they share (isolate: false): a file must leave that worker as it found it. Its own
 * afterAll hooks run before this one; then whatever it started and did not stop (a redis-server, a
 * member's sockets and timers, a child process, an HTTP server) still shows in Node's active
 * resources, and an environment variable it set is still set. Either fails the file, naming what
 * it left, rather than the next file of the worker, which would see another file's errors.
 */
const KINDS = ['TCPSocketWrap', 'TCPServerWrap', 'PipeWrap', 'ProcessWrap', 'Timeout', 'Immediate', 'FSReqCallback'];
/** How long a file's stopped resources may take to close (a socket's close, a child's exit). */
const SETTLE_MS = 3000;

function resources(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const kind of process.getActiveResourcesInfo()) if (KINDS.includes(kind)) counts.set(kind, (counts.get(kind) ?? 0) + 1);
  return counts;
}

function leftOver(before: Map<string, number>): string[] {
  return [...resources()].filter(([kind, n]) => n > (before.get(kind) ?? 0)).map(([kind, n]) => `${n - (before.get(kind) ?? 0)} ${kind}`);
}

let before = new Map<string, number>();
let env: Record<string, string | undefined> = {};

beforeAll(() => {
  before = resources();
  env = { ...process.env };
});

afterAll(async () => {
  const deadline = Date.now() + SETTLE_MS;
  while (leftOver(before).length > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  const left = leftOver(before);
  const keys = new Set([...Object.keys(env), ...Object.keys(process.env)]);
  const changed = [...keys].filter((key) => env[key] !== process.env[key]);
  if (left.length > 0 || changed.length > 0) {
    throw new Error(
      `this file shares its worker with the next (project 'tests-shared', isolate: false) but left behind ${[
        ...left,
        ...changed.map((key) => `process.env.${key}`),
      ].join(', ')}: stop it in afterAll, or move the file to the 'tests' project`,
    );
  }
}, SETTLE_MS + 2000);
