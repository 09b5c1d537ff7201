import { ENTRY_FIELD, type OutgoingMessage } from '../protocol/entry-format';
import type { StreamMetadata } from '../protocol/records';
import { shardForKey } from '../producer/key-hash';
import type { SendResult } from '../producer/send-results';
import { execByNode } from '../redis/connection/slot-pipelines';
import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript } from '../redis/scripts';
import { ReplayWriteError, type StoredPayload, writeReplay } from './dead-letter-replay-write';
import { type DeadLetter, readDeadLetter } from './dead-letters';
import { retireReplayRecord } from './replay-records';

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

const SEARCH_PAGE = 1000;
/**
 * How far before the first replay mark the search of the shard streams starts (only for a write
 * without a replay record: one an older version made): clock steps between Redis Cluster nodes.
 */
const SEARCH_MARGIN_MS = 60_000;

export interface ReplayContext {
  redis: RedisClient;
  keys: KeyBuilder;
  streamPrefix: string;
  /** The dead letters' destination: a consumer group's name, or its members' `deadLetter.stream`. */
  consumerGroup: string;
  takeOverAfterMs: number;
  /** Fresh metadata, for finding an earlier replay's write. */
  stream: () => Promise<StreamMetadata | null>;
}

/**
 * Replays one dead letter: marks it (claimDeadLetterReplay-2.lua), writes its entry to its key's
 * current shard with a record of the write in that shard's slot (replayEntry-4.lua), notes where
 * it landed in the mark (updateDeadLetterReplay-2.lua), then deletes the dead letter and the mark
 * together (dropDeadLetter-2.lua). Never loses the entry: the write comes first. Never writes it
 * twice, however many replays of it fail (SPEC 10.6): a replay that finds a mark looks for the
 * earlier write by the mark, then by the shards' replay records (which retention does not touch),
 * then (for a write without a record) in the streams from the first mark on.
 */
export async function replayOne(ctx: ReplayContext, shardIndex: number, deadLetterId: string): Promise<DeadLetterReplay> {
  const { redis, keys, streamPrefix, consumerGroup } = ctx;
  const letter = await readDeadLetter(redis, keys, streamPrefix, consumerGroup, shardIndex, deadLetterId);
  const ref = `${shardIndex}/${deadLetterId}`;
  if (!letter) return { ref, status: 'gone' };
  const message = replayMessage(letter, consumerGroup);
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
  const [, firstMark, claimedAt, writtenShard, writtenId] = claim.map(String);
  if (firstMark !== '') {
    const earlier =
      writtenId !== '' ? { shardIndex: Number(writtenShard), id: writtenId } : await findEarlierReplay(ctx, letter, Number(firstMark));
    if (earlier) {
      await drop(ctx, shardIndex, deadLetterId, earlier, `found its earlier replay at shard ${earlier.shardIndex} id ${earlier.id}`);
      return { ref, status: 'found-earlier-replay', to: earlier };
    }
  }

  let written: SendResult & { earlier: boolean };
  try {
    written = await writeReplay(redis, keys, streamPrefix, consumerGroup, ref, message);
  } catch (error) {
    const cause = error as Error;
    if (error instanceof ReplayWriteError && error.maybeWritten) {
      // The write may have landed (with its record): the mark stays, so the next replay looks first.
      throw new Error(
        `dead letter ${ref}: the replay's write got no reply (${cause.message}); the dead letter and its replay mark are kept: replay it again after ${ctx.takeOverAfterMs} ms, it looks for this write and does not write it twice`,
        { cause },
      );
    }
    // Nothing was written: release the mark so that a retry does not wait for it (what an earlier
    // replay left in it stays). If that fails too, a retry waits takeOverAfterMs, no more.
    await runScript(redis, 'updateDeadLetterReplay', dlq, [deadLetterId, 'released', claimedAt]).catch(() => undefined);
    throw new Error(`dead letter ${ref}: the replay was not written (${cause.message}); the dead letter is kept`, { cause });
  }
  const to = { shardIndex: written.shardIndex, id: written.id };
  const where = `${written.earlier ? 'found its earlier replay at' : 'replayed to'} shard ${to.shardIndex} id ${to.id}`;
  try {
    await runScript(redis, 'updateDeadLetterReplay', dlq, [deadLetterId, 'written', claimedAt, to.shardIndex, to.id]);
  } catch (error) {
    throw new Error(
      `dead letter ${ref}: ${where}, but noting it beside the dead letter failed (${(error as Error).message}); the dead letter and ` +
        'its replay mark are kept: replaying it again finds the write by its record on the shard and only deletes it',
      { cause: error },
    );
  }
  await drop(ctx, shardIndex, deadLetterId, to, where);
  return { ref, status: written.earlier ? 'found-earlier-replay' : 'replayed', to };
}

/**
 * Deletes the dead letter and its mark (one script), then retires the replay record on the shard
 * written to into a tombstone with a TTL, not deleted: a replay whose mark this one took over may
 * still have its write in flight, and finds the tombstone instead of writing again (SPEC 10.6).
 */
async function drop(ctx: ReplayContext, shardIndex: number, deadLetterId: string, to: SendResult, done: string): Promise<void> {
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
  await retireReplayRecord(ctx.redis, keys, streamPrefix, to.shardIndex, consumerGroup, `${shardIndex}/${deadLetterId}`, to.id);
}

/** The entry to write again, or why it cannot be. */
function replayMessage(letter: DeadLetter, consumerGroup: string): OutgoingMessage<StoredPayload> | string {
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
    // An entry without a key goes back to its shard (modulo the shard count in effect).
    ...(letter.key === undefined ? { shardIndex: letter.shardIndex } : {}),
    payload: { raw: letter.payloadBase64 === undefined ? payload : Buffer.from(letter.payloadBase64, 'base64'), codec: letter.codec },
    headers: { ...headers, [REPLAY_HEADER.of]: letter.ref, [REPLAY_HEADER.group]: group, [REPLAY_HEADER.originalId]: letter.entryId },
  };
}

/**
 * Looks for the write of an earlier replay of `letter` whose mark does not say where it landed: in
 * the replay records of every shard that may hold it (replayEntry-4.lua writes one with the write;
 * retention does not remove them), then, for a write an older version made without a record, in
 * the shards its key routes to with the current and the previous shard count (every shard for an
 * entry without a key), from shortly before the first replay's mark on.
 */
async function findEarlierReplay(ctx: ReplayContext, letter: DeadLetter, firstMarkMs: number): Promise<SendResult | null> {
  const stream = await ctx.stream();
  if (!stream) return null;
  const recorded = await findReplayRecord(ctx, letter, Math.max(stream.shardCount, stream.shardSpan, stream.deadLetterSpan));
  if (recorded) return recorded;
  const counts = [stream.shardCount, stream.previousShardCount ?? stream.shardCount];
  const shards =
    letter.key === undefined
      ? Array.from({ length: stream.shardSpan }, (_, i) => i)
      : [...new Set(counts.map((count) => shardForKey(letter.key!, count)))];
  for (const shardIndex of shards) {
    const shard = ctx.keys.shardStream(ctx.streamPrefix, shardIndex);
    let from = String(Math.max(0, firstMarkMs - SEARCH_MARGIN_MS));
    for (;;) {
      const page = await ctx.redis.xrange(shard, from, '+', 'COUNT', SEARCH_PAGE);
      for (const [id, fields] of page) if (isReplayOf(fields, letter, ctx.consumerGroup)) return { shardIndex, id };
      if (page.length < SEARCH_PAGE) break;
      from = `(${page[page.length - 1][0]}`;
    }
  }
  return null;
}

/** The replay record of `letter` on any shard `0..span-1`: one HGET each, one pipeline per node. */
async function findReplayRecord(ctx: ReplayContext, letter: DeadLetter, span: number): Promise<SendResult | null> {
  const results = await execByNode(
    ctx.redis,
    Array.from({ length: span }, (_, shardIndex) => {
      const key = ctx.keys.shardReplayRecords(ctx.streamPrefix, shardIndex, ctx.consumerGroup);
      return { key, build: (pipeline) => pipeline.hget(key, letter.ref) };
    }),
  );
  for (const [shardIndex, result] of results.entries()) {
    if ('error' in result) throw result.error;
    const [error, id] = result.replies[0];
    if (error) throw error;
    if (id) return { shardIndex, id: String(id) };
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
