/**
 * Scenario 10: a rolling restart of 4 members, static (memberInstanceId) against plain (a new UUIDv7
 * memberId per process). Also runnable alone: `npm run bench:restart` prints the section of
 * docs/benchmarks.md that `npm run bench` writes (used to refresh that section without the full run).
 */
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import { until } from './cli';
import { elapsedMs } from './stats';

import type { RestartFigures, RestartMode } from './report';

export type { RestartFigures, RestartMode };

const MEMBERS = 4;
const SHARDS = 16;
/** How long a process is down between its stop() and its successor's start() (a quick restart). */
const DOWNTIME_MS = 1000;

/**
 * 4 members on 16 shards while a producer writes 1,000 keyed entries/s; each member in turn is
 * stopped and, DOWNTIME_MS later, a new process (a new CoordinatedMember) started in its place. Shard moves are read
 * from the group's event log (SHARDS_ASSIGNED to another member id than the shard's last owner).
 */
export async function rollingRestart(url: string, mode: RestartMode): Promise<RestartFigures> {
  const redis = new Redis(url);
  const streamPrefix = `restart-${mode}-${Date.now()}`;
  const admin = new CoordinatorAdmin(redis);
  await admin.createStream({ streamPrefix, shardCount: SHARDS });
  const runs = new Map<string, number>();
  const start = async (slot: number) => {
    const member = new CoordinatedMember(redis, {
      streamPrefix,
      consumerGroup: 'bench',
      ...(mode === 'static' ? { memberInstanceId: `pod-${slot}` } : {}),
      runtimeMaxConcurrency: 4,
      sessionTimeoutMs: 10_000,
      coordinator: { heartbeatIntervalMs: 500 },
      handler: (message) => {
        const id = `${message.shardIndex}/${message.id}`;
        runs.set(id, (runs.get(id) ?? 0) + 1);
      },
    });
    member.on('error', () => undefined);
    await member.start();
    return member;
  };
  const stable = () =>
    until(async () => {
      const d = await admin.describeGroup(streamPrefix, 'bench');
      return (
        d.group.state === 'STABLE' &&
        d.shards.every((s) => s.state === 'OWNED') &&
        d.members.filter((m) => m.state === 'ACTIVE').length >= MEMBERS
      );
    }, 60_000);

  const members: CoordinatedMember[] = [];
  for (let i = 0; i < MEMBERS; i++) members.push(await start(i));
  await stable();
  const owner = new Map<number, string>();
  for (const shard of (await admin.describeGroup(streamPrefix, 'bench')).shards) if (shard.owner) owner.set(shard.shardIndex, shard.owner);
  const [last] = await admin.readGroupEvents(streamPrefix, 'bench', { count: 1 });

  const producerConnection = new Redis(url);
  const producer = new StreamProducer(producerConnection, { streamPrefix });
  let sending = true;
  let sent = 0;
  const load = (async () => {
    while (sending) {
      await producer.sendBatch(Array.from({ length: 10 }, (_, k) => ({ key: `key-${(sent + k) % 64}`, payload: { n: sent + k } })));
      sent += 10;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();

  const begin = process.hrtime.bigint();
  for (let i = 0; i < MEMBERS; i++) {
    await members[i].stop();
    await new Promise((resolve) => setTimeout(resolve, DOWNTIME_MS));
    members[i] = await start(i);
    await stable();
  }
  const ms = elapsedMs(begin);
  sending = false;
  await load;
  await until(() => runs.size >= sent, 60_000);

  let shardMoves = 0;
  let revocations = 0;
  let targetCommits = 0;
  for (const event of await admin.readGroupEvents(streamPrefix, 'bench', { after: last.id, count: 10_000 })) {
    const shards = event.detail === '' ? [] : event.detail.split(',').map(Number);
    if (event.type === 'SHARDS_ASSIGNED') {
      for (const shard of shards) {
        if (owner.get(shard) !== event.memberId) shardMoves += 1;
        owner.set(shard, event.memberId);
      }
    } else if (event.type === 'SHARDS_REVOKING') {
      revocations += shards.length;
    } else if (event.type === 'TARGET_COMMITTED') {
      targetCommits += 1;
    }
  }
  const duplicates = [...runs.values()].filter((n) => n > 1).length;
  await Promise.all(members.map((m) => m.stop()));
  producerConnection.disconnect();
  redis.disconnect();
  return { mode, shardMoves, revocations, targetCommits, duplicates, ms };
}

if (require.main === module) {
  void (async () => {
    const { RedisServer } = await import('@redis-stream-coordinator/core/testing');
    const { restartSection } = await import('./report');
    const server = await RedisServer.start();
    try {
      const figures = [await rollingRestart(server.url, 'plain'), await rollingRestart(server.url, 'static')];
      const os = await import('node:os');
      const { redisVersion } = await import('./redis-stats');
      const probe = new Redis(server.url);
      const measured = `Measured ${new Date().toISOString().slice(0, 10)} by \`npm run bench:restart\` on ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}; Node ${process.version}, Redis ${await redisVersion(probe)}.`;
      probe.disconnect();
      console.log(restartSection(figures, measured).join('\n'));
    } finally {
      await server.stop();
    }
    process.exit(0);
  })().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
