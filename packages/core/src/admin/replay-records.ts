import type { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';

/**
 * How long a replay record outlives its dead letter, as a tombstone (SPEC 10.6). A replay's write can
 * still be on its way when a replay that took its mark over has written, dropped the letter and
 * retired the record: held in a client's offline queue while it reconnects, or on a slow link. Such a
 * write is seconds to minutes late; a week is far beyond that, and costs a few bytes per replayed
 * dead letter for that long. Redis 7.0 has no TTL per hash field, so the tombstone is a key of its own.
 */
export const REPLAY_TOMBSTONE_TTL_MS = 7 * 24 * 60 * 60 * 1000;

/**
 * Retires the replay record of dead letter `ref` on shard `shardIndex` (it is gone: replayed or
 * purged): in one transaction in the shard's slot, the tombstone that replayEntry-4.lua checks is set
 * to the entry id, then the record is deleted. A failure leaves the record (it protects just as
 * well, and is a few bytes): no error for it.
 */
export async function retireReplayRecord(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  shardIndex: number,
  destination: string,
  ref: string,
  entryId: string,
): Promise<void> {
  await redis
    .multi()
    .set(keys.shardReplayTombstone(streamPrefix, shardIndex, destination, ref), entryId, 'PX', REPLAY_TOMBSTONE_TTL_MS)
    .hdel(keys.shardReplayRecords(streamPrefix, shardIndex, destination), ref)
    .exec()
    .catch(() => undefined);
}
