import { ENTRY_CODEC_OF, ENTRY_FIELD, type OutgoingMessage, type PassThroughCodec } from '../protocol/entry-format';
import type { StreamMetadata } from '../protocol/records';
import { shardForKey } from '../producer/key-hash';
import { PartialBatchError, type SendResult } from '../producer/send-results';
import { StreamProducer } from '../producer/stream-producer';
import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript } from '../redis/scripts';
import { type DeadLetter, readDeadLetter } from './dead-letters';

/** Headers a replayed entry carries besides its own, so a handler (of any group) can tell. */
export const REPLAY_HEADER = {
  /** The dead letter's ref, `<shardIndex>/<deadLetterId>`. */
  of: 'rsc-replay-of',
  /**
   * The consumer group whose dead letter it was (the destination's name for dead letters that do
   * not record their group).
   */
  group: 'rsc-replay-group',
  /** The entry's id before it was dead-lettered. */
  originalId: 'rsc-replay-original-id',
} as const;

export interface ReplayDeadLettersOptions {
  /**
   * A replay marks its dead letter before it writes; another replay finding that mark waits this long
   * for it to finish (answering "busy") before it takes over, looking first for the entry the first
   * one may have written. Default 15000 ms.
   */
  takeOverAfterMs?: number;
}

/** What one dead letter's replay did. */
export interface DeadLetterReplay {
  ref: string;
  /**
   * `replayed`: written now to `to`, and the dead letter deleted. `found-earlier-replay`: an earlier
   * replay that did not finish had written it (at `to`); not written again, the dead letter deleted.
   * `gone`: no such dead letter (replayed or purged before). `not-replayable`: the entry was not
   * written by a StreamProducer or its headers are not JSON (`reason`); it stays, purge it.
   */
  status: 'replayed' | 'found-earlier-replay' | 'gone' | 'not-replayable';
  to?: SendResult;
  reason?: string;
}

/** A replay of many dead letters stopped at one that failed; `results` holds what was done before. */
export class DeadLetterReplayError extends Error {
  constructor(
    message: string,
    readonly results: DeadLetterReplay[],
    readonly failedRef: string,
    override readonly cause: unknown,
  ) {
    super(message);
    this.name = 'DeadLetterReplayError';
  }
}

/** Hands the stored payload through as it is: a replay writes the bytes the producer wrote. */
/** A stored payload: its text or bytes, and the codec that wrote it (kept in the replayed entry). */
interface StoredPayload {
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

const SEARCH_PAGE = 1000;
/** How far before a replay marker the search for its write starts: clock steps, Redis Cluster nodes. */
const SEARCH_MARGIN_MS = 60_000;

export interface ReplayContext {
  redis: RedisClient;
  keys: KeyBuilder;
  streamPrefix: string;
  /** The dead letters' destination: a consumer group's name, or its members' `deadLetter.stream`. */
  consumerGroup: string;
  producer: StreamProducer;
  takeOverAfterMs: number;
  /** Fresh metadata, for routing the search for an earlier replay. */
  stream: () => Promise<StreamMetadata | null>;
}

/** A producer that writes the stored payload unchanged. */
export function replayProducer(redis: RedisClient, keys: KeyBuilder, streamPrefix: string): StreamProducer {
  return new StreamProducer(redis, { streamPrefix, keyPrefix: keys.keyPrefix, codec: rawCodec, metadataRefreshMs: 1 });
}

/**
 * Replays one dead letter: marks it (claimDeadLetterReplay-2.lua), writes its entry to its key through
 * StreamProducer (so it lands on the key's current shard, after the key's newer entries), then deletes
 * the dead letter and the mark together (dropDeadLetter-2.lua). Never loses the entry: the write comes
 * first. Safe to run twice: a deleted dead letter is `gone`; a mark left by a replay that stopped
 * between its write and the delete makes the next one look for that write before it writes.
 */
export async function replayOne(ctx: ReplayContext, shardIndex: number, deadLetterId: string): Promise<DeadLetterReplay> {
  const { redis, keys, streamPrefix, consumerGroup } = ctx;
  const letter = await readDeadLetter(redis, keys, streamPrefix, consumerGroup, shardIndex, deadLetterId);
  const ref = `${shardIndex}/${deadLetterId}`;
  if (!letter) return { ref, status: 'gone' };
  const stream = await ctx.stream();
  const message = replayMessage(letter, consumerGroup, stream?.shardCount ?? 0);
  if (typeof message === 'string') return { ref, status: 'not-replayable', reason: message };

  const dlq = [
    keys.shardDeadLetterStream(streamPrefix, shardIndex, consumerGroup),
    keys.shardDeadLetterReplays(streamPrefix, shardIndex, consumerGroup),
  ];
  const claim = (await runScript(redis, 'claimDeadLetterReplay', dlq, [deadLetterId, ctx.takeOverAfterMs])) as (string | number)[];
  if (claim[0] === 'gone') return { ref, status: 'gone' };
  if (claim[0] === 'busy') {
    throw new Error(
      `dead letter ${ref}: another replay marked it ${claim[1]} ms ago and has not finished; it is taken over ` +
        `${ctx.takeOverAfterMs} ms after the mark (a replay that crashed), try again then`,
    );
  }
  if (claim[1] !== '') {
    const earlier = await findEarlierReplay(ctx, letter, Number(claim[1]));
    if (earlier) {
      await drop(ctx, shardIndex, deadLetterId, `found its earlier replay at shard ${earlier.shardIndex} id ${earlier.id}`);
      return { ref, status: 'found-earlier-replay', to: earlier };
    }
  }

  let to: SendResult;
  try {
    [to] = await ctx.producer.sendBatch([message]);
  } catch (error) {
    const failed = error instanceof PartialBatchError ? error.failed[0] : undefined;
    const cause = failed ? failed.error : (error as Error);
    if (failed?.maybeWritten) {
      // The write may have landed: the mark stays, so the next replay looks for it first.
      throw new Error(
        `dead letter ${ref}: the replay's write got no reply (${cause.message}); the dead letter and its replay mark are kept: replay it again after ${ctx.takeOverAfterMs} ms, it looks for this write and does not write it twice`,
        { cause },
      );
    }
    // Nothing was written: free the mark so that a retry does not wait for it.
    await redis.hdel(dlq[1], deadLetterId).catch(() => undefined);
    throw new Error(`dead letter ${ref}: the replay was not written (${cause.message}); the dead letter is kept`, { cause });
  }
  await drop(ctx, shardIndex, deadLetterId, `replayed to shard ${to.shardIndex} id ${to.id}`);
  return { ref, status: 'replayed', to };
}

async function drop(ctx: ReplayContext, shardIndex: number, deadLetterId: string, done: string): Promise<void> {
  const { keys, streamPrefix, consumerGroup } = ctx;
  try {
    await runScript(
      ctx.redis,
      'dropDeadLetter',
      [
        keys.shardDeadLetterStream(streamPrefix, shardIndex, consumerGroup),
        keys.shardDeadLetterReplays(streamPrefix, shardIndex, consumerGroup),
      ],
      [deadLetterId],
    );
  } catch (error) {
    throw new Error(
      `dead letter ${shardIndex}/${deadLetterId}: ${done}, but deleting the dead letter failed (${(error as Error).message}); ` +
        `it is kept with its replay mark: replaying it again finds the write and only deletes it`,
      { cause: error },
    );
  }
}

/** The entry to write again, or why it cannot be. */
function replayMessage(letter: DeadLetter, consumerGroup: string, shardCount: number): OutgoingMessage<StoredPayload> | string {
  const fields = new Map<string, string>();
  for (let i = 0; i + 1 < letter.fields.length; i += 2) fields.set(letter.fields[i], letter.fields[i + 1]);
  const payload = fields.get(ENTRY_FIELD.payload);
  if (payload === undefined) return `the entry has no "${ENTRY_FIELD.payload}" field: it was not written by a StreamProducer; purge it`;
  let headers: Record<string, string> = {};
  const rawHeaders = fields.get(ENTRY_FIELD.headers);
  if (rawHeaders !== undefined) {
    try {
      headers = JSON.parse(rawHeaders) as Record<string, string>;
      if (headers === null || typeof headers !== 'object' || Array.isArray(headers)) throw new Error('not an object');
    } catch (error) {
      return `its headers are not a JSON object (${(error as Error).message}); purge it`;
    }
  }
  const group = letter.consumerGroup ?? consumerGroup;
  return {
    key: letter.key,
    // An entry without a key goes back to its shard while that takes writes (else round-robin).
    ...(letter.key === undefined && letter.shardIndex < shardCount ? { shardIndex: letter.shardIndex } : {}),
    payload: { raw: letter.payloadBase64 === undefined ? payload : Buffer.from(letter.payloadBase64, 'base64'), codec: letter.codec },
    headers: { ...headers, [REPLAY_HEADER.of]: letter.ref, [REPLAY_HEADER.group]: group, [REPLAY_HEADER.originalId]: letter.entryId },
  };
}

/**
 * Looks for the write of a replay that marked `letter` at `markedAtMs` and did not finish: in the
 * shards its key routes to with the current and the previous shard count (every shard for an entry
 * without a key), from shortly before the mark on.
 */
async function findEarlierReplay(ctx: ReplayContext, letter: DeadLetter, markedAtMs: number): Promise<SendResult | null> {
  const stream = await ctx.stream();
  if (!stream) return null;
  const counts = [stream.shardCount, stream.previousShardCount ?? stream.shardCount];
  const shards =
    letter.key === undefined
      ? Array.from({ length: stream.shardSpan }, (_, i) => i)
      : [...new Set(counts.map((count) => shardForKey(letter.key!, count)))];
  for (const shardIndex of shards) {
    const shard = ctx.keys.shardStream(ctx.streamPrefix, shardIndex);
    let from = String(Math.max(0, markedAtMs - SEARCH_MARGIN_MS));
    for (;;) {
      const page = await ctx.redis.xrange(shard, from, '+', 'COUNT', SEARCH_PAGE);
      for (const [id, fields] of page) if (isReplayOf(fields, letter, ctx.consumerGroup)) return { shardIndex, id };
      if (page.length < SEARCH_PAGE) break;
      from = `(${page[page.length - 1][0]}`;
    }
  }
  return null;
}

function isReplayOf(fields: string[], letter: DeadLetter, consumerGroup: string): boolean {
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] !== ENTRY_FIELD.headers || !fields[i + 1].includes(letter.ref)) continue;
    try {
      const headers = JSON.parse(fields[i + 1]) as Record<string, string>;
      return headers[REPLAY_HEADER.of] === letter.ref && headers[REPLAY_HEADER.group] === (letter.consumerGroup ?? consumerGroup);
    } catch {
      return false;
    }
  }
  return false;
}

/**
 * Replays `letters` one by one in the order given (the caller sorts them by when they were
 * dead-lettered, so each key's replays keep their order) and stops at the first that fails, so
 * that no later entry of its key overtakes it: a `DeadLetterReplayError` with what was done before.
 */
export async function replayMany(ctx: ReplayContext, letters: DeadLetter[]): Promise<DeadLetterReplay[]> {
  const results: DeadLetterReplay[] = [];
  for (const letter of letters) {
    try {
      results.push(await replayOne(ctx, letter.shardIndex, letter.deadLetterId));
    } catch (error) {
      throw new DeadLetterReplayError(
        `replayed ${results.length} of ${letters.length} dead letters, then stopped at ${letter.ref} (so that no later entry of its key overtakes it): ${(error as Error).message}`,
        results,
        letter.ref,
        error,
      );
    }
  }
  return results;
}
