import { type RedisClient, runScript } from './scripts';

/** What waits in one schedule: how many entries, and when the first is due (Redis ms), null when it is empty. */
export interface ScheduleHead {
  count: number;
  firstDueAt: number | null;
}

/**
 * A shard's delayed entries and a group's deferred retries on it, as `ScheduleHead`s, in one
 * read-only script (readScheduleHeads-2.lua: both keys are in the shard's slot): what describeGroup
 * and the metrics show of the schedules, one round trip per shard.
 */
export async function readScheduleHeads(
  redis: RedisClient,
  schedule: string,
  deferred: string,
): Promise<{ scheduled: ScheduleHead; deferred: ScheduleHead }> {
  const reply = (await runScript(redis, 'readScheduleHeads', [schedule, deferred], [])) as (number | string)[];
  const head = (i: number): ScheduleHead => ({ count: Number(reply[i]), firstDueAt: reply[i + 1] === '' ? null : Number(reply[i + 1]) });
  return { scheduled: head(0), deferred: head(2) };
}
