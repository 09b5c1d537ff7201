import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript } from '../redis/scripts';

/** What a purge did to one dead letter: `purged` false when it was already gone. */
export interface DeadLetterPurge {
  ref: string;
  purged: boolean;
}

/**
 * Deletes dead letters, with their replay marks (dropDeadLetter-2.lua), one command each: deleting
 * one that is gone changes nothing, so a purge is safe to run twice. A failure stops the purge with
 * the error; what was deleted before stays deleted, the rest stays.
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
    results.push({ ref: `${shardIndex}/${deadLetterId}`, purged: Number(reply) === 1 });
  }
  return results;
}
