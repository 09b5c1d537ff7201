import { ErrorCode } from '../protocol/error-codes';
import type { GroupDescription, MemberMetadata } from '../protocol/records';
import { execByNode } from '../redis/connection/slot-pipelines';
import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript } from '../redis/scripts';
import type { ShardPosition } from './shard-positions';

/** Where `resetOffsets` moves the group: the id it has been delivered up to from then on. */
export type OffsetTarget = 'earliest' | 'latest' | { datetime: Date | number } | { id: string };

export interface ResetOffsetsOptions {
  to: OffsetTarget;
  /** Only this shard. Default: every shard the group reads or still drains (a removed shard it drained is not moved, and refused here). */
  shardIndex?: number;
  /** Report the change; make none. Default false. */
  dryRun?: boolean;
  /** Reset even while members of the group are alive (they read from the new position on). Default false. */
  force?: boolean;
}

export interface ShardOffsetReset {
  shardIndex: number;
  /** The group's last-delivered id before (null: the group had not read the shard). */
  from: string | null;
  /** The last-delivered id after: delivery resumes with the first entry after it. */
  to: string;
  /** Entries still pending for the group there: a reset does not acknowledge them; their owner handles them. */
  pending: number;
}

export interface ResetOffsetsResult {
  streamPrefix: string;
  consumerGroup: string;
  dryRun: boolean;
  shards: ShardOffsetReset[];
}

/** The largest sequence number: `<ms>-<MAX_SEQ>` is the last id of a millisecond. */
const MAX_SEQ = '18446744073709551615';
const STREAM_ID = /^\d{1,20}(-\d{1,20})?$/;

/** Checks a target, naming what is wrong. */
export function assertOffsetTarget(to: unknown): OffsetTarget {
  if (to === 'earliest' || to === 'latest') return to;
  if (to !== null && typeof to === 'object') {
    if ('id' in to) {
      if (typeof to.id === 'string' && STREAM_ID.test(to.id)) return { id: to.id };
      throw new RangeError(`to.id must be a stream id like 1764505000000-0, got ${JSON.stringify(to.id)}`);
    }
    if ('datetime' in to) {
      const ms = to.datetime instanceof Date ? to.datetime.getTime() : to.datetime;
      if (typeof ms === 'number' && Number.isFinite(ms) && ms >= 0) return { datetime: ms };
      throw new RangeError(`to.datetime must be a valid Date or epoch milliseconds >= 0, got ${String(to.datetime)}`);
    }
  }
  throw new TypeError(`to must be 'earliest', 'latest', { datetime } or { id }, got ${JSON.stringify(to)}`);
}

/** The last-delivered id that makes the group read next what `to` says. */
export function targetId(to: OffsetTarget, position: ShardPosition): string {
  if (to === 'earliest') return '0-0';
  if (to === 'latest') return position.lastEntryId;
  if ('id' in to) return to.id.includes('-') ? to.id : `${to.id}-0`;
  const ms = to.datetime instanceof Date ? to.datetime.getTime() : to.datetime;
  // Entries written at or after the time are read next: the group has had everything before it.
  return ms <= 0 ? '0-0' : `${Math.floor(ms) - 1}-${MAX_SEQ}`;
}

/**
 * The group's fencing token on each shard (`''` where none): read before the check for live
 * members, so that each move can tell whether a member was granted the shard since (`applyOffsets`).
 */
export async function readFenceTokens(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
  shards: number[],
): Promise<Map<number, string>> {
  const results = await execByNode(
    redis,
    shards.map((shard) => {
      const key = keys.shardFence(streamPrefix, shard, consumerGroup);
      return { key, build: (pipeline) => pipeline.get(key) };
    }),
  );
  return new Map(
    results.map((result, i) => {
      if ('error' in result) throw result.error;
      const [error, token] = result.replies[0];
      if (error) throw error;
      return [shards[i], token === null ? '' : String(token)];
    }),
  );
}

/**
 * Moves the group's position on the given shards, one script each in the shard's slot
 * (resetShardOffset-2.lua): XGROUP SETID, or XGROUP CREATE where the group has not read the shard
 * yet. Pending entries stay pending. With `fences` (not forced), a shard whose token changed since
 * they were read is not moved: a member was granted it after the check for live members; this
 * throws there, naming it (shards before it were moved: the reset is absolute, run it again).
 */
export async function applyOffsets(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
  resets: ShardOffsetReset[],
  fences: Map<number, string> | null,
): Promise<void> {
  for (const [i, reset] of resets.entries()) {
    const reply = (await runScript(
      redis,
      'resetShardOffset',
      [keys.shardStream(streamPrefix, reset.shardIndex), keys.shardFence(streamPrefix, reset.shardIndex, consumerGroup)],
      [consumerGroup, reset.to, fences ? (fences.get(reset.shardIndex) ?? '') : '*'],
    )) as string[];
    if (reply[0] === 'claimed') {
      const done = resets.slice(0, i).map((r) => r.shardIndex);
      const member = reply[1].split(':').slice(2).join(':') || reply[1];
      throw new Error(
        `group "${consumerGroup}" of stream "${streamPrefix}", shard ${reset.shardIndex}: a member (${member}) claimed it since the check for ` +
          `live members, so it is not moved under it; ${done.length > 0 ? `shard${done.length > 1 ? 's' : ''} ${done.join(', ')} ${done.length > 1 ? 'were' : 'was'} reset, ` : ''}` +
          `shard ${reset.shardIndex} and later ones were not: stop the members, or force the reset`,
      );
    }
  }
}

/**
 * Refuses, naming them, while the group has ACTIVE members whose lease (Redis time) has not run
 * out: they would go on from their own positions. A group that never had a member has none.
 */
export async function assertNoLiveMembers(
  redis: RedisClient,
  streamPrefix: string,
  consumerGroup: string,
  describe: () => Promise<GroupDescription>,
): Promise<void> {
  let members: MemberMetadata[];
  try {
    ({ members } = await describe());
  } catch (error) {
    if ((error as { code?: ErrorCode }).code === ErrorCode.GROUP_NOT_FOUND) return;
    throw error;
  }
  const [seconds] = await redis.time();
  const now = Number(seconds) * 1000;
  const live = members.filter((m) => m.state === 'ACTIVE' && Date.parse(m.memberLeaseExpiresAt) > now);
  if (live.length > 0) {
    throw new Error(
      `group "${consumerGroup}" of stream "${streamPrefix}" has ${live.length} live member(s) (${live.map((m) => m.memberName).join(', ')}): ` +
        'stop them first, or force the reset (they read from the new positions on)',
    );
  }
}
