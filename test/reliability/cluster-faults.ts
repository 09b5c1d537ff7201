/**
 * The fault kinds of a Redis Cluster (docs/reliability-cluster.md), for faults.ts: a master failing over to its replica,
 * and a slot moving between masters while members run. Each picks, by the seed, a shard stream's
 * slot or now and then the coordinator's (the stream prefix's hash tag: heartbeats, commits and
 * resizes).
 */
import type { ClusterNodeInfo } from '@redis-stream-coordinator/core/testing';
import type { Fault } from './checker';
import type { ChaosHarness } from './harness';

const wallNow = () => performance.timeOrigin + performance.now();

/** The slot of a key, asked of the harness's own cluster client. */
async function slotOf(h: ChaosHarness, key: string): Promise<number> {
  return Number(await h.redis.cluster('KEYSLOT', key));
}

function servedBy(nodes: ClusterNodeInfo[], slot: number): ClusterNodeInfo {
  const master = nodes.find((n) => n.role === 'master' && !n.failed && n.slots.some(([a, b]) => slot >= a && slot <= b));
  if (!master) throw new Error(`no live master serves slot ${slot}`);
  return master;
}

/** A shard stream's key or, one time in `coordinatorOdds`, the coordinator's, chosen by the seed. */
async function pickKey(h: ChaosHarness, coordinatorOdds: number): Promise<{ key: string; what: string }> {
  if (h.random() < 1 / coordinatorOdds) return { key: h.admin.keys.streamMeta(h.streamPrefix), what: "the coordinator's slot" };
  const shardCount = (await h.admin.describeStream(h.streamPrefix))!.shardCount;
  const shard = Math.floor(h.random() * shardCount);
  return { key: h.admin.keys.shardStream(h.streamPrefix, shard), what: `shard ${shard}'s slot` };
}

/**
 * `SIGKILL` of the master serving the chosen slot; its replica takes over (cluster-node-timeout,
 * then an election), then the old master restarts and rejoins as the new master's replica. The
 * fault's `shards` are every shard that master served (all of them when it served the coordinator's
 * keys too: every member's heartbeats failed over with it). Lifted once the old master is back: until
 * then the promoted one has no replica, and every send and ack waiting for one fails visibly.
 */
export async function failover(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const cluster = h.cluster;
  const { key, what } = await pickKey(h, 3);
  const slot = await slotOf(h, key);
  const nodes = await cluster.nodes();
  const master = servedBy(nodes, slot);
  const coordinatorToo = servedBy(nodes, await slotOf(h, h.admin.keys.streamMeta(h.streamPrefix))).id === master.id;
  const shards: number[] = [];
  for (let shard = 0; shard < h.maxShards; shard++) {
    if (coordinatorToo || servedBy(nodes, await slotOf(h, h.admin.keys.shardStream(h.streamPrefix, shard))).id === master.id)
      shards.push(shard);
  }
  fault.shards = shards;
  // Without waitForReplicas, what the old master confirmed just before it died may be gone.
  fault.unreplicated = h.target.replicaWait === undefined;
  // Every read and ack of those shards fails until the replica has taken over: no member's fault.
  const excused = h.excusedUntil;
  h.excuse(undefined, 30_000);
  fault.at = wallNow();
  const killed = performance.now();
  const port = await cluster.failMaster(slot);
  const tookOver = performance.now() - killed;
  await cluster.restartNode(port);
  fault.detail = `${what} (port ${port}, shards [${shards.join(',')}]${coordinatorToo ? ' and the coordinator' : ''}): replica took over after ${Math.round(tookOver)} ms, old master back as a replica after ${Math.round(performance.now() - killed)} ms`;
  // Excused for a session more, not for the rest of the 30 s taken out for the fault itself.
  h.excusedUntil = Math.max(excused, performance.now() + h.sessionTimeoutMs);
  return { liftedAt: performance.now() };
}

/**
 * Moves the chosen slot to another master the way `redis-cli --cluster reshard` does, one key at a
 * time with 50 ms between keys: clients meet the slot half-moved (ASK, and TRYAGAIN for a script
 * whose keys are split), then MOVED. Nothing may be lost, redelivered or stall: MIGRATE moves a
 * stream whole, with its consumer groups and pending entries.
 */
export async function slotMove(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const cluster = h.cluster;
  const { key, what } = await pickKey(h, 4);
  const slot = await slotOf(h, key);
  const nodes = await cluster.nodes();
  const from = servedBy(nodes, slot);
  const others = nodes.filter((n) => n.role === 'master' && !n.failed && n.id !== from.id);
  const to = others[Math.floor(h.random() * others.length)];
  // Scripts whose keys are split between the nodes are refused (TRYAGAIN) and retried meanwhile.
  const excused = h.excusedUntil;
  h.excuse(undefined, 30_000);
  fault.at = wallNow();
  const started = performance.now();
  await cluster.migrateSlot(slot, to.port, { keysPerMigrate: 1, pauseMs: 50 });
  fault.detail = `${what} ${slot}: port ${from.port} -> ${to.port} in ${Math.round(performance.now() - started)} ms`;
  h.excusedUntil = Math.max(excused, performance.now() + h.sessionTimeoutMs);
  return { liftedAt: performance.now() };
}
