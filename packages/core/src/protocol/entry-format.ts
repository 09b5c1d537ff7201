import { type PayloadCodec } from './codecs';

export { assertCodec, type BinaryCodec, type PayloadCodec, type TextCodec, jsonCodec, msgpackCodec } from './codecs';

/**
 * How an entry is laid out in a shard stream, shared by the producer and the member runtime.
 * Fields: `p` the encoded payload (required; bytes for a binary codec), `c` the name of the codec
 * that wrote it (absent in entries written before codecs were named: the reader's own codec then),
 * `k` the routing key (optional), `h` the headers as JSON (optional); a released deferred retry also
 * `g` its group and `a` its attempts so far, a positive integer (see Deferral, deferralOf: one without
 * both is no deferral); a parked entry that never ran `a` 1 and `q` 2 (NEVER_RAN); an entry appended again
 * behind its key's copies (deferredOrder 'key') also `r` 1. Anything else in an entry is
 * ignored; an entry without `p` was not written by a producer of this library and goes to the
 * dead-letter stream.
 */
export const ENTRY_FIELD = {
  payload: 'p',
  codec: 'c',
  key: 'k',
  headers: 'h',
  deferredFor: 'g',
  attempts: 'a',
  parked: 'q',
  reappended: 'r',
} as const;

/**
 * How a parked (or appended-again) entry that never ran carries its 0 attempts: `a` 1 with `q` 2,
 * a positive `a`, so that a member of a version that knows only deferrals (`g` and a positive `a`)
 * acknowledges it unhandled in the other groups rather than run it again. The version before wrote
 * `a` 0 with `q` 1 (LEGACY_NEVER_RAN), still read as 0 attempts.
 */
export const NEVER_RAN = { attempts: '1', parked: '2' } as const;
const LEGACY_NEVER_RAN = { attempts: '0', parked: '1' } as const;

/**
 * A deferred retry as released into its shard stream (docs/runtime.md, Deferred retries): the group
 * that deferred it (`g`) and the attempts it had used (`a`). Other groups acknowledge it unhandled;
 * the deferring group's next attempt is `attempts + 1`.
 */
export interface Deferral {
  consumerGroup: string;
  attempts: number;
  /** Appended again at the stream end behind its key's copies (`r`; deferredOrder 'key'), not released from the schedule. */
  reappended: boolean;
}

/**
 * The deferral an entry carries, if it is a released deferred retry or parked entry: both `g` and
 * `a`, `a` a positive integer in decimal, as deferFenced-5.lua and parkFenced-5.lua write them
 * (`a` 1 with `q` 2 beside it: a parked entry that never ran, 0 attempts, NEVER_RAN); or `a` exactly
 * '0' with `q` exactly '1' beside it (the same, as the version before wrote it).
 * An entry written by other code with a `g` of its own and no such `a` (a '0' without that `q`
 * among them) is an ordinary entry, handled by every group: taken for another group's deferral it
 * would be acknowledged unhandled, with no trace.
 */
export function deferralOf(fields: readonly string[]): Deferral | undefined {
  let consumerGroup: string | undefined;
  let attempts: string | undefined;
  let parked: string | undefined;
  let reappended = false;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] === ENTRY_FIELD.deferredFor) consumerGroup = fields[i + 1];
    else if (fields[i] === ENTRY_FIELD.attempts) attempts = fields[i + 1];
    else if (fields[i] === ENTRY_FIELD.parked) parked = fields[i + 1];
    else if (fields[i] === ENTRY_FIELD.reappended) reappended = fields[i + 1] === '1';
  }
  if (consumerGroup === undefined || attempts === undefined) return undefined;
  const neverRan =
    (attempts === NEVER_RAN.attempts && parked === NEVER_RAN.parked) ||
    (attempts === LEGACY_NEVER_RAN.attempts && parked === LEGACY_NEVER_RAN.parked);
  if (neverRan) return { consumerGroup, attempts: 0, reappended };
  if (!/^[1-9][0-9]{0,15}$/.test(attempts)) return undefined;
  const count = Number(attempts);
  return Number.isSafeInteger(count) ? { consumerGroup, attempts: count, reappended } : undefined;
}

/**
 * A codec that writes stored payloads back as they are (dead-letter replay): it names, per payload,
 * the codec that originally wrote it, so the entry keeps its `c` field.
 */
export const ENTRY_CODEC_OF = Symbol('entryCodecOf');
export type PassThroughCodec = PayloadCodec & { [ENTRY_CODEC_OF](payload: unknown): string | undefined };

/** A message as a handler sees it. */
export interface StreamMessage<T = unknown> {
  /** The entry id in its shard stream. */
  id: string;
  streamPrefix: string;
  shardIndex: number;
  key: string | undefined;
  payload: T;
  headers: Record<string, string>;
  /**
   * How many times this entry has been handed to a handler, counting deliveries to members that
   * crashed or lost the shard (Redis' delivery count) and retries in place. 1 on the first try.
   */
  deliveryCount: number;
  /**
   * Fires when the member stops waiting for this handler call: the entry is retried (timeout) or
   * left to the shard's next owner, which runs it again unless this call's acknowledgement still
   * lands first (the fencing token refuses it once the shard has changed hands). `signal.reason` is a `HandlerAbortedError` whose `reason` is `handler-timeout`
   * (`handlerTimeoutMs` passed), `revoked` (the shard was revoked and `revocationTimeoutMs` passed),
   * `shard-lost` (lease lost, fenced: the shard may be someone else's already) or `stopped`
   * (`stop()`'s `shutdownTimeoutMs` passed, or `abort()`). Pass it to `fetch`, database drivers and
   * timers so a call that can no longer count stops its work instead of racing the next owner.
   * Pausing does not fire it: in-flight calls finish and are acknowledged. Each call (each retry)
   * has its own signal. It is made when first read (a getter of the message's class), so a spread
   * copy of the message (`{ ...message }`) does not carry it: pass `message.signal` itself on.
   *
   * @example
   * handler: async (message) => { await fetch(url, { method: 'POST', body: ..., signal: message.signal }); }
   */
  signal: AbortSignal;
  /**
   * ackMode 'manual': the entry is handled; acknowledges it under the shard's fencing token. Resolves
   * once the acknowledgement landed; rejects with an `AckRefusedError` when it cannot count: the
   * shard was revoked or lost meanwhile (its next owner runs the entry again), the entry was
   * already settled (acked, nacked, failed, or `ackTimeoutMs` passed), or ackMode is 'auto'.
   */
  ack(): Promise<void>;
  /**
   * ackMode 'manual': the entry failed this attempt; it is retried in place (after `retryAfterMs`,
   * default the member's retry backoff) or dead-lettered once `maxAttempts` are used. `defer: true`
   * (or the member's `retryMode: 'deferred'`) retries it deferred instead: acknowledged and put in
   * the group's durable schedule in one fenced step, the shard going on at once (docs/runtime.md,
   * Deferred retries). Rejects with an `AckRefusedError` like `ack()`.
   *
   * @example
   * await message.nack({ retryAfterMs: 5 * 60_000, defer: true }); // try again in 5 minutes
   */
  nack(options?: { retryAfterMs?: number; reason?: string; defer?: boolean }): Promise<void>;
}

export interface OutgoingMessage<T = unknown> {
  /** Routes the entry: all entries of one key go to one shard, in order. */
  key?: string;
  payload: T;
  headers?: Record<string, string>;
  /** Writes to this shard instead of routing by key. */
  shardIndex?: number;
  /**
   * Delayed delivery (docs/runtime.md, Delayed delivery): the entry waits this long (ms, measured
   * on Redis' clock from its write) in its shard's schedule, durably, then enters the shard stream
   * and takes its place in its key's order. 0 to 365 days; 0 writes it at once.
   *
   * @example
   * await producer.send({ key: 'user-42', payload: reminder, delayMs: 60 * 60 * 1000 }); // in an hour
   */
  delayMs?: number;
  /**
   * Delayed delivery at a time (a Date or epoch ms, the sender's clock), at most 365 days ahead; a
   * time already past writes the entry at once. Not with `delayMs`.
   */
  deliverAt?: Date | number;
}

export type DecodedEntry =
  | { ok: true; key: string | undefined; payload: unknown; headers: Record<string, string>; codec: string }
  | { ok: false; reason: string; key: string | undefined };

/** The routing key field of a raw entry (flat field list), without decoding anything else. */
export function routingKeyOf(fields: readonly string[]): string | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === ENTRY_FIELD.key) return fields[i + 1];
  return undefined;
}

/**
 * An entry as read: the flat field list as text, and the payload's bytes when the read kept them
 * (binary codecs decode from those; the text of a binary payload is not its bytes).
 */
export interface EntryFields {
  fields: readonly string[];
  payloadBytes?: Buffer;
}

/**
 * Decodes a raw entry with the codec named in it (`codecs`, by name), or with `codec` when it names
 * none. Never throws: a bad entry is a reason to dead-letter it.
 */
export function decodeEntry(
  entry: EntryFields | readonly string[],
  codec: PayloadCodec,
  codecs?: ReadonlyMap<string, PayloadCodec>,
): DecodedEntry {
  const { fields, payloadBytes } = isFieldList(entry) ? { fields: entry, payloadBytes: undefined } : entry;
  let payload: string | undefined;
  let key: string | undefined;
  let headers: string | undefined;
  let codecName: string | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const name = fields[i];
    if (name === ENTRY_FIELD.payload) payload = fields[i + 1];
    else if (name === ENTRY_FIELD.codec) codecName = fields[i + 1];
    else if (name === ENTRY_FIELD.key) key = fields[i + 1];
    else if (name === ENTRY_FIELD.headers) headers = fields[i + 1];
  }
  if (payload === undefined)
    return { ok: false, reason: `the entry has no "${ENTRY_FIELD.payload}" field: not written by a StreamProducer`, key };
  let decodedHeaders: Record<string, string> = {};
  if (headers !== undefined) {
    try {
      const parsed: unknown = JSON.parse(headers);
      if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
      decodedHeaders = parsed as Record<string, string>;
    } catch (error) {
      return { ok: false, reason: `the headers cannot be decoded: ${(error as Error).message}`, key };
    }
  }
  const used = codecName === undefined ? codec : (codecs?.get(codecName) ?? (codecName === codec.name ? codec : undefined));
  if (used === undefined) {
    const known = [...(codecs?.keys() ?? [codec.name])].join(', ');
    return {
      ok: false,
      reason: `the entry was written with codec "${codecName}", which this member does not know (it knows ${known}); add it to the member's \`codecs\``,
      key,
    };
  }
  try {
    const decoded = used.binary ? used.decode(payloadBytes ?? Buffer.from(payload, 'utf8')) : used.decode(payload);
    return { ok: true, key, payload: decoded, headers: decodedHeaders, codec: used.name };
  } catch (error) {
    return { ok: false, reason: `the payload cannot be decoded by codec "${used.name}": ${(error as Error).message}`, key };
  }
}

function isFieldList(entry: EntryFields | readonly string[]): entry is readonly string[] {
  return Array.isArray(entry);
}

/** The flat field list of an entry, ready for XADD: text, and the payload's bytes for a binary codec. */
export function encodeEntry(message: OutgoingMessage, codec: PayloadCodec): (string | Buffer)[] {
  const encoded: string | Uint8Array = codec.encode(message.payload);
  const passThrough = (codec as Partial<PassThroughCodec>)[ENTRY_CODEC_OF];
  const codecName = passThrough ? passThrough(message.payload) : codec.name;
  const fields: (string | Buffer)[] = [ENTRY_FIELD.payload, typeof encoded === 'string' ? encoded : toBuffer(encoded)];
  if (codecName !== undefined) fields.push(ENTRY_FIELD.codec, codecName);
  if (message.key !== undefined) fields.push(ENTRY_FIELD.key, message.key);
  if (message.headers !== undefined && Object.keys(message.headers).length > 0) {
    fields.push(ENTRY_FIELD.headers, JSON.stringify(message.headers));
  }
  return fields;
}

function toBuffer(bytes: Uint8Array): Buffer {
  if (Buffer.isBuffer(bytes)) return bytes;
  if (bytes instanceof Uint8Array) return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  throw new TypeError(`a codec's encode must return a string or bytes (Uint8Array), got ${typeof bytes}`);
}
