import { spawn } from 'node:child_process';
import path from 'node:path';
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { until } from './cli';
import { now } from './latency-producer';
import { elapsedMs, percentile } from './stats';

const keys = new KeyBuilder();

/** The raw limit: one connection, XREADGROUP COUNT batch over all shards, XACK each batch (pipelined). */
export async function rawDrain(url: string, streamPrefix: string, shards: number, total: number, batch: number): Promise<number> {
  const redis = new Redis(url);
  const start = await rawLoop(redis, streamPrefix, shards, total, batch, async () => process.hrtime.bigint());
  const seconds = elapsedMs(start) / 1000;
  redis.disconnect();
  return total / seconds;
}

/**
 * The raw loop itself, on `redis`: creates the group 'raw' on every shard stream, calls `started`
 * (what it returns is returned: a start time, a snapshot of counters), then reads and acknowledges
 * in turn until `total` entries are acknowledged.
 */
export async function rawLoop<T>(
  redis: Redis,
  streamPrefix: string,
  shards: number,
  total: number,
  batch: number,
  started: () => Promise<T>,
): Promise<T> {
  const streams = Array.from({ length: shards }, (_, i) => keys.shardStream(streamPrefix, i));
  for (const stream of streams) await redis.xgroup('CREATE', stream, 'raw', '0', 'MKSTREAM').catch(() => undefined);
  const start = await started();
  let done = 0;
  while (done < total) {
    const reply = (await redis.xreadgroup(
      'GROUP',
      'raw',
      'raw-consumer',
      'COUNT',
      batch,
      'STREAMS',
      ...streams,
      ...streams.map(() => '>'),
    )) as [string, [string, string[]][]][] | null;
    if (!reply) continue;
    const pipeline = redis.pipeline();
    for (const [stream, entries] of reply) {
      if (entries.length === 0) continue;
      pipeline.xack(stream, 'raw', ...entries.map(([id]) => id));
      done += entries.length;
    }
    await pipeline.exec();
  }
  return start;
}

/** One member, no-op handler, draining pre-filled shards: entries/s from start() to the last ack. */
export async function memberDrain(url: string, streamPrefix: string, shards: number, total: number, batch: number): Promise<number> {
  const redis = new Redis(url);
  let handled = 0;
  const member = new CoordinatedMember(redis, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: shards,
    batchSize: batch,
    maxBufferedEntries: batch * shards * 2,
    handler: () => {
      handled += 1;
    },
  });
  const admin = new CoordinatorAdmin(redis);
  const start = process.hrtime.bigint();
  await member.start();
  await until(() => handled >= total, 300_000);
  await until(async () => (await admin.describeGroup(streamPrefix, 'bench')).shards.every((s) => s.pending === 0), 60_000);
  const seconds = elapsedMs(start) / 1000;
  await member.stop();
  redis.disconnect();
  return total / seconds;
}

export interface LatencyFigures {
  p50: number;
  p99: number;
  samples: number;
}

/** Runs the producer process for `seconds`; resolves with how many entries it sent. */
function produceApart(url: string, streamPrefix: string, rate: number, seconds: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(__dirname, 'latency-producer.js'), url, streamPrefix, String(rate), String(seconds)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(Number(out.trim())) : reject(new Error(`the latency producer exited with ${code}`))));
  });
}

function figures(samples: number[]): LatencyFigures {
  const steady = samples.slice(Math.floor(samples.length / 10)); // without the first tenth (warm-up)
  return { p50: percentile(steady, 50), p99: percentile(steady, 99), samples: steady.length };
}

/**
 * End-to-end latency (send to handler start) at a steady rate over 8 shards, the producer in a
 * process of its own: one member with 8 workers. With `shared`, an idle second member (another
 * group, another stream) is made from the same client, so the measured one reads through the read
 * hub's shared path (doorbell, then a non-blocking read) instead of alone with a blocking read.
 */
export async function latency(url: string, rate: number, seconds: number, shared = false): Promise<LatencyFigures> {
  const redis = new Redis(url);
  const streamPrefix = `latency-${rate}-${Date.now()}`;
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: 8 });
  const samples: number[] = [];
  const member = new CoordinatedMember<{ sentAt: number }>(redis, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: 8,
    handler: (message) => {
      samples.push(now() - message.payload.sentAt);
    },
  });
  const companion = shared
    ? new CoordinatedMember(redis, {
        streamPrefix: `${streamPrefix}-companion`,
        consumerGroup: 'bench',
        shardCount: 2,
        handler: () => undefined,
      })
    : undefined;
  await companion?.start();
  await member.start();
  await until(() => member.ownedShards().length === 8, 30_000);
  const sent = await produceApart(url, streamPrefix, rate, seconds);
  await until(() => samples.length >= sent, 30_000);
  await member.stop();
  await companion?.stop();
  redis.disconnect();
  return figures(samples);
}

/**
 * The same, read by a raw loop instead: one connection, `XREADGROUP COUNT 100 BLOCK` over the 8
 * streams, the time taken as each entry comes out of the reply, a pipelined XACK per batch.
 */
export async function rawLatency(url: string, rate: number, seconds: number): Promise<LatencyFigures> {
  const redis = new Redis(url);
  const streamPrefix = `raw-latency-${rate}-${Date.now()}`;
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: 8 });
  const streams = Array.from({ length: 8 }, (_, i) => keys.shardStream(streamPrefix, i));
  for (const stream of streams) await redis.xgroup('CREATE', stream, 'raw', '$', 'MKSTREAM').catch(() => undefined);
  const samples: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const reply = (await redis.xreadgroup(
        'GROUP',
        'raw',
        'raw-consumer',
        'COUNT',
        100,
        'BLOCK',
        200,
        'STREAMS',
        ...streams,
        ...streams.map(() => '>'),
      )) as [string, [string, string[]][]][] | null;
      if (!reply) continue;
      const pipeline = redis.pipeline();
      for (const [stream, entries] of reply) {
        for (const [, fields] of entries) {
          const payload = fields[fields.indexOf('p') + 1];
          samples.push(now() - (JSON.parse(payload) as { sentAt: number }).sentAt);
        }
        pipeline.xack(stream, 'raw', ...entries.map(([id]) => id));
      }
      await pipeline.exec();
    }
  })();
  const sent = await produceApart(url, streamPrefix, rate, seconds);
  await until(() => samples.length >= sent, 30_000);
  running = false;
  await loop;
  redis.disconnect();
  return figures(samples);
}

/**
 * Connections one process holds for `members` members made from one client (the client itself
 * included), counted in CLIENT LIST by the client's connection name, which its duplicates share.
 */
export async function connectionsFor(url: string, members: number): Promise<number> {
  const admin = new Redis(url);
  const connectionName = `conns_${members}_${Date.now()}`;
  const redis = new Redis(url, { connectionName });
  const streamPrefix = `conns-${members}-${Date.now()}`;
  await new CoordinatorAdmin(admin).createStream({ streamPrefix, shardCount: Math.max(8, members) });
  let handled = 0;
  const group = Array.from(
    { length: members },
    (_, i) => new CoordinatedMember(redis, { streamPrefix, consumerGroup: 'bench', memberId: `c${i}`, handler: () => void (handled += 1) }),
  );
  await Promise.all(group.map((m) => m.start()));
  await until(() => group.every((m) => m.ownedShards().length > 0), 60_000);
  const total = Math.max(8, members) * 4;
  await new StreamProducer(admin, { streamPrefix }).sendBatch(Array.from({ length: total }, (_, i) => ({ key: `k${i}`, payload: i })));
  await until(() => handled >= total, 60_000);
  const list = String(await admin.client('LIST'));
  const count = list.split('\n').filter((line) => line.includes(` name=${connectionName} `)).length;
  await Promise.all(group.map((m) => m.stop()));
  redis.disconnect();
  admin.disconnect();
  return count;
}

/**
 * Rebalance: members - 1 members own the shards; time from the last member's start() until the
 * group is STABLE with every shard owned, and every member holding its share (scenario 4).
 */
export async function rebalance(url: string, members: number, shardCount = members * 4): Promise<number> {
  const redis = new Redis(url);
  const streamPrefix = `rebalance-${members}-${shardCount}-${Date.now()}`;
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount });
  const admin = new CoordinatorAdmin(redis);
  const make = (i: number) =>
    new CoordinatedMember(redis, {
      streamPrefix,
      consumerGroup: 'bench',
      memberId: `m${i}`,
      runtimeMaxConcurrency: 4,
      handler: () => undefined,
    });
  const first = Array.from({ length: members - 1 }, (_, i) => make(i));
  await Promise.all(first.map((m) => m.start()));
  const settled = async () => {
    const d = await admin.describeGroup(streamPrefix, 'bench');
    return d.group.state === 'STABLE' && d.shards.every((s) => s.state === 'OWNED');
  };
  await until(settled, 60_000);
  const last = make(members - 1);
  const all = [...first, last];
  const share = Math.floor(shardCount / members);
  const start = process.hrtime.bigint();
  await last.start();
  await until(async () => all.every((m) => m.ownedShards().length >= share) && (await settled()), 60_000);
  const ms = elapsedMs(start);
  await Promise.all(all.map((m) => m.stop()));
  redis.disconnect();
  return ms;
}

/**
 * Crash recovery (scenario 4): 4 members own 16 shards; one dies (connections cut, no leave). Time
 * until the others own every shard and the group is STABLE: about the session timeout plus a few
 * round trips.
 */
export async function crashRecovery(url: string, sessionTimeoutMs: number): Promise<number> {
  const adminConnection = new Redis(url);
  const admin = new CoordinatorAdmin(adminConnection);
  const streamPrefix = `recovery-${sessionTimeoutMs}-${Date.now()}`;
  await admin.createStream({ streamPrefix, shardCount: 16 });
  const connections = Array.from({ length: 4 }, () => new Redis(url));
  const members = connections.map(
    (connection, i) =>
      new CoordinatedMember(connection, {
        streamPrefix,
        consumerGroup: 'bench',
        memberId: `m${i}`,
        sessionTimeoutMs,
        handler: () => undefined,
      }),
  );
  members[0].on('error', () => undefined);
  await Promise.all(members.map((m) => m.start()));
  const settled = async () => {
    const d = await admin.describeGroup(streamPrefix, 'bench');
    return d.group.state === 'STABLE' && d.shards.every((s) => s.state === 'OWNED' && s.owner !== 'm0');
  };
  await until(async () => members.every((m) => m.ownedShards().length === 4), 60_000);
  const start = process.hrtime.bigint();
  members[0].abort();
  connections[0].disconnect();
  await until(settled, 120_000);
  const ms = elapsedMs(start);
  await Promise.all(members.slice(1).map((m) => m.stop()));
  for (const connection of connections) connection.disconnect();
  adminConnection.disconnect();
  return ms;
}
