import { ErrorCode, errorCodeFromWire } from '../protocol/error-codes';
import { toCoordinatorError } from '../protocol/errors';
import type { KeyBuilder } from './keys';
import { pairs } from './responses';
import { ensureScripts, pipelineScript, type RedisClient, runScript } from './scripts';
import { execBySlot } from './connection/slot-pipelines';

/**
 * Creates a stream prefix's shard metadata (createStream-1.lua): idempotent for the same count, a
 * `ShardCountConflictError` for another. Shared by `CoordinatorAdmin.createStream`, a member and a
 * producer given `shardCount` that find the metadata gone (e.g. after Redis lost its keys).
 *
 * Then ensures every shard's routing marker from the metadata (a second step: the markers live in
 * the shards' slots). A shard without a marker takes no writes (appendEntries-5.lua), which is what
 * keeps a producer whose cached count predates a loss of every key from writing with it. When the
 * markers cannot be written this throws, and calling it again (it is idempotent) finishes the job;
 * until then a producer that meets a shard without marker ensures them itself.
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
  const metadata = pairs(reply[3]);
  await ensureStreamRouting(client, keys, streamPrefix, new Map(metadata));
  return { created: Number(reply[2]) === 1, metadata };
}

/**
 * The routing a stream's metadata hash describes (fields as stored: shardCount, previousShardCount,
 * switchAt, metadataVersion, shardSpan), and every shard that needs a marker: `0..span-1`, the
 * removed shards of a shrink included, so that they refuse writes.
 */
export function routingOfMetadata(raw: ReadonlyMap<string, string | null | undefined>): { routing: ShardRouting; shards: number[] } {
  const count = Number(raw.get('shardCount'));
  const routing: ShardRouting = {
    version: Number(raw.get('metadataVersion') ?? 1),
    count,
    previous: Number(raw.get('previousShardCount') ?? count),
    switchAt: Number(raw.get('switchAt') ?? 0),
  };
  const span = Math.max(count, routing.previous, Number(raw.get('shardSpan') ?? count));
  return { routing, shards: Array.from({ length: span }, (_, i) => i) };
}

/** Ensures the routing marker of every shard of the stream from its metadata hash (`routingOfMetadata`). */
export async function ensureStreamRouting(
  client: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  raw: ReadonlyMap<string, string | null | undefined>,
): Promise<void> {
  const { routing, shards } = routingOfMetadata(raw);
  await ensureRoutingMarkers(client, keys, streamPrefix, routing, shards);
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
 * unless it already describes this or a newer resize. One pipelined round trip (side by side per shard on a Cluster); throws the first
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
  const results = await execBySlot(
    client,
    shards.map((shard) => ({
      build(pipeline) {
        pipelineScript(
          pipeline,
          'ensureRouting',
          [keys.shardRouting(streamPrefix, shard)],
          [routing.version, routing.count, routing.previous, routing.switchAt],
        );
      },
    })),
  );
  for (const result of results) {
    if ('error' in result) throw result.error;
    for (const [error] of result.replies) if (error) throw error;
  }
}
