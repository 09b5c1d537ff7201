import { retireReplayRecord } from './replay-records';
import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript } from '../redis/scripts';

/** What a purge did to one dead letter: `purged` false when it was already gone. */
export interface DeadLetterPurge {
  ref: string;
  purged: boolean;
}

/**
 * Deletes dead letters, with their replay marks (dropDeadLetter-2.lua), and retires the replay record a
 * mark points to into a tombstone (admin/replay-records.ts), one dead letter at a time: deleting one that is gone changes nothing, so a purge is
 * safe to run twice. A failure stops the purge with the error; what was deleted before stays
 * deleted, the rest stays.
 */
export async function purgeMany(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
  letters: { shardIndex: number; deadLetterId: string }[],
): Promise<DeadLetterPurge[]> {
  const results: DeadLetterPurge[] = [];
  for (const { shardIndex, deadLetterId } of letters) {
    const reply = await runScript(
      redis,
      'dropDeadLetter',
      [
        keys.shardDeadLetterStream(streamPrefix, shardIndex, consumerGroup),
        keys.shardDeadLetterReplays(streamPrefix, shardIndex, consumerGroup),
      ],
      [deadLetterId],
    );
    const [deleted, writtenShard, writtenId] = reply as [number, string, string];
    const ref = `${shardIndex}/${deadLetterId}`;
    // A replay that wrote the entry and stopped before its delete left a record on the shard it
    // wrote to. It is retired into a tombstone, not deleted: another replay of the letter may still
    // have its write in flight, and must find it (SPEC 10.6).
    if (writtenShard !== '') {
      const records = keys.shardReplayRecords(streamPrefix, Number(writtenShard), consumerGroup);
      const entryId = writtenId !== '' ? writtenId : await redis.hget(records, ref).catch(() => null);
      if (entryId) await retireReplayRecord(redis, keys, streamPrefix, Number(writtenShard), consumerGroup, ref, entryId);
    }
    results.push({ ref, purged: Number(deleted) === 1 });
  }
  return results;
}
