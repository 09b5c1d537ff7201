import { ShardError } from '../consumption-errors';
import type { EventEmitter } from 'node:events';
import type { StreamMessage } from '../../protocol/entry-format';
import { sleep } from '../abortable-sleep';
import { NackedError } from '../consumption-errors';
import { type ResolvedMemberOptions, retryDelayMs } from '../member-options';
import { type PollerEvents, type ShardState } from '../shard-state';

/** What happens after a failed attempt, for single entries and batches alike: dead-letter now, or retry after a backoff. */
export class AttemptPolicy {
  constructor(
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
  ) {}

  /**
   * Whether the user's predicate or classes say the error is not worth retrying. A predicate that
   * throws is reported and answers "retry": the usual path, which loses nothing.
   */
  isNonRetryable(state: ShardState, error: unknown, message: StreamMessage): boolean {
    const check = this.options.deadLetter.isNonRetryable;
    if (!check) return false;
    try {
      return check(error, message);
    } catch (failure) {
      this.events.emit(
        'error',
        new ShardError(
          `shard ${state.index}: deadLetter.nonRetryable threw for ${message.id} (${(failure as Error)?.message ?? String(failure)}); the entry is retried as usual`,
          state.index,
          failure,
        ),
      );
      return false;
    }
  }

  /**
   * Waits out the backoff before attempt `attempt + 1` (a nack's `retryAfterMs`, else the member's
   * backoff). The caller has given its worker back first (SPEC 10.8) and asks for one again after.
   * False if the shard was released first: the entry stays pending for whoever owns the shard next.
   */
  backoff(state: ShardState, attempt: number, error: unknown): Promise<boolean> {
    this.options.telemetry?.retried();
    return sleep(this.delayOf(attempt, error), state.released.signal);
  }

  /**
   * Whether the retry after a failed attempt is deferred (docs/runtime.md, Deferred retries): the
   * member's `retryMode: 'deferred'`, or a manual `nack({ defer: true })`.
   */
  defers(error: unknown): boolean {
    return this.options.retryMode === 'deferred' || (error instanceof NackedError && error.defer);
  }

  /** The delay before attempt `attempt + 1`: a nack's `retryAfterMs`, else the member's backoff. */
  delayOf(attempt: number, error: unknown): number {
    const asked = error instanceof NackedError ? error.retryAfterMs : undefined;
    return asked ?? retryDelayMs(attempt, this.options.retryBackoffMs, this.options.retryBackoffMaxMs);
  }
}
