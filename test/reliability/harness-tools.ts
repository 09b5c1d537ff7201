/**
 * The reliability harness's small tools, apart from the harness so that the fault kinds it runs can
 * use them without importing the harness back (an import cycle).
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type { TcpProxy } from '../support/tcp-proxy';
import type { RecordLine } from './checker';
import type { MemberKind } from './member-kinds';

/** A small, seeded PRNG (mulberry32): the same seed gives the same schedule and targets. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface MemberProcess {
  /** Unique per process (a duplicate identity shares `memberId`, not `handle`). */
  handle: string;
  memberId: string;
  group: string;
  kind: MemberKind;
  /** A second live process with another's member id (duplicate-id): never a fault's victim. */
  twin: boolean;
  child: ChildProcess;
  /** Resolves once it printed "ready" (joined); rejects when it exits first or takes over 20 s. */
  ready: Promise<void>;
  /** Its proxy in front of the single redis-server; none on a cluster. */
  proxy: TcpProxy | undefined;
  exited: Promise<number | null>;
  /** Cut off (paused, partitioned): not a possible owner until healed. */
  isolated: boolean;
  /** Under some fault until then (performance.now()): it has an excuse to leave work pending. */
  excusedUntil: number;
  recordFile: string;
}

/** A member's proxy, for the fault kinds that act on one (single node only: a cluster member has none). */
export function proxyOf(member: MemberProcess): TcpProxy {
  if (!member.proxy) throw new Error(`member ${member.handle} has no proxy (on a cluster members connect to the nodes directly)`);
  return member.proxy;
}

/**
 * Aborted when the harnesses of this process are stopped from outside their run (a test that timed
 * out or failed, `ChaosHarness.stopAll`): every wait and sleep of a fault still running then ends at
 * once, so nothing keeps polling a stopped Redis (and the process alive) for minutes.
 */
const abandoned = new AbortController();

/** Ends every wait and sleep of this process's harnesses, now and from now on (see `abandoned`). */
export function abandonWaits(reason: string): void {
  if (!abandoned.signal.aborted) abandoned.abort(new Error(reason));
}

function abandonedWhy(): string {
  return (abandoned.signal.reason as Error | undefined)?.message ?? 'the harness was stopped';
}

export const sleep = (ms: number) =>
  new Promise<void>((resolve) => {
    if (abandoned.signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      abandoned.signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    abandoned.signal.addEventListener('abort', done, { once: true });
  });

export async function waitFor(
  description: string,
  probe: () => Promise<boolean> | boolean,
  timeoutMs: number,
  intervalMs = 25,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (abandoned.signal.aborted) throw new Error(`abandoned waiting for ${description}: ${abandonedWhy()}`);
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${description}`);
    await sleep(intervalMs);
  }
}

export function readRecords(file: string): RecordLine[] {
  if (!fs.existsSync(file)) return [];
  return parseRecords(fs.readFileSync(file, 'utf8'));
}

/** How far before `since` a line may stand in a record file: a process's lines are written in time order, give or take its event loop. */
const RECORD_SLACK_MS = 5_000;
/** Bytes read at a time, from the end of a record file backwards. */
const TAIL_CHUNK_BYTES = 1 << 20;

/**
 * The lines of a record file written at `since` (wall-clock ms) or later, read from its end
 * backwards, without blocking: the harness's process runs every proxy, and a whole record file of
 * a long soak (hundreds of MB) read at once stalled them all for as long, a fault of its own.
 */
export async function readRecordsSince(file: string, since: number): Promise<RecordLine[]> {
  const handle = await fs.promises.open(file, 'r').catch(() => undefined);
  if (handle === undefined) return [];
  try {
    let position = (await handle.stat()).size;
    let rest = Buffer.alloc(0);
    const chunks: RecordLine[][] = [];
    while (position > 0) {
      const length = Math.min(TAIL_CHUNK_BYTES, position);
      position -= length;
      const chunk = Buffer.alloc(length);
      await handle.read(chunk, 0, length, position);
      let text = Buffer.concat([chunk, rest]);
      // The first line of a chunk may be cut: kept for the next (earlier) chunk, unless this is the file's start.
      const cut = position > 0 ? text.indexOf(10) : -1;
      rest = cut >= 0 ? text.subarray(0, cut) : Buffer.alloc(0);
      if (cut >= 0) text = text.subarray(cut + 1);
      const lines = parseRecords(text.toString('utf8'));
      chunks.unshift(lines);
      if (lines.length > 0 && lines[0]!.t < since - RECORD_SLACK_MS) break;
    }
    return chunks.flat().filter((l) => l.t >= since);
  } finally {
    await handle.close();
  }
}

function parseRecords(text: string): RecordLine[] {
  const lines: RecordLine[] = [];
  for (const line of text.split('\n')) {
    // A process killed mid-write may leave a torn last line; it was never acknowledged to anyone.
    if (line.trim() === '') continue;
    try {
      lines.push(JSON.parse(line) as RecordLine);
    } catch {
      /* torn line */
    }
  }
  return lines;
}

/**
 * Resolves once the child printed "ready"; rejects when it exits first (saying the last error its
 * record file holds) or after `timeoutMs`. `name` is how the messages call it.
 */
export function readyOf(child: ChildProcess, name: string, recordFile: string, timeoutMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} not ready after ${timeoutMs / 1000} s`)), timeoutMs);
    child.stdout!.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('ready')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      const said = readRecords(recordFile)
        .filter((l) => l.e === 'error')
        .pop()?.msg;
      reject(new Error(`${name} exited with ${code} before it was ready${said ? `: ${said}` : ''}`));
    });
  });
}
