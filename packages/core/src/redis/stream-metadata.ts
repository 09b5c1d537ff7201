import { ErrorCode, errorCodeFromWire } from '../protocol/error-codes';
import { toCoordinatorError } from '../protocol/errors';
import type { KeyBuilder } from './keys';
import { pairs } from './responses';
import { type RedisClient, runScript } from './scripts';

/**
 * Creates a stream prefix's shard metadata (createStream-1.lua): idempotent for the same count, a
 * `ShardCountConflictError` for another. Shared by `CoordinatorAdmin.createStream` and a producer
 * given `shardCount` that finds the metadata gone (e.g. after Redis lost its keys).
 */
export async function createStreamMetadata(
  client: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  shardCount: number,
): Promise<{ created: boolean; metadata: [string, string][] }> {
  const reply = (await runScript(client, 'createStream', [keys.streamMeta(streamPrefix)], [shardCount])) as unknown[];
  const code = errorCodeFromWire(reply[0]);
  if (code !== ErrorCode.NONE) throw toCoordinatorError(code, `stream "${streamPrefix}": ${String(reply[1])}`);
  return { created: Number(reply[2]) === 1, metadata: pairs(reply[3]) };
}
