import { ShardError } from '../consumption-errors';
import type { EventEmitter } from 'node:events';
import type { StreamMessage } from '../../protocol/entry-format';
import { sleep } from '../abortable-sleep';
import { NackedError } from '../consumption-errors';
import { type ResolvedMemberOptions, retryDelayMs } from '../member-options';
import { type PollerEvents, type ShardState } from '../shard-state';

/** How often a retry that waits for the lease to be safe again looks at it. */
const LEASE_RECHECK_MS = 50;

/** What happens after a failed attempt, for single entries and batches alike: dead-letter now, or retry after a backoff. */
export class AttemptPolicy {
  constructor(
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
    /** False while the member's lease may be lost, or while it is paused: no handler may start then. */
    private readonly mayStartHandlers: () => boolean,
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
   * backoff), then until handlers may start (lease safe, not paused). False if the shard was
   * released first: the entry stays pending for whoever owns the shard next.
   */
  async waitToRetry(state: ShardState, attempt: number, error: unknown): Promise<boolean> {
    this.options.telemetry?.retried();
    const asked = error instanceof NackedError ? error.retryAfterMs : undefined;
    const delay = asked ?? retryDelayMs(attempt, this.options.retryBackoffMs, this.options.retryBackoffMaxMs);
    if (!(await sleep(delay, state.released.signal))) return false;
    return this.untilHandlersMayStart(state);
  }

  /**
   * Resolves true once a handler may start (lease safe, not paused), at once when it may now; false
   * if the shard was released first. For handler calls that start inside one piece of work, not
   * through the dispatcher (a retry, the next part of a batch split by a dead letter, a handler
   * after an asynchronous schema): each asks again, or a paused member, or one whose shard may be
   * another member's already, would start it.
   */
  async untilHandlersMayStart(state: ShardState): Promise<boolean> {
    while (!this.mayStartHandlers()) {
      if (!(await sleep(LEASE_RECHECK_MS, state.released.signal))) return false;
    }
    return !state.released.signal.aborted;
  }
}
