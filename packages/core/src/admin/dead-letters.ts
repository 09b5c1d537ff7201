import { compareStreamIds } from '../protocol/stream-ids';
import type { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';

/** One dead letter of a group: an entry that could not be handled, with why, by whom, how often. */
export interface DeadLetter {
  /** The dead letter's own id in its shard's dead-letter stream; its time is when it was written. */
  deadLetterId: string;
  shardIndex: number;
  /** The entry's id in its shard stream. */
  entryId: string;
  /** The member that gave up on it. */
  memberId: string;
  /** Why: the last handler error (`Name: message`), or why it could not be decoded. */
  error: string;
  /** Handler attempts made (0 when it could not be decoded). */
  attempts: number;
  /** The entry's own fields, as the producer wrote them (flat name/value list). */
  fields: string[];
}

export interface ReadDeadLettersOptions {
  /** At most this many, the oldest first. Default 1000. */
  count?: number;
}

export const DEFAULT_DEAD_LETTER_COUNT = 1000;

/**
 * The oldest `count` dead letters of a group across shards 0..shardSpan-1 (each shard keeps its own
 * dead-letter stream, in its slot, so that writing one is fenced with the ack), sorted by the time
 * they were written (ties: by shard).
 */
export async function readDeadLetters(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  consumerGroup: string,
  shardSpan: number,
  count: number,
): Promise<DeadLetter[]> {
  const streams = Array.from({ length: shardSpan }, (_, shard) => keys.shardDeadLetterStream(streamPrefix, shard, consumerGroup));
  // One command per shard, each routed by its own key (Cluster-safe); sent together.
  const pages = await Promise.all(streams.map((stream) => redis.xrange(stream, '-', '+', 'COUNT', count)));
  const letters = pages.flatMap((page, shard) => page.map(([id, fields]) => toDeadLetter(shard, id, fields)));
  letters.sort((a, b) => compareStreamIds(a.deadLetterId, b.deadLetterId) || a.shardIndex - b.shardIndex);
  return letters.slice(0, count);
}

function toDeadLetter(shardIndex: number, deadLetterId: string, flat: string[]): DeadLetter {
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) fields.set(flat[i], flat[i + 1]);
  let original: string[] = [];
  try {
    original = (JSON.parse(fields.get('fields') ?? '[]') as unknown[]).map(String);
  } catch {
    // Written by hand or by another tool: the letter is still shown, with no original fields.
  }
  return {
    deadLetterId,
    shardIndex,
    entryId: fields.get('entryId') ?? '',
    memberId: fields.get('memberId') ?? '',
    error: fields.get('error') ?? '',
    attempts: Number(fields.get('attempts') ?? 0),
    fields: original,
  };
}
