import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript } from '../redis/scripts';

export interface TrimOptions {
  /** Report what would be trimmed; delete nothing. Default false. */
  dryRun?: boolean;
  /**
   * For shards no consumer group reads (a prefix without groups): keep at most this many newest
   * entries. Shards a group reads are trimmed by the groups' positions only, never by length.
   * Default: none (such shards are left alone).
   */
  maxLen?: number;
}

/** What `trim` did to one shard stream. */
export interface ShardTrim {
  shardIndex: number;
  /** Entries deleted (in a dry run: that would be). */
  trimmed: number;
  /**
   * Entries with ids below this one were deleted: the lowest id a group still needs. '' when every
   * group had been delivered and had acknowledged every entry (all were deleted). Absent when the
   * shard was left alone or trimmed by `maxLen`.
   */
  minId?: string;
  /** The group whose position set `minId` (the slowest one). */
  limitedBy?: string;
  /** Why the shard was left alone. */
  leftAlone?: string;
  /** Why trimming this shard failed (the other shards were still trimmed). */
  error?: string;
}

export interface TrimResult {
  streamPrefix: string;
  dryRun: boolean;
  /** The prefix's registered consumer groups (groups found on a shard stream count too). */
  groups: string[];
  shards: ShardTrim[];
  /** Sum of `trimmed` over the shards. */
  trimmed: number;
}

/** `trim` failed on some shards; `result` says what happened to each, the failed ones with `error`. */
export class TrimError extends Error {
  constructor(readonly result: TrimResult) {
    const failed = result.shards.filter((shard) => shard.error !== undefined);
    super(
      `stream "${result.streamPrefix}": trimming ${failed.length} shard(s) failed (first: shard ${failed[0]?.shardIndex}: ${failed[0]?.error}); the others were trimmed`,
    );
    this.name = 'TrimError';
  }
}

const COUNT_PAGE = 1000;

/**
 * Trims every shard 0..shardSpan-1 of a stream, one atomic script per shard (trimShard-1.lua, in
 * the shard's slot) so that no group reads, claims or is created between the look and the trim.
 */
export async function trimShards(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  shardSpan: number,
  groups: string[],
  options: { dryRun: boolean; maxLen: number },
): Promise<TrimResult> {
  const shards: ShardTrim[] = [];
  for (let shardIndex = 0; shardIndex < shardSpan; shardIndex++) {
    const stream = keys.shardStream(streamPrefix, shardIndex);
    try {
      const reply = (await runScript(redis, 'trimShard', [stream], [options.dryRun ? 1 : 0, options.maxLen, groups.length, ...groups])) as (
        | string
        | number
      )[];
      shards.push(await toShardTrim(redis, stream, shardIndex, reply));
    } catch (error) {
      shards.push({ shardIndex, trimmed: 0, error: (error as Error).message });
    }
  }
  const result = { streamPrefix, dryRun: options.dryRun, groups, shards, trimmed: shards.reduce((sum, shard) => sum + shard.trimmed, 0) };
  if (shards.some((shard) => shard.error !== undefined)) throw new TrimError(result);
  return result;
}

async function toShardTrim(redis: RedisClient, stream: string, shardIndex: number, reply: (string | number)[]): Promise<ShardTrim> {
  switch (reply[0]) {
    case 'missing':
      return { shardIndex, trimmed: 0, leftAlone: 'no stream' };
    case 'unread':
      return { shardIndex, trimmed: 0, leftAlone: `group ${reply[1]} has not read this shard yet` };
    case 'no-group':
      return { shardIndex, trimmed: 0, leftAlone: 'no consumer group reads it and no maxLen was given' };
    case 'maxlen':
      return { shardIndex, trimmed: Number(reply[2]) };
    default: {
      const minId = String(reply[3]);
      // A dry run counts here (outside the script, so Redis is never blocked by a long count).
      const trimmed = Number(reply[2]) >= 0 ? Number(reply[2]) : await countBelow(redis, stream, minId);
      return { shardIndex, trimmed, minId, limitedBy: String(reply[1]) };
    }
  }
}

/** Entries of a stream with ids below `id`, counted a page at a time. */
async function countBelow(redis: RedisClient, stream: string, id: string): Promise<number> {
  let count = 0;
  let from = '-';
  for (;;) {
    const page = await redis.xrange(stream, from, `(${id}`, 'COUNT', COUNT_PAGE);
    count += page.length;
    if (page.length < COUNT_PAGE) return count;
    from = `(${page[page.length - 1][0]}`;
  }
}
