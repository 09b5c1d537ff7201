import { ENTRY_CODEC_OF, encodeEntry, type OutgoingMessage, type PassThroughCodec } from '../protocol/entry-format';
import { StreamNotFoundError } from '../protocol/errors';
import { shardForKey } from '../producer/key-hash';
import { isReplyError } from '../producer/entry-writer';
import type { SendResult } from '../producer/send-results';
import { isCluster } from '../redis/connection/slot-pipelines';
import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript } from '../redis/scripts';
import { ensureStreamRouting } from '../redis/stream-metadata';

/** A stored payload: its text or bytes, and the codec that wrote it (kept in the replayed entry). */
export interface StoredPayload {
  raw: string | Buffer;
  codec: string | undefined;
}

/** Writes stored payloads back unchanged, bytes as bytes, each with its original codec's name. */
const rawCodec: PassThroughCodec = {
  name: 'raw',
  encode: (payload: unknown) => (payload as StoredPayload).raw as string,
  decode: (raw: string) => raw,
  [ENTRY_CODEC_OF]: (payload: unknown) => (payload as StoredPayload).codec,
};

/**
 * Routing rounds before a replay's write gives up: each refusal answers the count in effect, so two
 * rounds suffice unless resizes keep landing; a producer's bound (stream-producer.ts) for the same reason.
 */
const MAX_ROUNDS = 5;

/** Where a replay's entry is now, and whether this call wrote it or an earlier one had. */
export interface ReplayWrite extends SendResult {
  earlier: boolean;
}

/** The replay's write failed; `maybeWritten` when no reply came (it may have landed). */
export class ReplayWriteError extends Error {
  constructor(
    message: string,
    readonly maybeWritten: boolean,
    override readonly cause?: unknown,
  ) {
    super(message);
    this.name = 'ReplayWriteError';
  }
}

/**
 * Writes a dead letter's entry again (replayEntry-4.lua) to its key's shard under the count in
 * effect (an entry without a key: `message.shardIndex`, modulo the count), following refusals as a
 * producer does, and records the id in the shard's slot with the write, so that it is never written
 * twice whatever fails afterwards (SPEC 10.6).
 */
export async function writeReplay(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  destination: string,
  ref: string,
  message: OutgoingMessage<StoredPayload>,
): Promise<ReplayWrite> {
  const fields = encodeEntry(message, rawCodec);
  let count = await shardCountNow(redis, keys, streamPrefix);
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const shardIndex = message.key !== undefined ? shardForKey(message.key, count) : (message.shardIndex ?? 0) % count;
    let reply: (string | number)[];
    try {
      reply = (await runScript(
        redis,
        'replayEntry',
        [
          keys.shardStream(streamPrefix, shardIndex),
          keys.shardRouting(streamPrefix, shardIndex),
          keys.shardReplayRecords(streamPrefix, shardIndex, destination),
          keys.shardReplayTombstone(streamPrefix, shardIndex, destination, ref),
        ],
        [shardIndex, count, ref, isCluster(redis) ? keys.shardWakeChannel(streamPrefix, shardIndex) : '', ...fields],
      )) as (string | number)[];
    } catch (error) {
      throw new ReplayWriteError((error as Error).message, !isReplyError(error as Error), error);
    }
    if (reply[0] === 'OK' || reply[0] === 'EARLIER') return { shardIndex, id: String(reply[2]), earlier: reply[0] === 'EARLIER' };
    if (reply[0] === 'REROUTE') {
      count = Number(reply[1]);
    } else {
      // No marker on the shard (Redis lost its keys): the metadata decides, its markers are ensured.
      const meta = await redis.hgetall(keys.streamMeta(streamPrefix));
      if (meta.shardCount === undefined) break;
      await ensureStreamRouting(redis, keys, streamPrefix, new Map(Object.entries(meta)));
      count = await shardCountNow(redis, keys, streamPrefix);
    }
  }
  throw new ReplayWriteError(`the shards kept refusing the write after ${MAX_ROUNDS} routing rounds (resizes under way)`, false);
}

async function shardCountNow(redis: RedisClient, keys: KeyBuilder, streamPrefix: string): Promise<number> {
  const count = Number(await redis.hget(keys.streamMeta(streamPrefix), 'shardCount'));
  if (!count) throw new StreamNotFoundError(streamPrefix, 'the dead letter cannot be replayed');
  return count;
}
