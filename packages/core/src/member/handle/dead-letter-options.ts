import type { DeadLetterCause } from '../../protocol/dead-letter-cause';
import type { StreamMessage } from '../../protocol/entry-format';
import { assertConsumerGroup } from '../../protocol/names';
import { checkOption } from '../../protocol/option-ranges';

export type { DeadLetterCause };

/** An error class, for `deadLetter.nonRetryableErrors` (matched with `instanceof`). */
// biome-ignore lint/suspicious/noExplicitAny: a constructor of any arguments; `unknown[]` would refuse classes whose constructors take typed parameters
export type ErrorClass = abstract new (...args: any[]) => unknown;

/** What `deadLetter.onDeadLetter` is told, after the dead letter was written and the entry acknowledged. */
export interface DeadLetterNotice<T = unknown> {
  shardIndex: number;
  /** The entry's id in its shard stream. */
  entryId: string;
  /**
   * The dead letter's id in its shard's dead-letter stream, and its `ref` (`<shard>/<id>`) for
   * `CoordinatorAdmin.showDeadLetter`/`replayDeadLetter`/`purgeDeadLetter`. Empty when the write's
   * reply was lost and its resend found it done (the letter is there; list it to find it).
   */
  deadLetterId: string;
  ref: string;
  /** The dead-letter destination name (`deadLetter.stream`, by default the consumer group). */
  destination: string;
  cause: DeadLetterCause;
  /** The last error (`Name: message`), or why the entry could not be decoded. */
  reason: string;
  /** Handler attempts made (0 when it could not be decoded). */
  attempts: number;
  /** The last error itself; undefined when the entry could not be decoded. */
  error: unknown;
  /** The message the handler saw; undefined when the entry could not be decoded. */
  message: StreamMessage<T> | undefined;
}

/** Member options for dead letters (docs/runtime.md, "Dead letters"). */
export interface DeadLetterOptions<T = unknown> {
  /**
   * The destination's name: dead letters go to one stream per shard,
   * `<keyPrefix>:shard:{<streamPrefix>:<i>}:dead-letter:<stream>`, in the shard's hash slot, so that
   * writing one stays atomic with the fencing check and the ack. Same rules as a consumer group
   * name. Default: the consumer group. Groups that give the same name share their dead letters; the
   * admin API and `rsc dead-letters` take this name where they take a group.
   */
  stream?: string;
  /**
   * Keep about this many dead letters per shard: each write trims the shard's dead-letter stream
   * with `XADD MAXLEN ~`, which DROPS THE OLDEST dead letters (for good: they are not replayable
   * afterwards). Approximate: Redis trims whole stream nodes (`stream-node-max-entries`, 100 by
   * default), so a shard may hold up to that many more. Default: no limit.
   */
  maxLen?: number;
  /**
   * Errors not worth retrying: when this returns true for a handler's failure, the entry goes to
   * the dead letters at once (cause `non-retryable`), whatever `maxAttempts` says. A predicate that
   * throws is reported ('error') and the entry is retried as usual.
   */
  nonRetryable?: (error: unknown, message: StreamMessage<T>) => boolean;
  /** Error classes not worth retrying (`error instanceof C`); combined with `nonRetryable` (either one suffices). */
  nonRetryableErrors?: readonly ErrorClass[];
  /**
   * Called after a dead letter was written and its entry acknowledged (an alert, a log line, a
   * copy elsewhere). Not awaited: the shard goes on with its next entry. When it throws or its
   * promise rejects, the member emits 'error' and counts it in `stats().deadLetterHookFailures`;
   * the dead letter stays written.
   */
  onDeadLetter?: (notice: DeadLetterNotice<T>) => unknown;
  /**
   * Keep the failure's stack trace in the dead letter (its `stack` field, cut to
   * DEAD_LETTER_STACK_MAX_CHARS) beside its `Name: message`. Default true; false keeps stacks (file
   * paths, line numbers) out of Redis.
   */
  includeStack?: boolean;
}

/**
 * The most of a stack trace a dead letter keeps: enough for the frames that matter (the handler's
 * own), while a deep or generated stack cannot make every dead letter of a poison stream kilobytes long.
 */
export const DEAD_LETTER_STACK_MAX_CHARS = 4096;

export interface ResolvedDeadLetterOptions<T = unknown> {
  stream: string;
  /** 0: no limit. */
  maxLen: number;
  includeStack: boolean;
  /** Undefined when neither `nonRetryable` nor `nonRetryableErrors` was given. */
  isNonRetryable: ((error: unknown, message: StreamMessage<T>) => boolean) | undefined;
  onDeadLetter: ((notice: DeadLetterNotice<T>) => unknown) | undefined;
}

/** Checks `deadLetter` and fills its defaults; a bad field is an error naming `deadLetter.<field>` and the value. */
export function resolveDeadLetterOptions<T>(
  options: DeadLetterOptions<T> | undefined,
  consumerGroup: string,
): ResolvedDeadLetterOptions<T> {
  if (options === undefined)
    return { stream: consumerGroup, maxLen: 0, includeStack: true, isNonRetryable: undefined, onDeadLetter: undefined };
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError(
      `deadLetter must be an object, got ${options === null ? 'null' : Array.isArray(options) ? 'an array' : typeof options}`,
    );
  }
  const known = new Set(['stream', 'maxLen', 'nonRetryable', 'nonRetryableErrors', 'onDeadLetter', 'includeStack']);
  for (const name of Object.keys(options)) {
    if (!known.has(name)) throw new TypeError(`deadLetter.${name} is not an option (known: ${[...known].join(', ')})`);
  }
  const stream = options.stream === undefined ? consumerGroup : assertConsumerGroup(options.stream, 'deadLetter.stream');
  const maxLen = options.maxLen === undefined ? 0 : checkOption('member.deadLetter.maxLen', options.maxLen);
  const { nonRetryable, nonRetryableErrors, onDeadLetter, includeStack = true } = options;
  if (typeof includeStack !== 'boolean') throw new TypeError(`deadLetter.includeStack must be a boolean, got ${typeOf(includeStack)}`);
  if (nonRetryable !== undefined && typeof nonRetryable !== 'function') {
    throw new TypeError(`deadLetter.nonRetryable must be a function (error, message) => boolean, got ${typeOf(nonRetryable)}`);
  }
  if (nonRetryableErrors !== undefined) {
    if (!Array.isArray(nonRetryableErrors))
      throw new TypeError(`deadLetter.nonRetryableErrors must be an array of error classes, got ${typeOf(nonRetryableErrors)}`);
    nonRetryableErrors.forEach((value: unknown, i) => {
      if (typeof value !== 'function' || typeof (value as { prototype?: unknown }).prototype !== 'object') {
        throw new TypeError(`deadLetter.nonRetryableErrors[${i}] must be a class (a constructor), got ${typeOf(value)}`);
      }
    });
  }
  if (onDeadLetter !== undefined && typeof onDeadLetter !== 'function') {
    throw new TypeError(`deadLetter.onDeadLetter must be a function, got ${typeOf(onDeadLetter)}`);
  }
  const classes = nonRetryableErrors ? [...nonRetryableErrors] : [];
  const isNonRetryable =
    nonRetryable === undefined && classes.length === 0
      ? undefined
      : (error: unknown, message: StreamMessage<T>) =>
          classes.some((c) => error instanceof c) || (nonRetryable !== undefined && nonRetryable(error, message) === true);
  return { stream, maxLen, includeStack, isNonRetryable, onDeadLetter };
}

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' || typeof value === 'function' ? typeof value : `${typeof value} ${JSON.stringify(value)}`;
}

/** The member's 'dead-letter' event: an entry was written to the dead letters and acknowledged. */
export interface DeadLetterEvent {
  shardIndex: number;
  /** The entry's id in its shard stream. */
  id: string;
  reason: string;
  attempts: number;
  cause: DeadLetterCause;
  /** The dead letter's id ('' when a resent write found its first run done). */
  deadLetterId: string;
  /** The destination name (`deadLetter.stream`). */
  destination: string;
}
