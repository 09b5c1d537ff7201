/**
 * What the harness reads from Redis for the checker: entries pending at whom while the run goes on,
 * and at the end what every group has not acknowledged and every dead letter.
 */
import { compareStreamIds, type CoordinatorAdmin, type RedisClient, REPLAY_HEADER } from '@redis-stream-coordinator/core';
import { Cluster } from 'ioredis';
import { deferralOf } from '../../packages/core/src/protocol/entry-format';
import { findGroupInfo } from '../../packages/core/src/redis/responses';
import type { DeadLetter, PendingSample } from './checker';
import type { Produced, ReplayWrite } from './records';
import type { ChaosHarness } from './harness';

/**
 * What the reads at the end need of a run: its client, the stream, its groups and the most shards
 * the stream has had. The soak's harness is one; the model-based test's system is another.
 */
export interface StreamState {
  readonly redis: RedisClient;
  readonly admin: CoordinatorAdmin;
  readonly streamPrefix: string;
  readonly consumerGroup: string;
  readonly groups: string[];
  readonly maxShards: number;
}

/** Where a shard stream's retained entries begin (`inclusive`: that id is gone too). */
export interface RetainedFrom {
  id: string;
  inclusive: boolean;
}

/**
 * Where a shard stream's retained entries begin: its oldest entry (`inclusive` false: that one is
 * kept), or, in a stream a trim emptied, its last generated id (`inclusive` true: that one is gone
 * too). Undefined when there is no stream (deleted, or never written).
 */
export async function retainedFrom(s: StreamState, shard: number): Promise<RetainedFrom | undefined> {
  const key = s.admin.keys.shardStream(s.streamPrefix, shard);
  const [first] = await s.redis.xrange(key, '-', '+', 'COUNT', 1).catch(() => []);
  if (first) return { id: first[0], inclusive: false };
  const info = (await s.redis.xinfo('STREAM', key).catch(() => null)) as unknown[] | null;
  const at = info?.indexOf('last-generated-id') ?? -1;
  return info && at >= 0 ? { id: String(info[at + 1]), inclusive: true } : undefined;
}

/** The oldest id a shard stream still holds or may hold (what a reset can ask to read again), undefined without a stream. */
export function oldestKept(cut: RetainedFrom | undefined): string | undefined {
  if (!cut?.inclusive) return cut?.id;
  const [ms, seq] = cut.id.split('-');
  return `${ms}-${BigInt(seq) + 1n}`;
}

/**
 * "shard/id" of the `produced` entries gone from their shard stream now: below its oldest entry
 * (trimming removes from the oldest on), or, in a stream a trim emptied (every group had
 * acknowledged everything), up to its last generated id. Shards without a stream are not counted.
 */
export async function trimmedAway(s: StreamState, produced: Produced[]): Promise<Set<string>> {
  const below = new Map<number, RetainedFrom>();
  for (let shard = 0; shard < s.maxShards; shard++) {
    const cut = await retainedFrom(s, shard);
    if (cut) below.set(shard, cut);
  }
  const gone = new Set<string>();
  for (const p of produced) {
    const cut = below.get(p.shard);
    // A delayed entry's id is its schedule id: its stream entry is found by its runs (the checker).
    if (!cut || p.dueAt !== undefined) continue;
    const order = compareStreamIds(p.id, cut.id);
    if (order < 0 || (cut.inclusive && order === 0)) gone.add(`${p.shard}/${p.id}`);
  }
  return gone;
}

const wallNow = () => performance.timeOrigin + performance.now();

/**
 * Shards the group reads now, which a running member must own: readable, or draining after a shrink
 * (shards held back by an ordered cutover, or drained, have no owner). Descriptions from before
 * b3adce9 (SPEC 9.6) have no readability and list readable shards only.
 */
export function mustBeOwned(shard: object): boolean {
  const readability = (shard as { readability?: string }).readability;
  return readability === undefined || readability === 'readable' || readability === 'draining';
}

/**
 * One round of sampling: per group and shard, the entries pending for over a second and at whom,
 * with the shard's owner and whether that owner has any excuse (a fault on it or on Redis). The
 * checker finds stuck entries in these.
 */
export async function pendingSamples(h: ChaosHarness): Promise<PendingSample[]> {
  const samples: PendingSample[] = [];
  const t = wallNow();
  // A group waiting for an ordered cutover holds back entries it has read of the shards the
  // cutover gates (a group created mid-run can take a while to get there): not stuck.
  const cutoverPending = new Set(
    (await h.admin.cutoverStatus(h.streamPrefix)).filter((s) => s.cutover !== null).map((s) => s.consumerGroup),
  );
  for (const group of h.groups) {
    const d = await h.admin.describeGroup(h.streamPrefix, group);
    const shards = d.shards.filter(mustBeOwned);
    // One command per shard, not one pipeline: on a cluster the shards' streams sit on different
    // masters. A shard whose reply failed (a failover, a restart) is left out of this round.
    const replies = await Promise.all(
      shards.map((s) =>
        h.redis.xpending(h.admin.keys.shardStream(h.streamPrefix, s.shardIndex), group, 'IDLE', 1000, '-', '+', 100).catch(() => undefined),
      ),
    );
    const now = performance.now();
    shards.forEach((s, i) => {
      const list = replies[i];
      if (list === undefined) return;
      const owners = [...h.members.values()].filter((m) => m.memberId === s.owner && m.group === group);
      const ownerLive =
        owners.length === 1 && !owners[0].isolated && owners[0].excusedUntil < now && h.excusedUntil < now && !cutoverPending.has(group);
      const pending = (list as [string, string][]).map(([id, consumer]) => ({ id, consumer }));
      samples.push({ t, group, shard: s.shardIndex, owner: s.owner, ownerLive, pending });
    });
  }
  return samples;
}

/** "group/shard/id" of every entry a group has not acknowledged: pending, or after its last-delivered id. */
export async function unacknowledged(h: StreamState): Promise<Set<string>> {
  const outstanding = new Set<string>();
  for (let shard = 0; shard < h.maxShards; shard++) {
    const stream = h.admin.keys.shardStream(h.streamPrefix, shard);
    const info = await h.redis.xinfo('GROUPS', stream).catch(() => []);
    for (const group of h.groups) {
      const mine = findGroupInfo(info, group);
      for (const [id] of await h.redis.xrange(stream, `(${mine?.lastDelivered ?? '0-0'}`, '+')) outstanding.add(`${group}/${shard}/${id}`);
      if (mine) {
        for (const entry of (await h.redis.xpending(stream, group, '-', '+', 1_000_000)) as [string][])
          outstanding.add(`${group}/${shard}/${entry[0]}`);
      }
    }
  }
  return outstanding;
}

/** Every dead letter in Redis, of either layout: one stream per group, or one per shard and group. */
export async function readDeadLetters(h: StreamState): Promise<DeadLetter[]> {
  const letters: DeadLetter[] = [];
  // KEYS on every master of a cluster (each has the dead letters of the shards it serves).
  const nodes = h.redis instanceof Cluster ? h.redis.nodes('master') : [h.redis];
  // Under the harness's key prefix only (the transport kind's streams, transport-actors.ts, have one of
  // their own), and this stream's only: its keys carry its name in their hash tag (`{chaos}`, `{chaos:3}`).
  const found = (await Promise.all(nodes.map((node) => node.keys(`${h.admin.keys.keyPrefix}:*dead-letter*`)))).flat();
  const ours = found.filter((key) => key.includes(`{${h.streamPrefix}:`) || key.includes(`{${h.streamPrefix}}`));
  for (const key of ours) {
    if ((await h.redis.type(key)) !== 'stream') continue;
    const group = h.groups.find((g) => key.endsWith(`:${g}`) || key.endsWith(`:${g}}`)) ?? h.consumerGroup;
    for (const [streamId, fields] of await h.redis.xrange(key, '-', '+')) {
      const f = new Map<string, string>();
      for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i], fields[i + 1]);
      letters.push({
        group,
        ref: `${f.get('shardIndex')}/${streamId}`,
        shard: Number(f.get('shardIndex')),
        id: f.get('entryId') ?? '',
        member: f.get('memberId') ?? '',
        t: Number(streamId.split('-')[0]),
      });
    }
  }
  return letters;
}

/** Every entry in the shard streams now that replays a dead letter (its `rsc-replay-of` header). */
export async function replayWritesInStreams(h: StreamState): Promise<ReplayWrite[]> {
  const writes: ReplayWrite[] = [];
  for (let shard = 0; shard < h.maxShards; shard++) {
    const entries = await h.redis.xrange(h.admin.keys.shardStream(h.streamPrefix, shard), '-', '+').catch(() => []);
    for (const [id, fields] of entries) {
      // A deferring group's copy of a replay (released, parked, appended again) keeps its headers: no replay write.
      if (deferralOf(fields) !== undefined) continue;
      for (let i = 0; i + 1 < fields.length; i += 2) {
        if (fields[i] !== 'h' || !fields[i + 1].includes(REPLAY_HEADER.of)) continue;
        const headers = JSON.parse(fields[i + 1]) as Record<string, string>;
        const ref = headers[REPLAY_HEADER.of];
        if (ref !== undefined) writes.push({ group: headers[REPLAY_HEADER.group] ?? '', ref, shard, id });
      }
    }
  }
  return writes;
}
