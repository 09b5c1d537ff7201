/**
 * Resizing for the fault kinds of faults.ts: a resize that waits for the previous one and for every
 * group's cutover, and a producer's writes held in flight across an ordered shrink.
 */
import { findGroupInfo } from '../../packages/core/src/redis/responses';
import type { Fault } from './checker';
import type { ChaosHarness } from './harness';
import { waitFor } from './harness-tools';

/** One shard more or fewer (kept between 4 and 10), once the previous resize is done; returns once every group's cutover completed. */
export async function resize(h: ChaosHarness, fault: Fault, grow: boolean, ordered: boolean, graceMs = 2000) {
  const current = (await h.admin.describeStream(h.streamPrefix))!.shardCount;
  // Keep the count between 4 and 10 whatever the schedule asks.
  const next = grow ? (current >= 10 ? current - 1 : current + 1) : current <= 4 ? current + 1 : current - 1;
  fault.target = `${current}->${next}${ordered ? '' : ' unordered'}`;
  await waitForCutovers(h, fault, 'the previous resize to be done', async () => {
    try {
      const result = await h.admin.resizeShards(h.streamPrefix, next, { ordered, graceMs });
      // Redis times of the switch and of the end of its grace: what a per-key order violation's
      // evidence (order-evidence.ts) sets the entries' ids against.
      const switchAt = result.switchAt === undefined ? Number.NaN : Date.parse(result.switchAt);
      fault.target += ` (switchAt ${switchAt}, until ${switchAt + graceMs})`;
      return true;
    } catch (error) {
      if ((error as Error).name === 'ResizeInProgressError') return false;
      throw error;
    }
  });
  // The resize's time is when it happened, not when the fault began waiting for the previous one:
  // the checker excuses per-key inversions around an unordered resize by this time.
  fault.at = performance.timeOrigin + performance.now();
  h.maxShards = Math.max(h.maxShards, next);
  h.resizes += 1;
  // Recovered also means every group's cutover completed.
  await waitForCutovers(h, fault, 'every cutover done', async () =>
    (await h.admin.cutoverStatus(h.streamPrefix)).every((s) => s.cutover === null),
  );
  return { liftedAt: performance.now() };
}

/** How long a cutover wait goes on past its bound while the groups it waits for read on, in slices. */
const CATCH_UP_MAX_MS = 180_000;
const CATCH_UP_SLICE_MS = 10_000;
/** Entries a slice must see read on the waited-for shards to count as catching up rather than stalled. */
const CATCH_UP_MIN_READ = 1_000;

/**
 * Waits for `done` within the harness's cutover bound, then on while the groups still cutting over
 * read on the shards they wait for: a backlog is not a stall. A group re-reading a long history (a
 * reset to earliest keeps retention from trimming, then the group recreated with its keys lost
 * replays every recorded resize over it: the soak of 3d90774 at 639 s, 37,297 entries behind on one
 * shard, read at 800/s) needs longer than any fixed bound, and is reading all along. A slice with
 * fewer than CATCH_UP_MIN_READ entries read, or CATCH_UP_MAX_MS past the bound, fails the wait,
 * naming what is left; the fault's detail says how long it went past the bound.
 */
async function waitForCutovers(h: ChaosHarness, fault: Fault, what: string, done: () => Promise<boolean>): Promise<void> {
  let timedOut: Error;
  try {
    await waitFor(what, done, h.cutoverBoundMs(), 100);
    return;
  } catch (error) {
    timedOut = error as Error;
  }
  const from = performance.now();
  let read = await cutoverReads(h);
  while (performance.now() - from < CATCH_UP_MAX_MS) {
    const finished = await waitFor(what, done, CATCH_UP_SLICE_MS, 100).then(
      () => true,
      () => false,
    );
    if (finished) {
      fault.detail = `${fault.detail ? `${fault.detail} ` : ''}(${what}: ${Math.round((performance.now() - from) / 1000)} s past the bound, a group catching up on a backlog)`;
      return;
    }
    const now = await cutoverReads(h);
    if (readSince(read, now) < CATCH_UP_MIN_READ) break;
    read = now;
  }
  throw new Error(`${timedOut.message}: ${await cutoversLeft(h)}`);
}

/**
 * Entries read (XINFO GROUPS entries-read) by each group still cutting over, on each shard it waits
 * for ('<group> <shard>'). A sum over them all went down when a group completed its cutover within a
 * slice (its reads left the sum), which ended a wait for a group reading 900 entries a second (the
 * soak of 32d0a56 at 731 s, 38,071 behind): readSince compares what both reads have.
 */
async function cutoverReads(h: ChaosHarness): Promise<Map<string, number>> {
  const reads = new Map<string, number>();
  for (const status of await h.admin.cutoverStatus(h.streamPrefix)) {
    if (!status.cutover) continue;
    for (const wait of status.waitingFor ?? []) {
      const progress = await readProgress(h, status.consumerGroup, wait.shardIndex);
      if (progress) reads.set(`${status.consumerGroup} ${wait.shardIndex}`, progress.read);
    }
  }
  return reads;
}

/** Entries read between two cutoverReads on the shards both name; a wait that ended since (a group or shard done) counts as read on. */
function readSince(before: Map<string, number>, after: Map<string, number>): number {
  let read = 0;
  for (const [key, was] of before) {
    const now = after.get(key);
    read += now === undefined ? CATCH_UP_MIN_READ : Math.max(0, now - was);
  }
  return read;
}

/** The groups still cutting over, what they wait for and who owns those shards: for a wait that ran out. */
async function cutoversLeft(h: ChaosHarness): Promise<string> {
  // Every member writes its read side's state to its record file (member-process.ts, SIGWINCH).
  for (const member of h.members.values()) member.child.kill('SIGWINCH');
  const left = [];
  for (const status of await h.admin.cutoverStatus(h.streamPrefix)) {
    if (!status.cutover) continue;
    const group = status.consumerGroup;
    const owners = new Map((await h.admin.describeGroup(h.streamPrefix, group)).shards.map((s) => [s.shardIndex, s.owner]));
    const waiting = status.waitingFor ?? [];
    // Behind or stalled: how far the group is behind on each shard it waits for, and how many
    // entries it read there in one second (a shard read at full speed but behind a backlog that does
    // not shrink is a load above what its owner can process, not a stall).
    const before = await Promise.all(waiting.map((w) => readProgress(h, group, w.shardIndex)));
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const after = await Promise.all(waiting.map((w) => readProgress(h, group, w.shardIndex)));
    const waits = waiting.map((w, i) => {
      const progress = before[i] && after[i] ? ` (${after[i]!.lag ?? '?'} behind, read ${after[i]!.read - before[i]!.read}/s)` : '';
      return `shard ${w.shardIndex}${w.undelivered ? ' undelivered' : ''}${w.pending ? ' pending' : ''} at ${owners.get(w.shardIndex) ?? 'nobody'}${progress}`;
    });
    left.push(`${group} (${status.cutover.from}->${status.cutover.to}) waits for ${waits.join(', ') || 'nothing (not completed)'}`);
  }
  return left.join('; ') || 'none left';
}

/** The group's lag on a shard and the entries it has read there in all (XINFO GROUPS); undefined when Redis does not say. */
async function readProgress(h: ChaosHarness, group: string, shard: number): Promise<{ lag: number | null; read: number } | undefined> {
  const info = findGroupInfo(await h.redis.xinfo('GROUPS', h.admin.keys.shardStream(h.streamPrefix, shard)).catch(() => []), group);
  return info?.entriesRead == null ? undefined : { lag: info.lag, read: info.entriesRead };
}

/**
 * Freezes the stale producer's connection (a batch routed with the old shard count stays in flight),
 * shrinks (ordered, `graceMs` 1000), runs `meanwhile`, then lets the held writes land.
 */
export async function staleWrites(h: ChaosHarness, fault: Fault, meanwhile: () => Promise<unknown>) {
  const current = (await h.admin.describeStream(h.streamPrefix))!.shardCount;
  if (current <= 4) {
    // An unordered growth of its own, recorded as such (as new-group records its unordered shrink):
    // the checker excuses the inversions it allows. Unrecorded, a 5-minute soak of the resize kinds
    // (seed 7) reported 256 "order violations" around it, every one of them this growth's.
    const growth: Fault = { kind: 'grow-unordered', at: fault.at };
    await resize(h, growth, true, false);
    h.faults.push(growth);
  }
  const proxy = h.staleLoad.proxy!;
  proxy.freeze();
  try {
    await resize(h, fault, false, true, 1000);
    await meanwhile();
  } finally {
    proxy.thaw();
  }
  return { liftedAt: performance.now() };
}
