import { deferralOf, ENTRY_FIELD } from '../protocol/entry-format';
import { InvalidRequestError } from '../protocol/errors';
import { checkOption } from '../protocol/option-ranges';
import type { KeyBuilder } from '../redis/keys';
import { type RedisClient, runScript, runScriptBuffer } from '../redis/scripts';
import { payloadText } from './dead-letters';

/**
 * Which schedule of a shard: its delayed entries (every group's, docs/runtime.md, Delayed delivery),
 * or, with `consumerGroup`, that group's deferred retries on it (Deferred retries).
 */
export interface ScheduleTarget {
  streamPrefix: string;
  shardIndex: number;
  /** A group's deferred retries; without it, the shard's delayed entries. */
  consumerGroup?: string;
}

/** One entry waiting in a schedule. */
export interface ScheduledEntry {
  /**
   * Its id in the schedule: a delayed entry's schedule id (`s` and 16 digits, as `send` answered),
   * or a deferred retry's schedule id (`d` and 16 digits, then `p` for an entry parked behind its
   * key's deferral, `n` for one of `deferredOrder: 'none'`; a stream id for one written before).
   * What `releaseScheduled` and `dropScheduled` take.
   */
  id: string;
  shardIndex: number;
  /** When it is due: epoch ms on Redis' clock; null while it waits to move (`waitingForMove`). */
  dueAt: number | null;
  /** `dueAt` minus Redis' clock at the read: negative when it is due already (its owner releases it in its next turn); null while it waits to move. */
  dueInMs: number | null;
  /**
   * A delayed entry due already and waiting to move to its key's shard after a resize
   * (docs/runtime.md, Delayed delivery): its move number (its shard's owner moves them in that
   * order, in its next turns); it has no due time then. Null for every other entry.
   */
  waitingForMove: number | null;
  key: string | undefined;
  codec: string | undefined;
  /** Its headers as stored (JSON), when it has any. */
  headers: string | undefined;
  /** A deferred retry: the attempts it has used (its next is this + 1). Undefined for a delayed entry. */
  attempts: number | undefined;
  /** The fields it is released with (flat name/value list); a binary codec's payload is not its bytes here: see `payloadBase64`. */
  fields: string[];
  /** The payload's bytes in base64, when they are not text. */
  payloadBase64: string | undefined;
  /** The payload for people, as `DeadLetter.payloadText`. */
  payloadText: string | undefined;
}

/** One page of a schedule, in due order. */
export interface SchedulePage {
  streamPrefix: string;
  shardIndex: number;
  /** The group whose deferred retries these are, or null for the shard's delayed entries. */
  consumerGroup: string | null;
  /** Entries in the whole schedule at the read. */
  total: number;
  /** Redis' clock (epoch ms) at the read. */
  readAt: number;
  entries: ScheduledEntry[];
  /** Pass as `after` for the next page; null when this page reached the end. */
  next: string | null;
}

export interface ReadScheduleOptions {
  /** At most this many entries (default 100; `admin.readSchedule.count` in OPTION_RANGES). */
  count?: number;
  /** The `next` of the previous page. */
  after?: string;
}

/** What making one entry due did. */
export interface ScheduleRelease {
  id: string;
  /** False when it is not in the schedule (released, dropped, never was). */
  found: boolean;
  /** True when its due time was moved to now; false when it was due already (or not found). */
  madeDue: boolean;
  /**
   * True when it is a delayed entry due already and waiting to move to its key's shard after a
   * resize (docs/runtime.md, Delayed delivery): its owner moves it in its next turn; it has no due
   * time any more (`previousDueAt` and `dueAt` null).
   */
  waitingToMove: boolean;
  /** The due time it had, epoch ms on Redis' clock; null when not found. */
  previousDueAt: number | null;
  /** Its due time now (Redis' clock at the call) when `madeDue`; else its due time (or null). */
  dueAt: number | null;
  /**
   * Other entries of its key made due with it (deferredOrder 'key'): a deferral's parked entries,
   * or a parked entry's deferral and fellow parked entries, kept in their order (docs/operations.md, Schedules).
   */
  keyEntriesMadeDue: number;
}

/** What dropping one entry did. */
export interface ScheduleDrop {
  id: string;
  /** False when it was not there (released, dropped, never was): nothing changed. */
  dropped: boolean;
  /** The due time it had, epoch ms on Redis' clock; null when it was not there. */
  dueAt: number | null;
  /** A dropped deferral's parked entries (deferredOrder 'key'), made due now: they waited only for it. */
  parkedMadeDue: number;
}

export const DEFAULT_SCHEDULE_PAGE = 100;
/** Entries one `makeScheduledDue` call moves at most (the script's own cap, MAX_MADE_DUE). */
const MADE_DUE_PER_CALL = 1000;

/**
 * A delayed entry waiting to move keeps its place in the schedule with its move number less 2^53 as
 * its score, at or below 0 (includes/schedule.lua MOVE_BASE): every due time sorts after it.
 */
const MOVE_BASE = 2 ** 53;

/** A delayed entry's schedule id, as `appendEntries-5.lua` writes it (`s` and its zero-padded sequence). */
const DELAYED_ID = /^s\d{16}$/;
/**
 * A deferred retry's or parked entry's schedule id (`d`, 16 digits, `p` parked or `n` not counted
 * per key: deferFenced-5.lua, parkFenced-5.lua), or the stream id a deferral written before took.
 */
const DEFERRED_ID = /^(?:d\d{16}[pn]?|\d{1,20}-\d{1,20})$/;
// The score may end in '.5': an entry moved before it was due scores half a millisecond before its due time (acceptMove-5.lua).
const CURSOR = /^(-?\d{1,16}(?:\.5)?):(s\d{16}|d\d{16}[pn]?|\d{1,20}-\d{1,20})$/;

/**
 * Checks an id before it becomes a script argument (SPEC 10.4): it must be exactly the kind of id
 * the schedule holds, a schedule id for delayed entries, a stream id for deferred retries.
 */
export function assertScheduleId(id: unknown, target: ScheduleTarget): string {
  const deferred = target.consumerGroup !== undefined;
  if (typeof id === 'string' && (deferred ? DEFERRED_ID : DELAYED_ID).test(id)) return id;
  throw new InvalidRequestError(
    deferred
      ? `deferred retry id ${JSON.stringify(id)} is invalid: it is "d" and 16 digits, then "p" for a parked entry or "n", e.g. d0000000000000012 (or the stream id of a deferral written before, e.g. 1764505000000-0; rsc schedule list --group shows them)`
      : `delayed entry id ${JSON.stringify(id)} is invalid: it is "s" and 16 digits, e.g. s0000000000000012 (rsc schedule list shows them)`,
  );
}

/**
 * The schedule's two keys (sorted set, fields), in the shard's slot, and the group's key states of
 * a deferred schedule (deferredOrder 'key'). Delayed entries count in no key state: the schedule's
 * own key stands in for it there (the scripts never read it for them; one slot, no extra key).
 */
function scheduleKeys(keys: KeyBuilder, target: ScheduleTarget): [string, string, string] {
  const { streamPrefix, shardIndex, consumerGroup } = target;
  if (consumerGroup === undefined) {
    const schedule = keys.shardSchedule(streamPrefix, shardIndex);
    return [schedule, keys.shardScheduledEntries(streamPrefix, shardIndex), schedule];
  }
  return [
    keys.shardDeferred(streamPrefix, shardIndex, consumerGroup),
    keys.shardDeferredEntries(streamPrefix, shardIndex, consumerGroup),
    keys.shardDeferredKeys(streamPrefix, shardIndex, consumerGroup),
  ];
}

/** One page of a schedule, in due order (readSchedule-2.lua). */
export async function readSchedule(
  redis: RedisClient,
  keys: KeyBuilder,
  target: ScheduleTarget,
  options: ReadScheduleOptions = {},
): Promise<SchedulePage> {
  const count = checkOption('admin.readSchedule.count', options.count ?? DEFAULT_SCHEDULE_PAGE);
  let afterDue = '';
  let afterId = '';
  if (options.after !== undefined) {
    const cursor = CURSOR.exec(String(options.after));
    if (!cursor) throw new InvalidRequestError(`after ${JSON.stringify(options.after)} is invalid: pass the next of the previous page`);
    [, afterDue, afterId] = cursor;
  }
  const reply = (await runScriptBuffer(redis, 'readSchedule', scheduleKeys(keys, target).slice(0, 2), [afterDue, afterId, count])) as [
    Buffer | number,
    Buffer,
    ...[Buffer, Buffer, Buffer[]][],
  ];
  const readAt = Number(reply[1].toString());
  const listed = reply.slice(2) as [Buffer, Buffer, Buffer[]][];
  const entries = listed.map(([id, score, values]) =>
    toScheduledEntry(target.shardIndex, id.toString(), Number(score.toString()), readAt, values),
  );
  const last = entries[entries.length - 1];
  // The cursor names the last entry's score as Redis holds it (a move's is no due time).
  const lastScore = listed.length > 0 ? Number(listed[listed.length - 1][1].toString()) : 0;
  return {
    streamPrefix: target.streamPrefix,
    shardIndex: target.shardIndex,
    consumerGroup: target.consumerGroup ?? null,
    total: Number(reply[0]),
    readAt,
    entries,
    next: entries.length === count ? `${lastScore}:${last.id}` : null,
  };
}

function toScheduledEntry(shardIndex: number, id: string, score: number, readAt: number, values: Buffer[]): ScheduledEntry {
  const fields: string[] = [];
  const byName = new Map<string, string>();
  let payloadBytes: Buffer | undefined;
  for (let i = 0; i + 1 < values.length; i += 2) {
    const name = values[i].toString();
    const value = values[i + 1].toString();
    fields.push(name, value);
    byName.set(name, value);
    if (name === ENTRY_FIELD.payload) payloadBytes = values[i + 1];
  }
  const codec = byName.get(ENTRY_FIELD.codec);
  // The text of bytes that are not UTF-8 is not those bytes: those go as base64, as a dead letter's.
  const binary = payloadBytes !== undefined && Buffer.compare(Buffer.from(payloadBytes.toString(), 'utf8'), payloadBytes) !== 0;
  const payloadBase64 = binary ? payloadBytes!.toString('base64') : undefined;
  const attempts = byName.get(ENTRY_FIELD.attempts);
  return {
    id,
    shardIndex,
    // Whole ms: an entry moved here before it was due scores half a millisecond before its due time (acceptMove-5.lua).
    dueAt: score > 0 ? Math.ceil(score) : null,
    dueInMs: score > 0 ? Math.ceil(score) - readAt : null,
    waitingForMove: score > 0 ? null : score + MOVE_BASE,
    key: byName.get(ENTRY_FIELD.key),
    codec,
    headers: byName.get(ENTRY_FIELD.headers),
    attempts: deferralOf(fields)?.attempts ?? (attempts === undefined ? undefined : Number(attempts)),
    fields,
    payloadBase64,
    payloadText: payloadText(fields, codec, payloadBase64),
  };
}

/**
 * Makes one entry due now (makeScheduledDue-3.lua): its due time becomes Redis' clock, so the
 * shard's owner releases it into the stream in its next turn (within about `blockMs`). The release
 * itself stays the owner's, fenced: nothing here writes to the stream. A deferral and the entries
 * parked behind it (deferredOrder 'key') are made due together, in their order.
 */
export async function releaseScheduled(redis: RedisClient, keys: KeyBuilder, target: ScheduleTarget, id: string): Promise<ScheduleRelease> {
  const checked = assertScheduleId(id, target);
  const [made, now, previous, withIt] = (await runScript(redis, 'makeScheduledDue', scheduleKeys(keys, target), [checked, 0])) as [
    number,
    string,
    string,
    number,
  ];
  const found = previous !== '';
  const waitingToMove = previous === 'moving';
  const previousDueAt = found && !waitingToMove ? Math.ceil(Number(previous)) : null;
  return {
    id: checked,
    found,
    madeDue: Number(made) === 1,
    waitingToMove,
    previousDueAt,
    dueAt: Number(made) === 1 ? Number(now) : previousDueAt,
    keyEntriesMadeDue: Number(withIt),
  };
}

/**
 * Makes every entry of a schedule due now, a slice of at most 1,000 per script call (so one call
 * never holds Redis for a whole large schedule); answers how many were moved. Entries scheduled
 * meanwhile with a later due time may be moved too, or not.
 */
export async function releaseWholeSchedule(redis: RedisClient, keys: KeyBuilder, target: ScheduleTarget): Promise<number> {
  const scheduleKeysOf = scheduleKeys(keys, target);
  let total = 0;
  for (;;) {
    const [made] = (await runScript(redis, 'makeScheduledDue', scheduleKeysOf, ['', MADE_DUE_PER_CALL])) as [number];
    total += Number(made);
    if (Number(made) < MADE_DUE_PER_CALL) return total;
  }
}

/**
 * Removes one entry and its fields together (dropScheduled-3.lua): it is never released. An entry
 * counted in its key's state (deferredOrder 'key') is counted out of it in the same script; a
 * dropped deferral's parked entries are made due now, in their order. A delayed entry waiting to
 * move to its key's shard after a resize is refused (InvalidRequestError naming it), nothing changed.
 */
export async function dropScheduled(redis: RedisClient, keys: KeyBuilder, target: ScheduleTarget, id: string): Promise<ScheduleDrop> {
  const checked = assertScheduleId(id, target);
  const [dropped, due, parked] = (await runScript(redis, 'dropScheduled', scheduleKeys(keys, target), [checked])) as [
    number,
    string,
    number,
  ];
  if (Number(dropped) === -1) {
    throw new InvalidRequestError(
      `delayed entry ${checked} of shard ${target.shardIndex} of "${target.streamPrefix}" is due and waits to move to its key's shard after a resize (its owner moves it within about blockMs): it cannot be dropped while it moves; once moved it is in that shard's stream`,
    );
  }
  return { id: checked, dropped: Number(dropped) === 1, dueAt: due === '' ? null : Math.ceil(Number(due)), parkedMadeDue: Number(parked) };
}
