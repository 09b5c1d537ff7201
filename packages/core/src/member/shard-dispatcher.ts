import type { EventEmitter } from 'node:events';
import { type DecodedEntry, decodeEntry, type StreamMessage } from '../protocol/entry-format';
import { checkWithSchema, type SchemaCheck } from '../protocol/standard-schema';
import type { RawEntry, ShardClient } from '../redis/shard-client';
import { sleep } from './abortable-sleep';
import type { AckBatcher } from './ack-batcher';
import type { DeadLetterCause, DeadLetterNotice } from './dead-letter-options';
import { type ResolvedMemberOptions, retryDelayMs } from './member-options';
import { HandlerAbortedError, HandlerTimeoutError, type PollerEvents, type QueuedEntry, ShardError, type ShardSet, type ShardState } from './shard-state';

type DecodedPayload = Extract<DecodedEntry, { ok: true }>;

/** How often a retry that waits for the lease to be safe again looks at it. */
const LEASE_RECHECK_MS = 50;
/** Backoff of a dead-letter write that failed: from this, doubling, up to the max. */
const DEAD_LETTER_RETRY_MS = 100;
const DEAD_LETTER_RETRY_MAX_MS = 5000;

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as PromiseLike<unknown>).then === 'function';
}

/**
 * Runs handlers: at most one in flight per shard and at most `runtimeMaxConcurrency` in all, shards
 * served round-robin so that none starves; retries in place with backoff, then dead-letters (fenced,
 * with the ack); hands finished entries to the ack batcher. An entry's in-flight slot is held until
 * it is acknowledged, dead-lettered, or its shard is released: no later entry of the shard starts
 * before (SPEC 5: per-shard order), whatever fails meanwhile.
 */
export class ShardDispatcher {
  private cursor = -1;
  private busy = 0;
  /** `onDeadLetter` calls that threw or rejected (`stats().deadLetterHookFailures`). */
  hookFailures = 0;

  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly acks: AckBatcher,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
    /** False while the member's lease may be lost, or while it is paused: no handler may start then. */
    private readonly mayStartHandlers: () => boolean,
    /** A shard ran out of work (the reader may need to read it sooner). */
    private readonly onDrained: (state: ShardState) => void,
  ) {}

  /** Handlers running now (including retries waiting for their backoff). */
  get activeHandlers(): number {
    return this.busy;
  }

  /** Round-robin from the shard after the last one served: every owned shard keeps making progress. */
  private nextShard(): ShardState | undefined {
    const order = this.shards.order;
    const n = order.length;
    for (let step = 1; step <= n; step++) {
      const position = (this.cursor + step) % n;
      const state = this.shards.get(order[position]);
      if (state && state.queue.length > 0 && state.inFlight === null && state.phase !== 'released' && !state.sweeping && !this.shards.lingering.has(state.index)) {
        this.cursor = position;
        return state;
      }
    }
    return undefined;
  }

  dispatch(): void {
    while (this.busy < this.options.runtimeMaxConcurrency && this.mayStartHandlers()) {
      const state = this.nextShard();
      if (!state) return;
      const queued = state.queue.shift()!;
      this.shards.buffered -= 1;
      const pending = this.process(state, queued);
      if (pending === undefined) {
        // A synchronous handler finished: no promise, no microtask, on to the next entry.
        if (state.queue.length === 0) this.onDrained(state);
        continue;
      }
      this.busy += 1;
      state.current = queued.entry.id;
      state.inFlight = pending.finally(() => {
        this.busy -= 1;
        state.inFlight = null;
        state.current = undefined;
        this.shards.settled(state);
        if (state.queue.length === 0) this.onDrained(state);
        this.dispatch();
      });
    }
  }

  /** Handles one entry; returns undefined when it completed synchronously, else a promise. */
  private process(state: ShardState, queued: QueuedEntry): Promise<void> | undefined {
    const decoded = decodeEntry(queued.entry, this.options.codec, this.options.codecs);
    if (!decoded.ok) return this.deadLetter(state, queued.entry, { cause: 'undecodable', reason: decoded.reason, attempts: 0, error: undefined, message: undefined });
    const schema = this.options.schema;
    if (schema === undefined) return this.attempt(state, queued, decoded, 1);
    // A payload that does not match will not match on a retry either: dead-lettered at once.
    const validated = (check: SchemaCheck): Promise<void> | undefined =>
      check.ok
        ? this.attempt(state, queued, { ...decoded, payload: check.value }, 1)
        : this.deadLetter(state, queued.entry, { cause: 'invalid', reason: check.reason, attempts: 0, error: undefined, message: undefined });
    const check = checkWithSchema(schema, decoded.payload);
    return check instanceof Promise ? check.then(validated) : validated(check);
  }

  private attempt(state: ShardState, queued: QueuedEntry, decoded: DecodedPayload, attempt: number): Promise<void> | undefined {
    const { entry } = queued;
    const call = new AbortController();
    const message: StreamMessage = {
      id: entry.id,
      streamPrefix: this.options.streamPrefix,
      shardIndex: state.index,
      key: decoded.key,
      payload: decoded.payload,
      headers: decoded.headers,
      deliveryCount: queued.deliveries + attempt - 1,
      signal: call.signal,
    };
    let result: unknown;
    state.call = call;
    // Undefined (nothing allocated) unless metrics or tracing is on.
    const probe = this.options.telemetry?.startHandler(message, attempt);
    try {
      result = probe ? probe.run(this.options.handler, message) : this.options.handler(message);
    } catch (error) {
      state.call = undefined;
      probe?.end(true, error);
      return this.failed(state, queued, decoded, attempt, error, message);
    }
    if (isThenable(result)) {
      return this.withHandlerTimeout(Promise.resolve(result), state, entry.id, call)
        .finally(() => {
          // A new grant of the shard has its own state: only this call's own slot is cleared.
          if (state.call === call) state.call = undefined;
        })
        .then(
          () => {
            probe?.end(false);
            this.acks.queue(state, entry.id);
          },
          (error: unknown) => {
            probe?.end(true, error);
            return this.failed(state, queued, decoded, attempt, error, message);
          },
        );
    }
    state.call = undefined;
    probe?.end(false);
    this.acks.queue(state, entry.id);
    return undefined;
  }

  /**
   * A handler that does not settle in `handlerTimeoutMs` fails the attempt and its signal fires; the
   * shard moves on.
   */
  private withHandlerTimeout(call: Promise<unknown>, state: ShardState, id: string, controller: AbortController): Promise<unknown> {
    const limit = this.options.handlerTimeoutMs;
    if (limit === 0) return call;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        this.events.emit('error', new ShardError(`shard ${state.index}: the handler of ${id} did not settle within handlerTimeoutMs (${limit} ms)`, state.index));
        controller.abort(new HandlerAbortedError('handler-timeout', `the handler of ${id} did not settle within handlerTimeoutMs (${limit} ms)`));
        reject(new HandlerTimeoutError(`handler did not settle within ${limit} ms`));
      }, limit);
    });
    return Promise.race([call, timeout]).finally(() => clearTimeout(timer));
  }

  /**
   * Retry in place (order is kept) with backoff, then dead-letter; an error that
   * `deadLetter.nonRetryable`/`nonRetryableErrors` names is dead-lettered at once. A retry whose
   * backoff ends while the lease may be lost, or while the member is paused, waits, keeping the
   * shard's slot, until handlers may start again or the shard is released (then the entry stays
   * pending for whoever owns the shard next).
   */
  private async failed(state: ShardState, queued: QueuedEntry, decoded: DecodedPayload, attempt: number, error: unknown, message: StreamMessage): Promise<void> {
    const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    if (this.isNonRetryable(state, error, message)) {
      return this.deadLetter(state, queued.entry, { cause: 'non-retryable', reason, attempts: attempt, error, message });
    }
    if (attempt < this.options.maxAttempts) {
      this.options.telemetry?.retried();
      const delay = retryDelayMs(attempt, this.options.retryBackoffMs, this.options.retryBackoffMaxMs);
      if (!(await sleep(delay, state.released.signal))) return;
      if (!(await this.untilHandlersMayStart(state))) return;
      return this.attempt(state, queued, decoded, attempt + 1);
    }
    return this.deadLetter(state, queued.entry, { cause: 'attempts-exhausted', reason, attempts: attempt, error, message });
  }

  /**
   * Whether the user's predicate or classes say the error is not worth retrying. A predicate that
   * throws is reported and answers "retry": the usual path, which loses nothing.
   */
  private isNonRetryable(state: ShardState, error: unknown, message: StreamMessage): boolean {
    const check = this.options.deadLetter.isNonRetryable;
    if (!check) return false;
    try {
      return check(error, message);
    } catch (failure) {
      this.events.emit('error', new ShardError(`shard ${state.index}: deadLetter.nonRetryable threw for ${message.id} (${(failure as Error)?.message ?? String(failure)}); the entry is retried as usual`, state.index, failure));
      return false;
    }
  }

  /** True once handlers may start again (lease safe, not paused); false if the shard was released first. */
  private async untilHandlersMayStart(state: ShardState): Promise<boolean> {
    while (!this.mayStartHandlers()) {
      if (!(await sleep(LEASE_RECHECK_MS, state.released.signal))) return false;
    }
    return !state.released.signal.aborted;
  }

  /**
   * Writes the dead letter and acks the entry in one fenced script. A failed write (WRONGTYPE, OOM,
   * Redis unreachable) is retried with backoff while the shard is owned, each failure an 'error'
   * and the condition listed in `problems` until it clears; the shard's later entries wait. When
   * the shard is released the next owner handles the entry (and dead-letters it) again. Refused as
   * fenced: nothing was written or acked, and the shard is given up locally like any fenced call.
   * Written: the 'dead-letter' event, then `onDeadLetter`.
   */
  private async deadLetter(state: ShardState, entry: RawEntry, letter: DeadLetterFailure): Promise<void> {
    const { stream: destination, maxLen } = this.options.deadLetter;
    const { cause, reason, attempts } = letter;
    for (let attempt = 1; !state.released.signal.aborted; attempt++) {
      let written: string | null;
      try {
        written = await this.client.deadLetter(state.index, state.grantEpoch, entry, { destination, maxLen, error: reason, attempts, cause });
      } catch (error) {
        const message = `shard ${state.index}: writing the dead letter of ${entry.id} failed (try ${attempt}): ${(error as Error).message}; later entries of the shard wait`;
        state.problems.set('dead-letter', message);
        this.events.emit('error', new ShardError(`${message}, retrying`, state.index, error));
        await sleep(retryDelayMs(attempt, DEAD_LETTER_RETRY_MS, DEAD_LETTER_RETRY_MAX_MS), state.released.signal);
        continue;
      }
      state.problems.delete('dead-letter');
      this.events.emit('acknowledged', { shardIndex: state.index, grantEpoch: state.grantEpoch, ids: [entry.id], accepted: written !== null });
      if (written === null) {
        this.events.emit('error', new ShardError(`shard ${state.index}: dead letter of ${entry.id} refused, the shard has a new owner; it decides about the entry`, state.index));
        this.shards.release(state);
        return;
      }
      this.events.emit('dead-letter', { shardIndex: state.index, id: entry.id, reason, attempts, cause, deadLetterId: written, destination });
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
      return;
    }
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
      this.events.emit('error', new ShardError(`shard ${state.index}: deadLetter.onDeadLetter failed for ${notice.entryId} (dead letter ${notice.ref || 'written'}): ${text}; the dead letter stays written`, state.index, error));
    };
    try {
      const result = hook(notice);
      if (isThenable(result)) Promise.resolve(result).catch(fail);
    } catch (error) {
      fail(error);
    }
  }
}

/** Why an entry is dead-lettered, and what the handler saw (undefined for an entry that could not be decoded). */
interface DeadLetterFailure {
  cause: DeadLetterCause;
  reason: string;
  attempts: number;
  error: unknown;
  message: StreamMessage | undefined;
}
