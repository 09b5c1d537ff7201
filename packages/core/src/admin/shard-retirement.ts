import { ErrorCode } from '../protocol/error-codes';
import { toCoordinatorError } from '../protocol/errors';
import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript } from '../redis/scripts';

/**
 * Shards a shrink removed that `deleteDrainedShards` has retired (retireShards-n.lua: out of the
 * stream's span) and whose keys are still to be deleted: `from..end-1`, retired at `version`.
 */
export interface ShardRetirement {
  from: number;
  end: number;
  /** The stream's metadataVersion when they were retired: a marker newer than it means a resize since. */
  version: string;
}

/** The retirement a stream's metadata hash records, or null when none is under way. */
export function pendingRetirement(meta: Record<string, string>): ShardRetirement | null {
  if (meta.retiringSpan === undefined || meta.retiredVersion === undefined) return null;
  return { from: Number(meta.shardCount), end: Number(meta.retiringSpan), version: meta.retiredVersion };
}

/**
 * The steps of `deleteDrainedShards` after the retirement (SPEC 10.5): each shard's keys are deleted
 * by a script in the shard's own slot that first checks again that no resize has reached it, that
 * its routing marker refuses writes and that every group has processed all of it
 * (deleteRetiredShard-n.lua); only once every shard is confirmed does the retirement record end
 * (endShardRetirement-1.lua), so a call that fails at any step leaves the record, and calling it
 * again (or resizing, which finishes it first) does the rest. Returns the shards deleted now.
 *
 * A shard found with entries a group has not processed, or whose routing marker lets writes in, is
 * not deleted: the retired shards go back into the stream's span (so they are described and
 * trimmed again, and resizes are not held up) and this throws `ResizeInProgressError` naming why.
 */
export async function deleteRetiredShards(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  retirement: ShardRetirement,
): Promise<number[]> {
  if (retirement.end <= retirement.from) {
    // Nothing retired lies beyond the count (a resize by another version grew back over it): a
    // record left standing would refuse every resize for good.
    await endRetirement(redis, keys, streamPrefix, retirement, 'deleted');
    return [];
  }
  const groups = (await redis.smembers(keys.streamGroups(streamPrefix))).sort();
  const deleted: number[] = [];
  for (let shard = retirement.from; shard < retirement.end; shard++) {
    const reply = (await runScript(
      redis,
      'deleteRetiredShard',
      [
        keys.shardStream(streamPrefix, shard),
        keys.shardRouting(streamPrefix, shard),
        keys.shardSchedule(streamPrefix, shard),
        keys.shardScheduledEntries(streamPrefix, shard),
        ...groups.flatMap((group) => [
          keys.shardFence(streamPrefix, shard, group),
          keys.shardDeferred(streamPrefix, shard, group),
          keys.shardDeferredEntries(streamPrefix, shard, group),
          keys.shardDeferredKeys(streamPrefix, shard, group),
        ]),
      ],
      [shard, retirement.version, groups.length, ...groups],
    )) as (string | number)[];
    switch (reply[0]) {
      case 'deleted':
        deleted.push(shard);
        break;
      case 'regrown':
        // Another call finished this retirement and a resize since made the shard the stream's
        // again: it is not this call's to delete (its record is gone, ending it below is a no-op).
        break;
      case 'unprocessed': {
        await endRetirement(redis, keys, streamPrefix, retirement, 'kept');
        const [, group, undelivered, pending] = reply;
        const total = Number(undelivered) + Number(pending);
        throw toCoordinatorError(
          ErrorCode.RESIZE_IN_PROGRESS,
          `stream "${streamPrefix}": removed shard ${shard} still holds ${total} entr${total === 1 ? 'y' : 'ies'} group ${group} has not ` +
            `processed (${undelivered} undelivered, ${pending} pending), written after its drain was checked; it is not deleted and ` +
            'is back in the stream span (describeGroup shows it)',
        );
      }
      case 'scheduled': {
        await endRetirement(redis, keys, streamPrefix, retirement, 'kept');
        const [, group, scheduled, deferred] = reply;
        throw toCoordinatorError(
          ErrorCode.RESIZE_IN_PROGRESS,
          `stream "${streamPrefix}": removed shard ${shard} still holds ${scheduled} delayed entr${Number(scheduled) === 1 ? 'y' : 'ies'} and ` +
            `${deferred} deferred retr${Number(deferred) === 1 ? 'y' : 'ies'}${group === '' ? '' : ` of group ${group}`} not released, ` +
            'scheduled after its drain was checked; it is not deleted and is back in the stream span (describeGroup shows it)',
        );
      }
      default:
        // Not deleted; back in the span, so that nothing stays out of sight or blocks a resize.
        await endRetirement(redis, keys, streamPrefix, retirement, 'kept');
        throw toCoordinatorError(
          ErrorCode.RESIZE_IN_PROGRESS,
          `stream "${streamPrefix}": removed shard ${shard}'s routing marker lets writes in (count ${reply[1]}); it is not deleted and ` +
            'is back in the stream span: deleteDrainedShards again ensures the markers before it looks',
        );
    }
  }
  await endRetirement(redis, keys, streamPrefix, retirement, 'deleted');
  return deleted;
}

async function endRetirement(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  retirement: ShardRetirement,
  outcome: 'deleted' | 'kept',
): Promise<void> {
  await runScript(redis, 'endShardRetirement', [keys.streamMeta(streamPrefix)], [retirement.version, outcome]);
}
