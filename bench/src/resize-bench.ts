import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, type ResizeShardsOptions, StreamProducer } from '@redis-stream-coordinator/core';
import { until } from './cli';
import { elapsedMs } from './stats';

export interface ResizeCase {
  label: string;
  resize: ResizeShardsOptions;
  metadataRefreshMs: number;
}

/** The cases of scenario 8: the defaults, short windows, and no ordering at all. */
export const RESIZE_CASES: ResizeCase[] = [
  { label: 'ordered, defaults (graceMs 2000, producers refresh every 500 ms)', resize: {}, metadataRefreshMs: 500 },
  { label: 'ordered, graceMs 300, producers refresh every 50 ms', resize: { graceMs: 300 }, metadataRefreshMs: 50 },
  { label: 'ordered: false', resize: { ordered: false }, metadataRefreshMs: 500 },
];

/**
 * Scenario 8: 4 members read 8 shards while a producer writes `rate` keyed entries/s; time from
 * `resizeShards(8 -> 16)` until the group is STABLE, reads all 16 shards, and owns every one.
 */
export async function resizeUnderLoad(url: string, c: ResizeCase, rate = 2000): Promise<number> {
  const redis = new Redis(url);
  const admin = new CoordinatorAdmin(redis);
  const streamPrefix = `resize-${Date.now()}-${Math.floor(Math.random() * 1e6)}`;
  await admin.createStream({ streamPrefix, shardCount: 8 });
  let handled = 0;
  const members = Array.from(
    { length: 4 },
    (_, i) =>
      new CoordinatedMember(redis, {
        streamPrefix,
        consumerGroup: 'bench',
        memberId: `m${i}`,
        runtimeMaxConcurrency: 4,
        handler: () => {
          handled += 1;
        },
      }),
  );
  await Promise.all(members.map((m) => m.start()));
  const settled = async (shards: number) => {
    const d = await admin.describeGroup(streamPrefix, 'bench');
    return d.group.state === 'STABLE' && d.group.readableShardSet.length === shards && d.shards.every((s) => s.state === 'OWNED');
  };
  await until(() => settled(8), 60_000);

  const producer = new StreamProducer(new Redis(url), { streamPrefix, metadataRefreshMs: c.metadataRefreshMs });
  let running = true;
  let sent = 0;
  const load = (async () => {
    const tickMs = 10;
    const perTick = Math.max(1, Math.round((rate * tickMs) / 1000));
    const begin = performance.now();
    for (let tick = 0; running; tick++) {
      const wait = begin + tick * tickMs - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      await producer.sendBatch(Array.from({ length: perTick }, (_, i) => ({ key: `k${(sent + i) % 5000}`, payload: { n: sent + i } })));
      sent += perTick;
    }
  })();
  await until(() => handled > rate / 2, 30_000); // half a second of steady load first

  const start = process.hrtime.bigint();
  await admin.resizeShards(streamPrefix, 16, c.resize);
  await until(() => settled(16), 60_000);
  const ms = elapsedMs(start);

  running = false;
  await load;
  await until(() => handled >= sent, 60_000);
  await Promise.all(members.map((m) => m.stop()));
  redis.disconnect();
  return ms;
}
