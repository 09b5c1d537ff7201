import { type RedisClient, runScript } from './scripts';

/** What waits in one schedule: how many entries, and when the first is due (Redis ms), null when it is empty. */
export interface ScheduleHead {
  count: number;
  firstDueAt: number | null;
}

/**
 * A shard's delayed entries and a group's deferred retries on it, as `ScheduleHead`s, and how many
 * of the group's entries there are parked behind their key's deferred retries (deferredOrder 'key'),
 * in one read-only script (readScheduleHeads-3.lua: the keys are in the shard's slot): what
 * describeGroup and the metrics show of the schedules, one round trip per shard. `deferred.count`
 * leaves the parked entries out; its `firstDueAt` is the deferred schedule's, parked entries in it.
 */
export async function readScheduleHeads(
  redis: RedisClient,
  schedule: string,
  deferred: string,
  keyStates: string,
): Promise<{ scheduled: ScheduleHead; deferred: ScheduleHead; parked: number }> {
  const reply = (await runScript(redis, 'readScheduleHeads', [schedule, deferred, keyStates], [])) as (number | string)[];
  // Whole ms: an entry moved before it was due scores half a millisecond before its due time (acceptMove-5.lua).
  const head = (i: number): ScheduleHead => ({
    count: Number(reply[i]),
    firstDueAt: reply[i + 1] === '' ? null : Math.ceil(Number(reply[i + 1])),
  });
  const inDeferred = head(2);
  // Both read in one script: the parked count is never above the schedule's (a key-states hash
  // alone, its schedule deleted, counts nothing).
  const parked = Math.min(inDeferred.count, Math.max(0, Number(reply[4])));
  return { scheduled: head(0), deferred: { ...inDeferred, count: inDeferred.count - parked }, parked };
}
