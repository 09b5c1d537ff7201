import { ensureScripts, pipelineScript, type RedisClient } from '../redis/scripts';
import type { KeyBuilder } from '../redis/keys';
import { findGroupInfo, isNoSuchKey, parseShardCsv } from '../redis/responses';
import type { ChainableCommander } from 'ioredis';
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
        pipelineShardProbes(pipeline, {
          stream,
          schedule: drained ? keys.shardSchedule(streamPrefix, cutover.wait[i]) : null,
          deferred: drained ? keys.shardDeferred(streamPrefix, cutover.wait[i], consumerGroup) : null,
          consumerGroup,
          lastDelivered: groups[i].lastDelivered,
          pending: groups[i].pending > 0,
          end: end(cutover.wait[i]),
        });
      },
    })),
  );
  const waitingFor: CutoverWait[] = [];
  cutover.wait.forEach((shardIndex, i) => {
    const result = probeResults[i];
    if ('error' in result) throw result.error;
    const { undelivered, pending, scheduled } = readShardProbes(result.replies, drained);
    if (undelivered || pending || scheduled)
      waitingFor.push(scheduled ? { shardIndex, undelivered, pending, scheduled } : { shardIndex, undelivered, pending });
  });
  const graceLeftMs = Math.max(0, cutover.until + 1 - now);
  return { ready: graceLeftMs === 0 && waitingFor.length === 0, graceLeftMs, waitingFor };
}

/** What one shard's cutover probes read (pipelineShardProbes). */
export interface ShardProbe {
  stream: string;
  /** The shard's schedule and the group's deferred schedule on it: null unless the cutover waits for a drain. */
  schedule: string | null;
  deferred: string | null;
  consumerGroup: string;
  /** The group's last-delivered id, read before (XINFO GROUPS). */
  lastDelivered: string;
  /** Whether the group had pending entries then: if not, XPENDING is not asked. */
  pending: boolean;
  /** The last id the cutover waits for ('+' for a drain). */
  end: string;
}

/**
 * Queues one shard's probes, in the order an entry moves between the places they look at, so that
 * an entry moved by another client while they run is seen by a later probe (SPEC 10.5: the probes
 * are separate commands, and the shard's owner runs releaseDue-8.lua and deferFenced-5.lua and
 * reads between them). An entry moves: pending -> deferred (deferFenced-5.lua and parkFenced-5.lua
 * ack and schedule it), pending -> stream (parkFenced-5.lua appends it again, acked, with a new id
 * past any last-delivered id), deferred -> stream and schedule -> stream (releaseDue-8.lua, with a
 * new id, past any last-delivered id), stream -> pending (a read). So: XPENDING first (an entry deferred after it
 * is in the deferred schedule, or released from it into the stream, when those are read), then the
 * deferred schedule, then the schedule (an entry released after either is in the stream when it is
 * read), the stream last. The stream probe uses the last-delivered id read before all of these, so
 * it also sees every entry released or delivered since. Asked the other way round (the stream
 * first), an entry released between the stream probe and its schedule's was in neither, and a
 * shrink completed with it unread on a removed shard.
 */
export function pipelineShardProbes(pipeline: ChainableCommander, probe: ShardProbe): void {
  if (probe.pending) pipeline.xpending(probe.stream, probe.consumerGroup, '-', probe.end, 1);
  else pipeline.echo('');
  if (probe.deferred !== null) pipeline.zcard(probe.deferred);
  if (probe.schedule !== null) pipeline.zcard(probe.schedule);
  pipeline.xrange(probe.stream, `(${probe.lastDelivered}`, probe.end, 'COUNT', 1);
}

/** The replies of pipelineShardProbes, in its order: what the shard still holds. */
export function readShardProbes(
  replies: [Error | null, unknown][],
  drained: boolean,
): { undelivered: boolean; pending: boolean; scheduled: boolean } {
  const values = replies.map(([error, reply]) => {
    if (error) throw error;
    return reply;
  });
  const pendingReply = values[0];
  const scheduled = drained && Number(values[1]) + Number(values[2]) > 0;
  return {
    undelivered: (values[values.length - 1] as unknown[]).length > 0,
    pending: Array.isArray(pendingReply) && pendingReply.length > 0,
    scheduled,
  };
}
