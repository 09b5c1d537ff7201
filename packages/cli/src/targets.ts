import type { Command } from 'commander';
import { type CoordinatorAdmin, GroupNotFoundError, KeyBuilder, StreamNotFoundError } from '@redis-stream-coordinator/core';
import type { Cluster, Redis } from 'ioredis';

/**
 * Commands whose `<group>` may also name a dead-letter destination (a member's
 * `deadLetter.stream`), which is not a group: it exists when one of its dead-letter streams does.
 */
const DESTINATION_COMMANDS = new Set(['dead-letters']);

/**
 * The one check every command makes of what it names: a `<prefix>` argument must be a stream
 * with metadata, a `<group>` argument a consumer group of it. A name that does not exist is
 * refused the same way by every command (exit 1, `stream "x" does not exist …` (StreamNotFoundError) / `group "g" of
 * stream "x" does not exist`), so a typo is never answered as an empty list ("no dead letters",
 * "no events") that reads like good news. Keyed on the arguments' names, it covers every command
 * that takes them, new ones included.
 */
export async function assertTargetsExist(
  command: Command,
  admin: CoordinatorAdmin,
  redis: Redis | Cluster,
  keyPrefix: string | undefined,
): Promise<void> {
  const named = new Map(command.registeredArguments.map((argument, i) => [argument.name(), command.processedArgs[i] as unknown]));
  const prefix = named.get('prefix');
  if (typeof prefix !== 'string') return;
  const stream = await admin.describeStream(prefix);
  if (!stream) throw new StreamNotFoundError(prefix);
  const group = named.get('group');
  if (typeof group !== 'string') return;
  if ((await admin.listGroups(prefix)).includes(group)) return;
  if (DESTINATION_COMMANDS.has(command.name()) && (await hasDeadLetters(redis, keyPrefix, prefix, group, stream.deadLetterSpan))) return;
  throw new GroupNotFoundError(
    `group "${group}" of stream "${prefix}" does not exist (rsc groups ${prefix} lists them)${DESTINATION_COMMANDS.has(command.name()) ? ', and no dead letters are kept under that name' : ''}`,
  );
}

/** Whether any shard of the stream (retired ones included) has a dead-letter stream for `destination`. */
async function hasDeadLetters(
  redis: Redis | Cluster,
  keyPrefix: string | undefined,
  prefix: string,
  destination: string,
  span: number,
): Promise<boolean> {
  const keys = new KeyBuilder(keyPrefix);
  // One shard at a time: each key is in its own shard's slot, and the first found ends the look.
  for (let shard = 0; shard < span; shard++) {
    if ((await redis.exists(keys.shardDeadLetterStream(prefix, shard, destination))) === 1) return true;
  }
  return false;
}
