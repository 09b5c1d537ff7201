/**
 * npm run bench:cluster — Redis Cluster figures (docs/benchmarks-cluster.md):
 *  1. per-master command load and CPU for one stream of 64 shards, as the slots fall and after the
 *     shards' slots are balanced over the masters;
 *  2. Redis CPU per entry (produce + drain with one member), cluster vs a single node;
 *  3. the cost of WAIT-based durability (producer waitForReplicas, member ackWaitForReplicas);
 *  4. throughput per master and the arithmetic for N masters;
 *  5. latency from send to handler start at 1,000 entries/s, and what an idle member costs, cluster
 *     (polled per-shard reads) vs single node (one blocking read), and on the cluster when the
 *     write's wake-up was heard (the part of the path before the read);
 *  6. connections per process for 1, 8 and 64 members made from one Cluster client.
 * Prints markdown on stdout. BENCH_CLUSTER_ENTRIES (default 60000) entries per drain;
 * BENCH_CLUSTER_SECTIONS (default 1,2,3,5,6) chooses sections (4 follows 2), e.g. 6 for the
 * connections alone (load-independent: it does not need a quiet machine).
 */
import os from 'node:os';
import { Cluster, Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, KeyBuilder, type ReplicaWait, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisCluster, RedisServer } from '@redis-stream-coordinator/core/testing';
import { runCli, until } from './cli';
import { sendPaced } from './paced-send';
import { percentile } from './stats';

const ENTRIES = Number(process.env.BENCH_CLUSTER_ENTRIES ?? 60_000);
const SHARDS = 64;
const BATCH = 100;
const keys = new KeyBuilder();
const progress = (line: string) => process.stderr.write(`${line}\n`);

interface NodeStats {
  port: number;
  calls: number;
  cpu: number;
}

async function nodeStats(port: number): Promise<NodeStats> {
  const client = new Redis({ host: '127.0.0.1', port });
  try {
    const [commands, cpu] = await Promise.all([client.info('commandstats'), client.info('cpu')]);
    let calls = 0;
    for (const line of commands.split('\n')) {
      // Not the stats calls themselves.
      if (!line.startsWith('cmdstat_') || line.startsWith('cmdstat_info') || line.startsWith('cmdstat_config')) continue;
      calls += Number(/calls=(\d+)/.exec(line)?.[1] ?? 0);
    }
    const field = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(cpu)?.[1] ?? 0);
    return { port, calls, cpu: field('used_cpu_user') + field('used_cpu_sys') };
  } finally {
    client.disconnect();
  }
}

async function resetStats(ports: number[]): Promise<NodeStats[]> {
  for (const port of ports) {
    const client = new Redis({ host: '127.0.0.1', port });
    await client.config('RESETSTAT');
    client.disconnect();
  }
  return Promise.all(ports.map(nodeStats));
}

async function deltas(before: NodeStats[]): Promise<NodeStats[]> {
  const after = await Promise.all(before.map((b) => nodeStats(b.port)));
  return after.map((a, i) => ({ port: a.port, calls: a.calls - before[i].calls, cpu: a.cpu - before[i].cpu }));
}

/** Produces ENTRIES keyed entries in batches of 100, then drains them with one member; entries/s of both. */
async function produceAndDrain(
  client: Redis | Cluster,
  streamPrefix: string,
  options: { waitForReplicas?: ReplicaWait; ackWaitForReplicas?: ReplicaWait; entries?: number } = {},
): Promise<{ produceRate: number; drainRate: number }> {
  const entries = options.entries ?? ENTRIES;
  await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: SHARDS });
  const producer = new StreamProducer(client, { streamPrefix, waitForReplicas: options.waitForReplicas, telemetry: false });
  let started = performance.now();
  const inFlight: Promise<unknown>[] = [];
  for (let i = 0; i < entries; i += BATCH) {
    inFlight.push(producer.sendBatch(Array.from({ length: BATCH }, (_, j) => ({ key: `k${(i + j) % 5000}`, payload: { i: i + j } }))));
    if (inFlight.length >= 8) await inFlight.shift();
  }
  await Promise.all(inFlight);
  const produceRate = entries / ((performance.now() - started) / 1000);
  let handled = 0;
  const member = new CoordinatedMember(client, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: SHARDS,
    ackWaitForReplicas: options.ackWaitForReplicas,
    telemetry: false,
    handler: () => {
      handled += 1;
    },
  });
  member.on('error', () => undefined);
  started = performance.now();
  await member.start();
  await until(() => handled >= entries, 600_000);
  const drainRate = entries / ((performance.now() - started) / 1000);
  await member.stop();
  return { produceRate, drainRate };
}

/** Ports of the masters and how many of the stream's shards each serves. */
async function shardsPerMaster(cluster: RedisCluster, streamPrefix: string): Promise<Map<number, number[]>> {
  const byMaster = new Map<number, number[]>();
  for (const node of await cluster.nodes()) if (node.role === 'master' && !node.failed) byMaster.set(node.port, []);
  for (let shard = 0; shard < SHARDS; shard++) {
    const master = await cluster.masterOf(await cluster.slotOf(keys.shardStream(streamPrefix, shard)));
    byMaster.get(master.port)!.push(shard);
  }
  return byMaster;
}

/** Moves shard slots from the fullest master to the emptiest until they differ by at most one shard. */
async function balanceShards(cluster: RedisCluster, streamPrefix: string): Promise<number> {
  let moved = 0;
  for (;;) {
    const byMaster = [...(await shardsPerMaster(cluster, streamPrefix))].sort((a, b) => b[1].length - a[1].length);
    const [, shards] = byMaster[0];
    const [emptiest, few] = byMaster[byMaster.length - 1];
    if (shards.length - few.length <= 1) return moved;
    await cluster.migrateSlot(await cluster.slotOf(keys.shardStream(streamPrefix, shards[0])), emptiest);
    moved += 1;
  }
}

/**
 * Send-to-handler-start latency at `rate` entries/s for `seconds` over 64 shards, producer in the
 * same process (as benchmarks.md's latency scenario): p50 and p99 without the first tenth. On a
 * Cluster also when the shard's wake-up (the write's SPUBLISH) reached a subscriber of its own in
 * this process: the first part of the cluster's path (write, publish, delivery), before the read.
 */
async function latency(
  client: Redis | Cluster,
  streamPrefix: string,
  rate: number,
  seconds: number,
): Promise<{ p50: number; p99: number; wake?: { p50: number; p99: number } }> {
  await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: SHARDS });
  const samples: number[] = [];
  const member = new CoordinatedMember<{ sentAt: number }>(client, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: SHARDS,
    telemetry: false,
    handler: (message) => void samples.push(performance.now() - message.payload.sentAt),
  });
  member.on('error', () => undefined);
  await member.start();
  await until(() => member.ownedShards().length === SHARDS, 30_000);
  const producer = new StreamProducer(client, { streamPrefix, telemetry: false });
  const heard = client instanceof Cluster ? await hearWakeUps(client, producer, streamPrefix) : undefined;
  const sent = await sendPaced(producer, rate, seconds, () => performance.now());
  await until(() => samples.length >= sent, 30_000);
  await member.stop();
  const steady = samples.slice(Math.floor(samples.length / 10));
  const wakes = heard?.stop();
  return {
    p50: percentile(steady, 50),
    p99: percentile(steady, 99),
    wake: wakes && { p50: percentile(wakes, 50), p99: percentile(wakes, 99) },
  };
}

/**
 * Times from each `sendBatch` of `producer` to the first wake-up of each shard it wrote, as heard by
 * a sharded subscriber of its own (matched afterwards: a shard's wake-up may arrive before the send
 * resolves); `stop()` returns them without the first tenth.
 */
async function hearWakeUps(client: Cluster, producer: StreamProducer, streamPrefix: string): Promise<{ stop: () => number[] }> {
  const subscriber = client.duplicate([], { shardedSubscribers: true });
  subscriber.on('error', () => undefined);
  const arrivals = new Map<string, number[]>();
  const sends = new Map<string, number[]>();
  subscriber.on('smessage', (channel: string) => arrivals.set(channel, [...(arrivals.get(channel) ?? []), performance.now()]));
  for (let shard = 0; shard < SHARDS; shard++) await subscriber.ssubscribe(keys.shardWakeChannel(streamPrefix, shard));
  const send = producer.sendBatch.bind(producer);
  producer.sendBatch = async (batch) => {
    const at = performance.now();
    const written = await send(batch);
    for (const shard of new Set(written.map((w) => w.shardIndex))) {
      const channel = keys.shardWakeChannel(streamPrefix, shard);
      sends.set(channel, [...(sends.get(channel) ?? []), at]);
    }
    return written;
  };
  return {
    stop: () => {
      subscriber.disconnect();
      const delays: number[] = [];
      for (const [channel, times] of sends) {
        const heardAt = arrivals.get(channel) ?? [];
        let next = 0;
        for (const at of times) {
          while (next < heardAt.length && heardAt[next] < at) next++;
          if (next < heardAt.length) delays.push(heardAt[next++] - at);
        }
      }
      return delays.slice(Math.floor(delays.length / 10));
    },
  };
}

/**
 * Section 6 measured the same way at the commit before ClusterReadHub (each member read on a
 * duplicate() of its own): printed beside today's figures, as readpath-bench prints its "before".
 */
const BEFORE_READ_HUB = {
  commit: '3fd6887',
  connections: new Map([
    [1, 14],
    [8, 53],
    [64, 314],
  ]),
};

/** A process's connections on every node of the cluster, by what they are for (CLIENT LIST, by connection name). */
interface ConnectionCount {
  members: number;
  /** Commands and reads (the client's own node connections, and any duplicate of it). */
  command: number;
  /** Sharded subscribers (wake-ups). */
  subscriber: number;
  total: number;
}

/**
 * Connections of one process whose `members` members are made from one Cluster client (a stream of
 * max(8, members) shards), counted on every node (masters and replicas) once every member owns a
 * shard and the entries sent were handled: each connection ioredis opens carries the client's
 * connection name (a sharded subscriber's as `ioredis-cluster(ssubscriber):<name>`); counted 2 s
 * after the last entry was handled, when the short-lived slot-table refreshers have closed.
 */
async function connectionsFor(cluster: RedisCluster, members: number): Promise<ConnectionCount> {
  const connectionName = `conns_${members}_${Date.now()}`;
  const client = new Cluster(cluster.startupNodes, { redisOptions: { connectionName } });
  client.on('error', () => undefined);
  const streamPrefix = `conns-${members}-${Date.now()}`;
  const shardCount = Math.max(8, members);
  await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount });
  let handled = 0;
  const group = Array.from(
    { length: members },
    (_, i) =>
      new CoordinatedMember(client, {
        streamPrefix,
        consumerGroup: 'bench',
        memberId: `c${i}`,
        telemetry: false,
        handler: () => void (handled += 1),
      }),
  );
  for (const member of group) member.on('error', () => undefined);
  try {
    await Promise.all(group.map((m) => m.start()));
    await until(() => group.every((m) => m.ownedShards().length > 0), 120_000);
    const total = shardCount * 4;
    await new StreamProducer(client, { streamPrefix, telemetry: false }).sendBatch(
      Array.from({ length: total }, (_, i) => ({ key: `k${i}`, payload: i })),
    );
    await until(() => handled >= total, 60_000);
    // ioredis opens short-lived connections to refresh its slot tables (\`refresher\`): gone by now.
    await new Promise((resolve) => setTimeout(resolve, 2000));
    const count: ConnectionCount = { members, command: 0, subscriber: 0, total: 0 };
    for (const node of await cluster.nodes()) {
      const admin = new Redis({ host: '127.0.0.1', port: node.port });
      try {
        for (const line of String(await admin.client('LIST')).split('\n')) {
          const name = /\bname=(\S*)/.exec(line)?.[1] ?? '';
          if (!name.endsWith(connectionName)) continue;
          count.total += 1;
          if (name.startsWith('ioredis-cluster(ssubscriber)')) count.subscriber += 1;
          else count.command += 1;
        }
      } finally {
        admin.disconnect();
      }
    }
    return count;
  } finally {
    await Promise.all(group.map((m) => m.stop().catch(() => undefined)));
    client.disconnect();
  }
}

/** Commands per second the servers at `ports` answer while one member owns 64 idle shards. */
async function idleLoad(client: Redis | Cluster, streamPrefix: string, ports: number[], seconds: number): Promise<number> {
  await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: SHARDS });
  const member = new CoordinatedMember(client, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: SHARDS,
    telemetry: false,
    handler: () => undefined,
  });
  member.on('error', () => undefined);
  await member.start();
  await until(() => member.ownedShards().length === SHARDS, 30_000);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const before = await resetStats(ports);
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const after = await deltas(before);
  await member.stop();
  return after.reduce((n, x) => n + x.calls, 0) / seconds;
}

function table(rows: (string | number)[][]): string {
  const [head, ...body] = rows;
  return [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...body.map((r) => `| ${r.join(' | ')} |`)].join('\n');
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** Produces and drains one stream `streamPrefix` and reports each master's share of the commands. */
async function loadSection(
  cluster: RedisCluster,
  client: Cluster,
  label: string,
  streamPrefix: string,
  masters: number[],
): Promise<{ rows: (string | number)[][]; spreadPct: number }> {
  const before = await resetStats(masters);
  await produceAndDrain(client, streamPrefix);
  const after = await deltas(before);
  const mean = after.reduce((n, s) => n + s.calls, 0) / after.length;
  const spreadPct = (100 * (Math.max(...after.map((s) => s.calls)) - Math.min(...after.map((s) => s.calls)))) / mean;
  const runShards = await shardsPerMaster(cluster, streamPrefix);
  const rows: (string | number)[][] = [['master', 'shards', 'commands', 'vs mean', 'Redis CPU s']];
  for (const s of after)
    rows.push([
      `:${s.port}`,
      runShards.get(s.port)!.length,
      fmt(s.calls),
      `${s.calls >= mean ? '+' : ''}${fmt((100 * (s.calls - mean)) / mean, 1)} %`,
      fmt(s.cpu, 2),
    ]);
  progress(`  ${label}: spread ${fmt(spreadPct, 1)} %`);
  return { rows, spreadPct };
}

async function main(): Promise<void> {
  const out: string[] = [];
  const cluster = await RedisCluster.start();
  const client = new Cluster(cluster.startupNodes);
  client.on('error', () => undefined);
  try {
    const masters = (await cluster.nodes()).filter((n) => n.role === 'master').map((n) => n.port);
    const replicas = (await cluster.nodes()).filter((n) => n.role === 'replica').map((n) => n.port);
    out.push(
      `Machine: ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB; Node ${process.version}; ` +
        `redis-server ${(await client.info('server')).match(/redis_version:(\S+)/)?.[1]} (3 masters + 3 replicas on this machine, no persistence); ` +
        `ioredis ${(require('ioredis/package.json') as { version: string }).version}. ${fmt(ENTRIES)} entries per run, ${SHARDS} shards, batches of ${BATCH}, one member (runtimeMaxConcurrency ${SHARDS}, no-op handler). Date ${new Date().toISOString().slice(0, 10)}.`,
    );

    const sections = new Set((process.env.BENCH_CLUSTER_SECTIONS ?? '1,2,3,5,6').split(','));
    // 1. Per-master load: as the slots fall, then balanced.
    if (sections.has('1')) {
      progress('1. per-master load, 64 shards');
      const asHashed = await loadSection(cluster, client, 'as hashed', 'load-a', masters);
      const moved = await balanceShards(cluster, 'load-b');
      progress(`  moved ${moved} shard slot(s) to balance`);
      const balanced = await loadSection(cluster, client, 'balanced', 'load-b', masters);
      out.push(
        '### 1. Command load per master, 64 shards',
        '',
        `As the shards' hash tags fall on the slots (spread max - min: ${fmt(asHashed.spreadPct, 1)} % of the mean):`,
        '',
        table(asHashed.rows),
        '',
        `After moving ${moved} shard slot(s) so that each master serves 21 or 22 shards (spread ${fmt(balanced.spreadPct, 1)} % of the mean):`,
        '',
        table(balanced.rows),
        '',
      );
    }

    // 2. CPU per entry, cluster vs single node.
    if (sections.has('2')) {
      progress('2. Redis CPU per entry');
      const single = await RedisServer.start();
      const singleClient = new Redis(single.url);
      let singleCpuUs = 0;
      let singleRate = 0;
      try {
        const before = await resetStats([single.port]);
        singleRate = (await produceAndDrain(singleClient, 'cpu-single')).drainRate;
        const [after] = await deltas(before);
        singleCpuUs = (after.cpu * 1e6) / ENTRIES;
      } finally {
        singleClient.disconnect();
        await single.stop();
      }
      const beforeAll = await resetStats([...masters, ...replicas]);
      const clusterRun = await produceAndDrain(client, 'cpu-cluster');
      const afterAll = await deltas(beforeAll);
      const masterCpu = afterAll.filter((s) => masters.includes(s.port)).reduce((n, s) => n + s.cpu, 0);
      const replicaCpu = afterAll.filter((s) => replicas.includes(s.port)).reduce((n, s) => n + s.cpu, 0);
      out.push(
        '### 2. Redis CPU per entry (produce + drain), cluster vs single node',
        '',
        table([
          ['setup', 'Redis CPU per entry (masters)', 'replicas', 'drain entries/s'],
          ['single node', `${fmt(singleCpuUs, 1)} µs`, '—', fmt(singleRate)],
          [
            'cluster, 3 masters',
            `${fmt((masterCpu * 1e6) / ENTRIES, 1)} µs`,
            `${fmt((replicaCpu * 1e6) / ENTRIES, 1)} µs`,
            fmt(clusterRun.drainRate),
          ],
        ]),
        '',
      );

      // 4. Per master.
      const perMasterCpuUs = (masterCpu * 1e6) / ENTRIES;
      out.push(
        '### 4. Throughput per master, and N masters',
        '',
        `One entry costs the masters ${fmt(perMasterCpuUs, 1)} µs of Redis CPU in all (produce + drain), so one master core, ` +
          `saturated, carries about 1 s / ${fmt(perMasterCpuUs, 1)} µs ≈ ${fmt(1e6 / perMasterCpuUs)} entries/s of its shards (each entry touches only its own shard's master); ` +
          `N balanced masters about N × ${fmt(1e6 / perMasterCpuUs)} entries/s, as long as clients keep up (here the single member process drained ${fmt(clusterRun.drainRate)} entries/s: the client, not Redis, was the limit).`,
        '',
      );
    }

    // 3. WAIT.
    if (sections.has('3')) {
      progress('3. WAIT-based durability');
      const wait: ReplicaWait = { replicas: 1, timeoutMs: 1000 };
      const latencies = async (streamPrefix: string, waitForReplicas?: ReplicaWait) => {
        await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: SHARDS });
        const producer = new StreamProducer(client, { streamPrefix, waitForReplicas, telemetry: false });
        const samples: number[] = [];
        for (let i = 0; i < 2000; i++) {
          const t = performance.now();
          await producer.send({ key: `k${i}`, payload: { i } });
          samples.push(performance.now() - t);
        }
        return samples;
      };
      const plain = await latencies('wait-off');
      const waited = await latencies('wait-on', wait);
      const off = await produceAndDrain(client, 'wait-off-rate');
      const on = await produceAndDrain(client, 'wait-on-rate', { waitForReplicas: wait, ackWaitForReplicas: wait });
      out.push(
        '### 3. Cost of WAIT-based durability (cluster, WAIT 1 replica)',
        '',
        table([
          ['', 'without WAIT', 'with WAIT 1'],
          ['one `send` at a time: p50', `${fmt(percentile(plain, 50), 2)} ms`, `${fmt(percentile(waited, 50), 2)} ms`],
          ['one `send` at a time: p99', `${fmt(percentile(plain, 99), 2)} ms`, `${fmt(percentile(waited, 99), 2)} ms`],
          ['`sendBatch` of 100, 8 in flight: entries/s', fmt(off.produceRate), fmt(on.produceRate)],
          ['drain with one member (`ackWaitForReplicas` for WAIT): entries/s', fmt(off.drainRate), fmt(on.drainRate)],
        ]),
        '',
      );
    }

    // 5. Latency and idle load.
    if (sections.has('5')) {
      progress('5. latency and idle load');
      const seconds = 8;
      const onCluster = await latency(client, 'latency-cluster', 1000, seconds);
      const clusterIdle = await idleLoad(client, 'idle-cluster', masters, 5);
      const single = await RedisServer.start();
      const singleClient = new Redis(single.url);
      try {
        const onSingle = await latency(singleClient, 'latency-single', 1000, seconds);
        const singleIdle = await idleLoad(singleClient, 'idle-single', [single.port], 5);
        out.push(
          '### 5. Latency at 1,000 entries/s, and an idle member, 64 shards',
          '',
          "Send to handler start, producer in the member's process (its event-loop delay included, as in benchmarks.md's latency scenario); idle: commands/s the servers answer while one member owns 64 shards and nothing is sent (heartbeats included).",
          '',
          table([
            ['setup', 'p50', 'p99', 'idle member: commands/s'],
            ['single node (one blocking read)', `${fmt(onSingle.p50, 2)} ms`, `${fmt(onSingle.p99, 2)} ms`, fmt(singleIdle)],
            [
              'cluster (per-shard reads woken by writes, a shard read to its end polled every 500 ms)',
              `${fmt(onCluster.p50, 2)} ms`,
              `${fmt(onCluster.p99, 2)} ms`,
              fmt(clusterIdle),
            ],
            [
              'cluster: the wake-up heard (send to SPUBLISH delivered, before the read)',
              `${fmt(onCluster.wake?.p50 ?? NaN, 2)} ms`,
              `${fmt(onCluster.wake?.p99 ?? NaN, 2)} ms`,
              '—',
            ],
          ]),
          '',
        );
      } finally {
        singleClient.disconnect();
        await single.stop();
      }
    }

    // 6. Connections per process.
    if (sections.has('6')) {
      progress('6. connections per process');
      const counts: ConnectionCount[] = [];
      for (const members of [1, 8, 64]) {
        counts.push(await connectionsFor(cluster, members));
        progress(`  ${members} member(s): ${counts[counts.length - 1].total}`);
      }
      out.push(
        '### 6. Connections per process, members made from one Cluster client',
        '',
        `CLIENT LIST on all ${masters.length + replicas.length} nodes (${masters.length} masters, ${replicas.length} replicas), 2 s after every member owns a shard and the entries sent were handled; a stream of max(8, members) shards. Load-independent.`,
        '',
        table([
          [
            'members',
            'connections',
            'commands and reads',
            'wake-up subscribers',
            `before the shared read connection (${BEFORE_READ_HUB.commit})`,
          ],
          ...counts.map((c) => [c.members, c.total, c.command, c.subscriber, BEFORE_READ_HUB.connections.get(c.members) ?? '—']),
        ]),
        '',
      );
    }
  } finally {
    client.disconnect();
    await cluster.stop();
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

runCli(main);
