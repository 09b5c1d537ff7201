import { ShardError } from '../consumption-errors';
import type { EventEmitter } from 'node:events';
import type { StreamMessage } from '../../protocol/entry-format';
import type { RawEntry, ShardClient } from '../../redis/shard-client';
import { DEAD_LETTER_STACK_MAX_CHARS, type DeadLetterCause, type DeadLetterNotice } from './dead-letter-options';
import type { ResolvedMemberOptions } from '../member-options';
import { sideWriteWhileOwned } from './fenced-side-write';
import { type PollerEvents, type ShardSet, type ShardState } from '../shard-state';

/** Why an entry is dead-lettered, and what the handler saw (undefined for an entry that could not be decoded). */
export interface DeadLetterFailure {
  cause: DeadLetterCause;
  reason: string;
  attempts: number;
  error: unknown;
  message: StreamMessage | undefined;
}

export function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as PromiseLike<unknown>).then === 'function'
  );
}

/** Writes dead letters (fenced, with the entry's ack) and tells `deadLetter.onDeadLetter`. */
export class DeadLetterWriter {
  /** `onDeadLetter` calls that threw or rejected (`stats().deadLetterHookFailures`). */
  hookFailures = 0;

  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
  ) {}

  /**
   * Writes the dead letter and acks the entry in one fenced script. A failed write (WRONGTYPE, OOM,
   * Redis unreachable, or no answer within commandCallTimeoutMs: SPEC 10.1) is retried with backoff while the shard is owned, each failure an 'error'
   * and the condition listed in `problems` until it clears; the shard's later entries (of the key,
   * with lanes) wait. The caller holds no worker meanwhile: other shards go on (SPEC 10.8). When the shard is released the next owner handles the entry (and
   * dead-letters it) again. Refused as fenced: nothing was written or acked, and the shard is given
   * up locally like any fenced call. Written: the 'dead-letter' event, then `onDeadLetter`.
   * Resolves true when written.
   */
  async write(state: ShardState, entry: RawEntry, letter: DeadLetterFailure): Promise<boolean> {
    const { stream: destination, maxLen } = this.options.deadLetter;
    const { cause, reason, attempts } = letter;
    const stack = this.options.deadLetter.includeStack ? stackOf(letter.error) : undefined;
    const written = await sideWriteWhileOwned(this.shards, this.events, this.options, state, entry.id, {
      problem: `dead-letter ${entry.id}`,
      doing: `writing the dead letter of ${entry.id}`,
      refused: `dead letter of ${entry.id}`,
      call: () =>
        this.client.deadLetter(state.index, state.grantEpoch, entry, { destination, maxLen, error: reason, attempts, cause, stack }),
      written: (deadLetterId) =>
        this.events.emit('dead-letter', { shardIndex: state.index, id: entry.id, reason, attempts, cause, deadLetterId, destination }),
    });
    if (written === null || written === undefined) return false;
    this.notify(state, {
      shardIndex: state.index,
      entryId: entry.id,
      deadLetterId: written,
      ref: written === '' ? '' : `${state.index}/${written}`,
      destination,
      cause,
      reason,
      attempts,
      error: letter.error,
      message: letter.message,
    });
    return true;
  }

  /**
   * Calls `onDeadLetter` without waiting for it: a slow or hung hook must not hold the shard. Its
   * failure is one 'error' and a count in stats; the dead letter is written whatever it does.
   */
  private notify(state: ShardState, notice: DeadLetterNotice): void {
    const hook = this.options.deadLetter.onDeadLetter;
    if (!hook) return;
    const fail = (error: unknown) => {
      this.hookFailures += 1;
      const text = error instanceof Error ? error.message : String(error);
      this.events.emit(
        'error',
        new ShardError(
          `shard ${state.index}: deadLetter.onDeadLetter failed for ${notice.entryId} (dead letter ${notice.ref || 'written'}): ${text}; the dead letter stays written`,
          state.index,
          error,
        ),
      );
    };
    try {
      const result = hook(notice);
      if (isThenable(result)) Promise.resolve(result).catch(fail);
    } catch (error) {
      fail(error);
    }
  }
}

/** An error's stack trace, cut to DEAD_LETTER_STACK_MAX_CHARS; undefined when it has none (a thrown string, an object). */
export function stackOf(error: unknown): string | undefined {
  const stack = error instanceof Error ? error.stack : undefined;
  if (typeof stack !== 'string' || stack === '') return undefined;
  return stack.length > DEAD_LETTER_STACK_MAX_CHARS ? `${stack.slice(0, DEAD_LETTER_STACK_MAX_CHARS - 1)}…` : stack;
}

/**
 * `Name: message` of an error, or its string form. An error class that does not set `name` (Nest's
 * RpcException, WsException) still says `Error`: its class's name is given instead, so a dead
 * letter tells `RpcException: Forbidden resource` from any other error.
 */
export function failureReason(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const className = error.constructor?.name;
  const name = error.name === 'Error' && className && className !== 'Error' ? className : error.name;
  return `${name}: ${error.message}`;
}
