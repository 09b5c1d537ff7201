import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { CoordinatedMember, CoordinatorAdmin, KeyBuilder, StreamProducer } from '@redis-stream-coordinator/core';
import { ClusterReadHub } from '../../packages/core/src/redis/read-hubs/cluster-read-hub';
import { ShardWakeHub } from '../../packages/core/src/redis/read-hubs/shard-wake-hub';
import { type AckBatch, ShardClient } from '../../packages/core/src/redis/shard-client';
import { HandlerRecorder, type KeyedPayload } from '../support/handler-recorder';
import { pollUntil } from '../support/poll';
import { uniqueName } from '../support/vitest-redis';
import { useRedisCluster } from '../support/vitest-cluster';

// On a Redis Cluster (docs/cluster.md) a process reads through O(nodes) connections whatever its member
// count, and acknowledges the shards of one node in one round trip (one pipeline per node).
const redis = useRedisCluster();
const keys = new KeyBuilder();

/** The process's connections on every node, counted by the connection name its client gave them. */
async function connectionsNamed(name: string): Promise<number> {
  let count = 0;
  for (const server of redis.cluster.servers) {
    const node = new Redis(server.port, { lazyConnect: true });
    const list = String(await node.client('LIST').finally(() => node.disconnect()));
    count += list.split('\n').filter((line) => (/\bname=(\S*)/.exec(line)?.[1] ?? '').endsWith(name)).length;
  }
  return count;
}

/** Calls of the given commands on a node since its last CONFIG RESETSTAT. */
async function calls(port: number, commands: string[]): Promise<number> {
  const node = new Redis(port, { lazyConnect: true });
  const stats = await node.info('commandstats').finally(() => node.disconnect());
  return commands.reduce((n, command) => n + Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats)?.[1] ?? 0), 0);
}

async function onPort<R>(port: number, run: (node: Redis) => Promise<R>): Promise<R> {
  const node = new Redis(port, { lazyConnect: true });
  return run(node).finally(() => node.disconnect());
}

describe('connections and round trips on a Redis Cluster', () => {
  it('a process keeps a bounded number of connections per node, for 8 and for 64 members made from one client', async () => {
    const nodes = redis.cluster.servers.length;
    for (const members of [8, 64]) {
      const name = uniqueName(`conns${members}`);
      const client = redis.client({ redisOptions: { connectionName: name, maxRetriesPerRequest: 20 } });
      const streamPrefix = uniqueName('cluster-conns');
      await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: members });
      let handled = 0;
      const group = Array.from(
        { length: members },
        (_, i) =>
          new CoordinatedMember(client, {
            streamPrefix,
            consumerGroup: 'group',
            memberId: `m${i}`,
            coordinator: { heartbeatIntervalMs: 200 },
            handler: () => void (handled += 1),
          }),
      );
      for (const member of group) member.on('error', () => undefined);
      try {
        await Promise.all(group.map((m) => m.start()));
        await pollUntil('every member owns a shard', async () => group.every((m) => m.ownedShards().length > 0), { timeoutMs: 30_000 });
        await new StreamProducer(client, { streamPrefix }).sendBatch(
          Array.from({ length: members * 2 }, (_, i) => ({ key: `k${i}`, payload: i })),
        );
        await pollUntil('every entry handled', async () => handled === members * 2, { timeoutMs: 20_000 });
        // The process's three Cluster clients (commands, the shared reads, the wake-ups' slot
        // table) may each hold one connection per node, the sharded subscribers one per master,
        // and ioredis' short-lived slot-table refreshers come and go: at most 5 per node in all,
        // whatever the member count. With a read connection per member (before ClusterReadHub):
        // 44 for 8 members and 318 for 64 (docs/benchmarks-cluster.md).
        const count = await pollUntil(`at most ${5 * nodes} connections`, async () => {
          const n = await connectionsNamed(name);
          return n <= 5 * nodes && n;
        });
        expect(count).toBeGreaterThan(0);
      } finally {
        await Promise.all(group.map((m) => m.stop()));
      }
      await pollUntil('the shared read connection closed with the last member', async () => !ClusterReadHub.for(client).isOpen);
    }
  });

  it("acknowledges the shards one node serves in one write and one WAIT, each shard's result its own; a moved or moving slot's batch is sent again alone", async () => {
    const client = redis.client();
    const streamPrefix = uniqueName('cluster-acks');
    const shardCount = 12;
    await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount });
    const wait = { replicas: 1, timeoutMs: 2000 };
    const owner = new ShardClient(client, keys, streamPrefix, 'group', 'owner', { ackWait: wait, ackClient: client });
    const shards = Array.from({ length: shardCount }, (_, i) => i);
    for (const shard of shards) expect((await owner.claimShard(shard, 1)).claimed).toBe(true);
    const masterOf = async (shard: number) =>
      (await redis.cluster.masterOf(await redis.cluster.slotOf(keys.shardStream(streamPrefix, shard)))).port;
    const byMaster = new Map<number, number[]>();
    for (const shard of shards) {
      const port = await masterOf(shard);
      byMaster.set(port, [...(byMaster.get(port) ?? []), shard]);
    }
    // The shards' hash tags fall on all three masters, two or more on each (fixed by the names).
    expect(byMaster.size).toBe(3);
    expect([...byMaster.values()].every((list) => list.length >= 2)).toBe(true);

    const hub = ClusterReadHub.for(client);
    const stopReading = hub.register({});
    try {
      /** Writes `n` entries on every shard and reads them through the hub: pending under the owner. */
      const deliver = async (n: number): Promise<AckBatch[]> => {
        for (const shard of shards) for (let i = 0; i < n; i++) await client.xadd(keys.shardStream(streamPrefix, shard), '*', 'p', 'x');
        const read = await owner.readEach(
          hub,
          shards,
          shards.map(() => '0-0'),
          100,
          10_000,
        );
        expect(read.failed).toEqual(new Map());
        return shards.map((shard) => ({ shardIndex: shard, grantEpoch: 1, ids: (read.entries.get(shard) ?? []).map((e) => e.id) }));
      };
      const batches = await deliver(2);
      expect(batches.every((b) => b.ids.length === 2)).toBe(true);

      // A newer owner takes one shard of a master that serves others too: its acks are refused, theirs are not.
      const [refusedPort, refusedShards] = [...byMaster].find(([, list]) => list.length >= 2)!;
      const refused = refusedShards[0];
      expect((await new ShardClient(client, keys, streamPrefix, 'group', 'newer').claimShard(refused, 2)).claimed).toBe(true);

      const writes = new Map<number, number>();
      for (const node of client.nodes('master')) {
        const port = Number(node.options.port);
        const stream = node.stream as { write: (...args: unknown[]) => boolean };
        const write = stream.write.bind(stream);
        stream.write = (...args: unknown[]) => {
          writes.set(port, (writes.get(port) ?? 0) + 1);
          return write(...args);
        };
      }
      for (const port of byMaster.keys()) await onPort(port, (node) => node.config('RESETSTAT'));
      const replies = await owner.ackMany(batches);
      expect(replies).toEqual(shards.map((shard) => ({ acked: shard === refused ? -1 : 2 })));
      for (const [port, list] of byMaster) {
        // One write per node (the node's scripts and its WAIT together), one script call per shard, one WAIT.
        // Before (one fenced call per shard): as many writes and WAITs as the node has shards.
        expect(writes.get(port), `writes to :${port}`).toBe(1);
        expect(await calls(port, ['evalsha', 'eval']), `scripts on :${port}`).toBe(list.length);
        expect(await calls(port, ['wait']), `WAITs on :${port}`).toBe(1);
      }
      expect(refusedPort).toBeGreaterThan(0);

      // One shard's slot moves to another master, another's is left half-moved (its keys moved,
      // MIGRATING/IMPORTING still set); the clients' slot tables do not know: their node pipelines
      // get MOVED and ASK for those shards only, which are sent again alone and land.
      const others = refusedShards.filter((shard) => shard !== refused);
      const [movedShard, askedShard] = [others[0], [...byMaster.values()].find((list) => !list.includes(refused))![0]];
      const movedSlot = await redis.cluster.slotOf(keys.shardStream(streamPrefix, movedShard));
      const movedTo = [...byMaster.keys()].find((port) => port !== refusedPort)!;
      await redis.cluster.migrateSlot(movedSlot, movedTo);
      const askedSlot = await redis.cluster.slotOf(keys.shardStream(streamPrefix, askedShard));
      const askedFrom = await masterOf(askedShard);
      const askedTo = [...byMaster.keys()].find((port) => port !== askedFrom)!;
      const nodes = await redis.cluster.nodes();
      const idOf = (port: number) => nodes.find((n) => n.port === port)!.id;
      await onPort(askedTo, (node) => node.cluster('SETSLOT', askedSlot, 'IMPORTING', idOf(askedFrom)));
      await onPort(askedFrom, async (node) => {
        await node.cluster('SETSLOT', askedSlot, 'MIGRATING', idOf(askedTo));
        const moving = (await node.cluster('GETKEYSINSLOT', askedSlot, 100)) as string[];
        await node.migrate('127.0.0.1', askedTo, '', 0, 5000, 'REPLACE', 'KEYS', ...moving);
      });
      const errorstats = async (kind: string) => {
        let n = 0;
        for (const server of redis.cluster.servers)
          n += await onPort(server.port, async (node) =>
            Number(new RegExp(`errorstat_${kind}:count=(\\d+)`).exec(await node.info('errorstats'))?.[1] ?? 0),
          );
        return n;
      };
      const [movedBefore, askBefore] = [await errorstats('MOVED'), await errorstats('ASK')];
      let again: Awaited<ReturnType<ShardClient['ackMany']>>;
      try {
        again = await owner.ackMany(await deliver(1));
      } finally {
        await redis.cluster.migrateSlot(askedSlot, askedTo);
      }
      // The WAIT of a batch that met ASK ran where the batch went (after ASK, without its tail first):
      // no shard says its acks are not replicated.
      expect(again).toEqual(shards.map((shard) => ({ acked: shard === refused ? -1 : 1 })));
      expect(await errorstats('MOVED')).toBeGreaterThan(movedBefore);
      expect(await errorstats('ASK')).toBeGreaterThan(askBefore);
      // Nothing of the owner's is left pending on the moved and the moving shard.
      for (const [shard, port] of [
        [movedShard, movedTo],
        [askedShard, askedTo],
      ]) {
        const pending = await onPort(port, (node) => node.xpending(keys.shardStream(streamPrefix, shard), 'group'));
        expect((pending as [number])[0], `pending on shard ${shard}`).toBe(0);
      }
    } finally {
      stopReading();
    }
  });

  it('a wake-up subscription follows its slot through 18 moves, each back on the new master', async () => {
    const client = redis.client();
    const channels = [uniqueName('{wake-a}'), uniqueName('{wake-b}'), uniqueName('{wake-c}')];
    // A subscription made before the client knows the cluster's slots may fail: listened again, as the reader does.
    const listen = (channel: string) =>
      pollUntil(`${channel} subscribed`, async () => {
        const listening = ShardWakeHub.for(client).listen(channel, () => undefined);
        if (await listening.subscribed) return listening;
        listening.stop();
        return false;
      });
    const listening = await Promise.all(channels.map(listen));
    try {
      for (let round = 0; round < 6; round++) {
        for (const channel of channels) {
          const slot = await redis.cluster.slotOf(channel);
          const from = await redis.cluster.masterOf(slot);
          const to = (await redis.cluster.nodes()).find((n) => n.role === 'master' && !n.failed && n.id !== from.id)!;
          await redis.cluster.migrateSlot(slot, to.port);
          // Without the subscriber's periodic slot refresh, 4 moves in 45 left the channel
          // unsubscribed for good (ioredis fetched a slot table from a master not told yet).
          await pollUntil(
            `${channel} subscribed on :${to.port} after move ${round + 1}`,
            async () => Number(((await onPort(to.port, (node) => node.pubsub('SHARDNUMSUB', channel))) as [string, number])[1]) === 1,
            { timeoutMs: 15_000 },
          );
        }
      }
    } finally {
      for (const l of listening) l.stop();
    }
  }, 120_000);

  it('a subscribed shard read to its end waits for the next write (its wake-up), not re-polled 2, 4, 8… ms after each entry', async () => {
    const client = redis.client();
    const streamPrefix = uniqueName('cluster-reads-per-entry');
    await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: 1 });
    let handled = 0;
    const member = new CoordinatedMember(client, {
      streamPrefix,
      consumerGroup: 'group',
      coordinator: { heartbeatIntervalMs: 200 },
      handler: () => void (handled += 1),
    });
    member.on('error', () => undefined);
    const port = (await redis.cluster.masterOf(await redis.cluster.slotOf(keys.shardStream(streamPrefix, 0)))).port;
    const channel = keys.shardWakeChannel(streamPrefix, 0);
    try {
      await member.start();
      await pollUntil(
        'the shard owned and its wake channel subscribed',
        async () =>
          member.ownedShards().length === 1 &&
          Number(((await onPort(port, (node) => node.pubsub('SHARDNUMSUB', channel))) as [string, number])[1]) === 1,
      );
      const producer = new StreamProducer(client, { streamPrefix });
      await producer.send({ key: 'warm', payload: 0 });
      await pollUntil('the warm-up handled', async () => handled === 1);
      await onPort(port, (node) => node.config('RESETSTAT'));
      const entries = 100;
      for (let i = 1; i <= entries; i++) {
        await producer.send({ key: `k${i}`, payload: i });
        await pollUntil(`entry ${i} handled`, async () => handled === i + 1, { intervalMs: 1 });
      }
      // One read per entry (its wake-up), plus at most a fallback poll every 500 ms. Before, a read
      // that found an entry was followed by one at once and then after 2, 4, 8… ms: 2 to 5 reads per
      // entry (5.2 per entry at 1,000 entries/s over 64 shards).
      // 100 here; 190 with the re-polls (seen with them put back).
      expect(await calls(port, ['xreadgroup'])).toBeLessThanOrEqual(entries * 1.2 + 10);
    } finally {
      await member.stop();
    }
  });

  it('members sharing the read connection lose and reorder nothing while two shard slots move (ASK, then MOVED) under them', async () => {
    const client = redis.client();
    const streamPrefix = uniqueName('cluster-shared-move');
    await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: 8 });
    const recorder = new HandlerRecorder();
    const group = ['a', 'b', 'c', 'd'].map((id) => {
      const member = new CoordinatedMember<KeyedPayload>(client, {
        streamPrefix,
        consumerGroup: 'group',
        memberId: id,
        coordinator: { heartbeatIntervalMs: 200 },
        sweepIntervalMs: 500,
        handler: recorder.handler(id),
      });
      member.on('error', () => undefined);
      return member;
    });
    try {
      await Promise.all(group.map((m) => m.start()));
      await pollUntil('every member owns shards', async () => group.every((m) => m.ownedShards().length > 0), { timeoutMs: 20_000 });
      const producer = new StreamProducer(client, { streamPrefix });
      let sent = 0;
      let moving = true;
      const sending = (async () => {
        for (let round = 1; moving; round++) {
          await producer.sendBatch(Array.from({ length: 16 }, (_, i) => ({ key: `k${i}`, payload: { seq: round } })));
          sent += 16;
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      })();
      await pollUntil('entries flowing', async () => recorder.runs.length > 50);
      for (const server of redis.cluster.servers) await onPort(server.port, (node) => node.config('RESETSTAT'));
      for (const shard of [0, 1]) {
        const slot = await redis.cluster.slotOf(keys.shardStream(streamPrefix, shard));
        const from = await redis.cluster.masterOf(slot);
        const to = (await redis.cluster.nodes()).find((n) => n.role === 'master' && !n.failed && n.id !== from.id)!;
        // One key at a time with a pause: the slot stays half-moved for a while (ASK), then MOVED.
        await redis.cluster.migrateSlot(slot, to.port, { keysPerMigrate: 1, pauseMs: 100 });
      }
      moving = false;
      await sending;
      // The shared read connection's node pipelines did meet the half-moved slots (ASK), and MOVED after.
      const redirections = { ASK: 0, MOVED: 0 };
      for (const server of redis.cluster.servers) {
        const stats = await onPort(server.port, (node) => node.info('errorstats'));
        for (const kind of ['ASK', 'MOVED'] as const)
          redirections[kind] += Number(new RegExp(`errorstat_${kind}:count=(\\d+)`).exec(stats)?.[1] ?? 0);
      }
      expect(redirections.ASK).toBeGreaterThan(0);
      expect(redirections.MOVED).toBeGreaterThan(0);
      await pollUntil('every sent entry handled', async () => recorder.distinctEntries() === sent, { timeoutMs: 20_000 });
      expect(recorder.orderViolations()).toEqual([]);
      // Still one shared read connection for the four.
      expect(ClusterReadHub.for(client).isOpen).toBe(true);
    } finally {
      await Promise.all(group.map((m) => m.stop()));
    }
  });

  it('the members of one Cluster client buffer no more than maxBufferedEntriesPerClient together (the cluster read hub keeps the budget)', async () => {
    const client = redis.client();
    const streamPrefix = uniqueName('cluster-budget');
    await new CoordinatorAdmin(client).createStream({ streamPrefix, shardCount: 8 });
    const recorder = new HandlerRecorder();
    let sampled = 0;
    const group: CoordinatedMember<KeyedPayload>[] = [];
    for (const id of ['a', 'b', 'c', 'd']) {
      const member = new CoordinatedMember<KeyedPayload>(client, {
        streamPrefix,
        consumerGroup: 'group',
        memberId: id,
        coordinator: { heartbeatIntervalMs: 200 },
        maxBufferedEntries: 100,
        maxBufferedEntriesPerClient: 20,
        batchSize: 10,
        handler: recorder.handler(id, async () => {
          sampled = Math.max(
            sampled,
            group.reduce((sum, m) => sum + m.stats().bufferedEntries, 0),
          );
          await new Promise((resolve) => setImmediate(resolve));
        }),
      });
      member.on('error', () => undefined);
      group.push(member);
    }
    try {
      await Promise.all(group.map((m) => m.start()));
      await pollUntil('every member owns two shards', async () => group.every((m) => m.ownedShards().length === 2), { timeoutMs: 20_000 });
      const sent = await new StreamProducer(client, { streamPrefix }).sendBatch(
        Array.from({ length: 800 }, (_, i) => ({ key: `k${i}`, payload: { seq: i } })),
      );
      await pollUntil('every entry handled', async () => recorder.distinctEntries() === sent.length, { timeoutMs: 30_000 });
      expect(group[0].stats().clientBuffer).toMatchObject({ cap: 20, members: 4, share: 5 });
      expect(sampled).toBeGreaterThan(0);
      expect(sampled).toBeLessThanOrEqual(20);
      expect(group[0].stats().clientBuffer.peakEntries).toBeLessThanOrEqual(20);
      expect(recorder.duplicates()).toEqual([]);
    } finally {
      await Promise.all(group.map((m) => m.stop()));
    }
  });
});
