import { ErrorCode, errorCodeFromWire } from '../protocol/error-codes';
import { toCoordinatorError } from '../protocol/errors';
import type { KeyBuilder } from './keys';
import { pairs } from './responses';
import { ensureScripts, pipelineScript, type RedisClient, runScript } from './scripts';

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

/** What a shard's routing marker says: from `switchAt` (Redis ms) on `count` shards, before it `previous`. */
export interface ShardRouting {
  /** The metadataVersion of the resize it describes: a marker is never replaced by an older one. */
  version: number;
  count: number;
  previous: number;
  switchAt: number;
}

/**
 * Writes the routing marker of each of `shards` (ensureRouting-1.lua, in the shard's own slot)
 * unless it already describes this or a newer resize. One pipelined round trip; throws the first
 * error, since a caller that trusts the markers afterwards must not go on without them.
 */
export async function ensureRoutingMarkers(
  client: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  routing: ShardRouting,
  shards: readonly number[],
): Promise<void> {
  if (shards.length === 0) return;
  ensureScripts(client);
  const pipeline = client.pipeline();
  for (const shard of shards) {
    pipelineScript(pipeline, 'ensureRouting', [keys.shardRouting(streamPrefix, shard)], [routing.version, routing.count, routing.previous, routing.switchAt]);
  }
  for (const [error] of (await pipeline.exec()) ?? []) if (error) throw error;
}
