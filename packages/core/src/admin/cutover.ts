import { ensureScripts, pipelineScript, type RedisClient } from '../redis/scripts';
import type { KeyBuilder } from '../redis/keys';
import { findGroupInfo, isNoSuchKey, parseShardCsv } from '../redis/responses';
import { execBySlot } from '../redis/connection/slot-pipelines';

/**
 * A group's pending cutover after `resizeShards` (docs/resharding.md), as stored in its metadata.
 * Times are Redis milliseconds; `until` is the cutover stream id's millisecond part.
 */
export interface Cutover {
  /** The stream's metadataVersion the resize produced. */
  version: number;
  from: number;
  to: number;
  ordered: boolean;
  resizedAt: number;
  /** Producers route with `to` shards from this time on (before it, with `from`). */
  switchAt: number;
  /** Entries with ids up to this time may still arrive with the old routing (switchAt + graceMs). */
  until: number;
  /** Shards the group must process before the cutover completes. */
  wait: number[];
  /** 'until': processed up to `until` (growth); 'drained': nothing left at all (shrink). */
  waitUntil: 'until' | 'drained';
  /** Shards whose entries from `switchAt` on are held until completion (ordered shrink). */
  held: number[];
  /**
   * True for a step of a group created after ordered resizes (includes/group.lua createGroup): the
   * group walks the stream's resize history, one step per resize, processing every shard up to the
   * step's `switchAt` before it handles anything written after it. Such a step describes a past
   * resize, so it never rewrites routing markers.
   */
  replay: boolean;
  /**
   * A replayed growth's old shards (includes/replayCutovers.lua): a producer still on the old count
   * may have written a moved key to one of them at or past `switchAt` (before the resize's routing
   * markers were in place), so they are processed up to `until` and held only after it, while the
   * other shards are processed up to `switchAt - 1` and held from `switchAt`. Empty otherwise.
   */
  late: number[];
}

/** Up to which time (Redis ms, inclusive) a cutover waits for `shard` to be processed. */
export function processedUpTo(cutover: Cutover, shard: number): number {
  return cutover.replay && !cutover.late.includes(shard) ? cutover.switchAt - 1 : cutover.until;
}

/** The stream id from which a cutover holds `shard`'s entries (for a shard in `held`). */
export function heldFrom(cutover: Cutover, shard: number): string {
  return cutover.late.includes(shard) ? `${cutover.until + 1}-0` : `${cutover.switchAt}-0`;
}

export interface CutoverWait {
  shardIndex: number;
  /** Entries up to the cutover point not yet delivered to the group. */
  undelivered: boolean;
  /** Entries up to the cutover point delivered and not yet acknowledged. */
  pending: boolean;
  /**
   * A shrink only: entries in the removed shard's schedule or the group's deferred retries on it,
   * not released yet (docs/runtime.md, Delayed delivery): its drain waits for them, since a shard
   * that left the readable set has no owner to release them.
   */
  scheduled?: boolean;
}

export interface CutoverProgress {
  ready: boolean;
  /** Milliseconds (Redis time) until entries with the old routing can no longer arrive; 0 when past. */
  graceLeftMs: number;
  waitingFor: CutoverWait[];
}

const MAX_SEQUENCE = '18446744073709551615';

export function parseCutover(json: string | null | undefined): Cutover | null {
  if (!json) return null;
  const raw = JSON.parse(json) as Record<string, unknown>;
  return {
    version: Number(raw.version),
    from: Number(raw.from),
    to: Number(raw.to),
    ordered: raw.ordered === true,
    resizedAt: Number(raw.resizedAt),
    switchAt: Number(raw.switchAt),
    until: Number(raw.until),
    wait: parseShardCsv(raw.wait),
    waitUntil: raw.waitUntil === 'drained' ? 'drained' : 'until',
    held: parseShardCsv(raw.held),
    replay: raw.replay === true,
    late: parseShardCsv(raw.late),
  };
}

/**
 * The group's pending cutover (or null), and which life of the group it belongs to: its incarnation
 * (as the coordinator's answers carry it), or null when the group's keys are gone. One HMGET, same
 * slot as the rest of the group's metadata.
 */
export async function readGroupCutover(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
): Promise<{ cutover: Cutover | null; incarnation: string | null }> {
  const [raw, incarnation, groupEpoch] = await redis.hmget(
    keys.groupKey(streamPrefix, consumerGroup).groupMeta,
    'cutover',
    'incarnation',
    'groupEpoch',
  );
  // A group from before incarnations were kept answers '0' (includes/group.lua).
  return { cutover: parseCutover(raw), incarnation: groupEpoch === null ? null : (incarnation ?? '0') };
}

/**
 * Checks, on the shard streams, whether the group has done what the cutover waits for: for each
 * shard, nothing up to the cutover point left undelivered after the group's last-delivered id, and
 * nothing up to it still pending. Read-only; two round trips however many shards.
 */
export async function cutoverProgress(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
  cutover: Cutover,
): Promise<CutoverProgress> {
  const [seconds, micros] = (await redis.time()) as [number | string, number | string];
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const end = (shard: number) => (cutover.waitUntil === 'drained' ? '+' : `${processedUpTo(cutover, shard)}-${MAX_SEQUENCE}`);
  const streams = cutover.wait.map((shard) => keys.shardStream(streamPrefix, shard));

  // A shard's drain (or its processing up to `until`) means something only once no late write can
  // land on it: re-ensure the routing markers that refuse those (resizeShards wrote them, unless it
  // failed half way), in the same pipeline, before the streams are read.
  const markers = cutover.replay ? [] : cutover.wait;
  ensureScripts(redis);
  const routing = { version: cutover.version, count: cutover.to, previous: cutover.from, switchAt: cutover.switchAt };
  const marked = new Set(markers);
  // Per shard (one slot each): its marker, then its group info; one pipeline on a single Redis.
  const infoResults = await execBySlot(
    redis,
    cutover.wait.map((shard, i) => ({
      build(pipeline) {
        if (marked.has(shard)) {
          pipelineScript(
            pipeline,
            'ensureRouting',
            [keys.shardRouting(streamPrefix, shard)],
            [routing.version, routing.count, routing.previous, routing.switchAt],
          );
        }
        pipeline.xinfo('GROUPS', streams[i]);
      },
    })),
  );
  const groups = infoResults.map((result) => {
    if ('error' in result) throw result.error;
    const replies = result.replies;
    for (const [error] of replies.slice(0, -1)) if (error) throw error;
    const [error, reply] = replies[replies.length - 1];
    if (error && !isNoSuchKey(error)) throw error;
    // No stream: nothing to process. No group on it: the group never read it, all of it is undelivered.
    const found = error ? { lastDelivered: '0-0', pending: 0 } : findGroupInfo(reply, consumerGroup);
    return found ?? { lastDelivered: '0-0', pending: 0 };
  });

  // A shrink's drain counts the removed shard's schedules too: the stream's delayed entries and the
  // group's deferred retries are released into it by its owner, who has none once it is not readable.
  const drained = cutover.waitUntil === 'drained';
  const probeResults = await execBySlot(
    redis,
    streams.map((stream, i) => ({
      build(pipeline) {
        pipeline.xrange(stream, `(${groups[i].lastDelivered}`, end(cutover.wait[i]), 'COUNT', 1);
        if (groups[i].pending > 0) pipeline.xpending(stream, consumerGroup, '-', end(cutover.wait[i]), 1);
        else pipeline.echo('');
        if (drained) {
          pipeline.zcard(keys.shardSchedule(streamPrefix, cutover.wait[i]));
          pipeline.zcard(keys.shardDeferred(streamPrefix, cutover.wait[i], consumerGroup));
        }
      },
    })),
  );
  const probes = probeResults.flatMap((result) => {
    if ('error' in result) throw result.error;
    return result.replies.map(([error, reply]) => {
      if (error) throw error;
      return reply;
    });
  });
  const waitingFor: CutoverWait[] = [];
  const perShard = drained ? 4 : 2;
  cutover.wait.forEach((shardIndex, i) => {
    const at = perShard * i;
    const undelivered = (probes[at] as unknown[]).length > 0;
    const pendingReply = probes[at + 1];
    const pending = Array.isArray(pendingReply) && pendingReply.length > 0;
    const scheduled = drained && Number(probes[at + 2]) + Number(probes[at + 3]) > 0;
    if (undelivered || pending || scheduled)
      waitingFor.push(scheduled ? { shardIndex, undelivered, pending, scheduled } : { shardIndex, undelivered, pending });
  });
  const graceLeftMs = Math.max(0, cutover.until + 1 - now);
  return { ready: graceLeftMs === 0 && waitingFor.length === 0, graceLeftMs, waitingFor };
}
