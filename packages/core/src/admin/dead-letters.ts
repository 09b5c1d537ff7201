import { BUILT_IN_CODECS } from '../protocol/codecs';
import { DEAD_LETTER_CAUSES, type DeadLetterCause } from '../protocol/dead-letter-cause';
import { InvalidRequestError } from '../protocol/errors';
import { checkOption } from '../protocol/option-ranges';
import { compareStreamIds } from '../protocol/stream-ids';
import { ENTRY_FIELD } from '../protocol/entry-format';
import type { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';

/** One dead letter of a group: an entry that could not be handled, with why, by whom, how often. */
export interface DeadLetter {
  /**
   * `<shardIndex>/<deadLetterId>`: names the dead letter across the group's shards (ids of two
   * shards' dead-letter streams may be equal). What `showDeadLetter`, `replayDeadLetter` and
   * `purgeDeadLetter` take.
   */
  ref: string;
  /** The dead letter's own id in its shard's dead-letter stream; its time is when it was written. */
  deadLetterId: string;
  /** When it was dead-lettered (the time part of `deadLetterId`), ISO 8601. */
  deadLetteredAt: string;
  shardIndex: number;
  /** The entry's id in its shard stream. */
  entryId: string;
  /** The entry's routing key, when it had one. */
  key: string | undefined;
  /** The member that gave up on it. */
  memberId: string;
  /**
   * The consumer group that gave up on it (several groups may share a destination through the
   * member option `deadLetter.stream`). Undefined for dead letters written before it was recorded.
   */
  consumerGroup: string | undefined;
  /**
   * Why: `undecodable`, `invalid` (the member's `schema` refused it), `attempts-exhausted`, or `non-retryable` (the member's `deadLetter.nonRetryable`
   * matched at the first failure). Undefined for dead letters written before it was recorded.
   */
  cause: DeadLetterCause | undefined;
  /** Why: the last handler error (`Name: message`), or why it could not be decoded. */
  error: string;
  /**
   * The last handler error's stack trace (cut to 4096 characters), when it had one and the member
   * kept it (`deadLetter.includeStack`, default true); undefined otherwise.
   */
  stack: string | undefined;
  /** Handler attempts made (0 when it could not be decoded). */
  attempts: number;
  /**
   * The entry's own fields, as the producer wrote them (flat name/value list). The payload field
   * (`p`) of a binary codec's entry is not its bytes here: see `payloadBytes`.
   */
  fields: string[];
  /** The codec that wrote the entry (its `c` field); undefined for entries that name none (JSON, or the writer's own). */
  codec: string | undefined;
  /** The payload's bytes in base64, when they are not text (a binary codec such as msgpack wrote them). */
  payloadBase64: string | undefined;
  /**
   * The payload for people (CLI, dashboard): its text; a msgpack payload decoded and shown as JSON
   * (bytes inside it as `{"base64": …}`); other bytes as `base64:…`. Undefined without a payload.
   */
  payloadText: string | undefined;
}

/** Which dead letters a list, replay or purge takes; every condition given must hold. */
export interface DeadLetterFilter {
  /** Only this shard's. */
  shardIndex?: number;
  /** Only entries with this routing key. */
  key?: string;
  /** Only those whose error contains this text (case-sensitive). */
  errorContains?: string;
  /** Only those dead-lettered at or after this time (a Date or epoch ms). */
  since?: Date | number;
  /** Only those dead-lettered at or before this time (a Date or epoch ms). */
  until?: Date | number;
}

export interface ReadDeadLettersOptions extends DeadLetterFilter {
  /** At most this many, the oldest first. Default 1000. */
  count?: number;
}

export const DEFAULT_DEAD_LETTER_COUNT = 1000;
const PAGE = 500;

/** `<shardIndex>/<deadLetterId>`, see `DeadLetter.ref`. */
export function deadLetterRef(shardIndex: number, deadLetterId: string): string {
  return `${shardIndex}/${deadLetterId}`;
}

/** Splits a `DeadLetter.ref`; a malformed one is an `InvalidRequestError` naming it. */
export function parseDeadLetterRef(ref: string): { shardIndex: number; deadLetterId: string } {
  const match = /^(\d{1,5})\/(\d{1,20}-\d{1,20})$/.exec(String(ref));
  if (!match) {
    throw new InvalidRequestError(
      `dead letter ref ${JSON.stringify(ref)} is invalid: use <shardIndex>/<deadLetterId>, e.g. 3/1764505000000-0 (rsc dead-letters list shows them)`,
    );
  }
  return { shardIndex: Number(match[1]), deadLetterId: match[2] };
}

/** Checks a filter's fields, naming the one that is wrong. */
export function assertDeadLetterFilter(filter: DeadLetterFilter): void {
  const { shardIndex, key, errorContains, since, until } = filter;
  if (shardIndex !== undefined) checkOption('shardIndex', shardIndex);
  if (key !== undefined && typeof key !== 'string') throw new TypeError(`key must be a string, got ${typeof key}`);
  if (errorContains !== undefined && typeof errorContains !== 'string')
    throw new TypeError(`errorContains must be a string, got ${typeof errorContains}`);
  for (const [name, value] of [
    ['since', since],
    ['until', until],
  ] as const) {
    if (value !== undefined && !Number.isFinite(toMs(value)))
      throw new RangeError(`${name} must be a Date or epoch milliseconds, got ${String(value)}`);
  }
}

const toMs = (value: Date | number): number => (value instanceof Date ? value.getTime() : value);

/**
 * Dead letters of a destination (a consumer group's name, or the name its members give as
 * `deadLetter.stream`) across shards 0..span-1 (the stream's deadLetterSpan: shards retired by
 * deleteDrainedShards keep their letters; each shard keeps its own dead-letter stream,
 * in its slot, so that writing one is fenced with the ack) that match `filter`: the oldest `count`,
 * sorted by the time they were written (ties: by shard). Reads each shard a page at a time.
 */
export async function readDeadLetters(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  destination: string,
  span: number,
  count: number,
  filter: DeadLetterFilter = {},
): Promise<DeadLetter[]> {
  assertDeadLetterFilter(filter);
  const shards = filter.shardIndex === undefined ? Array.from({ length: span }, (_, i) => i) : [filter.shardIndex];
  const start = filter.since === undefined ? '-' : String(Math.max(0, Math.floor(toMs(filter.since))));
  const end = filter.until === undefined ? '+' : String(Math.max(0, Math.floor(toMs(filter.until))));
  // One shard per command, each routed by its own key (Cluster-safe); shards read side by side.
  const perShard = await Promise.all(
    shards.map(async (shard) => {
      const stream = keys.shardDeadLetterStream(streamPrefix, shard, destination);
      const found: DeadLetter[] = [];
      let from = start;
      while (found.length < count) {
        const page = await redis.xrange(stream, from, end, 'COUNT', PAGE);
        for (const [id, fields] of page) {
          const letter = toDeadLetter(shard, id, fields);
          if (matches(letter, filter)) found.push(letter);
        }
        if (page.length < PAGE) break;
        from = `(${page[page.length - 1][0]}`;
      }
      return found;
    }),
  );
  const letters = perShard.flat();
  letters.sort((a, b) => compareStreamIds(a.deadLetterId, b.deadLetterId) || a.shardIndex - b.shardIndex);
  return letters.slice(0, count);
}

/** One dead letter by shard and id, or null when it is not there (replayed, purged, never was). */
export async function readDeadLetter(
  redis: RedisClient,
  keys: KeyBuilder,
  streamPrefix: string,
  destination: string,
  shardIndex: number,
  deadLetterId: string,
): Promise<DeadLetter | null> {
  const [found] = await redis.xrange(keys.shardDeadLetterStream(streamPrefix, shardIndex, destination), deadLetterId, deadLetterId);
  return found ? toDeadLetter(shardIndex, found[0], found[1]) : null;
}

function matches(letter: DeadLetter, filter: DeadLetterFilter): boolean {
  if (filter.key !== undefined && letter.key !== filter.key) return false;
  if (filter.errorContains !== undefined && !letter.error.includes(filter.errorContains)) return false;
  return true;
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
  let key: string | undefined;
  let codec: string | undefined;
  for (let i = 0; i + 1 < original.length; i += 2) {
    if (original[i] === ENTRY_FIELD.key) key = original[i + 1];
    else if (original[i] === ENTRY_FIELD.codec) codec = original[i + 1];
  }
  const base64 = fields.get('payloadBase64');
  return {
    ref: deadLetterRef(shardIndex, deadLetterId),
    deadLetterId,
    deadLetteredAt: new Date(Number(deadLetterId.split('-')[0])).toISOString(),
    shardIndex,
    entryId: fields.get('entryId') ?? '',
    key,
    memberId: fields.get('memberId') ?? '',
    consumerGroup: fields.get('consumerGroup'),
    cause: DEAD_LETTER_CAUSES.find((cause) => cause === fields.get('cause')),
    error: fields.get('error') ?? '',
    stack: fields.get('stack'),
    attempts: Number(fields.get('attempts') ?? 0),
    fields: original,
    codec,
    payloadBase64: base64,
    payloadText: payloadText(original, codec, base64),
  };
}

export function payloadText(fields: string[], codec: string | undefined, base64: string | undefined): string | undefined {
  if (base64 === undefined) {
    for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === ENTRY_FIELD.payload) return fields[i + 1];
    return undefined;
  }
  const builtIn = codec === undefined ? undefined : BUILT_IN_CODECS.get(codec);
  if (builtIn?.binary) {
    try {
      return JSON.stringify(builtIn.decode(Buffer.from(base64, 'base64')), readableJson);
    } catch {
      // msgpackr missing, or bytes it cannot read: shown as bytes
    }
  }
  return `base64:${base64}`;
}

/** JSON for values a binary codec carries that JSON has no form for. */
function readableJson(this: unknown, _key: string, value: unknown): unknown {
  if (value instanceof Uint8Array) return { base64: Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64') };
  if (
    value !== null &&
    typeof value === 'object' &&
    (value as { type?: unknown }).type === 'Buffer' &&
    Array.isArray((value as { data?: unknown }).data)
  ) {
    return { base64: Buffer.from((value as { data: number[] }).data).toString('base64') };
  }
  if (value instanceof Map) return Object.fromEntries(value);
  if (value instanceof Set) return [...value];
  if (typeof value === 'bigint') return value.toString();
  return value;
}
