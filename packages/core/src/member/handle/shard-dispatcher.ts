import type { EventEmitter } from 'node:events';
import { routingKeyOf, type StreamMessage } from '../../protocol/entry-format';
import type { ShardClient } from '../../redis/shard-client';
import type { AckBatcher } from './ack-batcher';
import { AttemptPolicy } from './attempt-policy';
import { BatchRunner } from './batch-runner';
import { AckRefusedError, type AckRefusalReason, AckTimeoutError } from '../consumption-errors';
import { DeadLetterWriter, failureReason, isThenable } from './dead-letter-writer';
import { CallSignal } from './call-signal';
import { checkEntry, type DecodedPayload, type EntryCheck } from './entry-check';
import { HandlerMessage } from './handler-message';
import { ManualSettlement } from './manual-ack';
import type { ResolvedMemberOptions } from '../member-options';
import { HandlerAbortedError, HandlerTimeoutError, ShardError } from '../consumption-errors';
import type { PollerEvents, QueuedEntry, ShardSet, ShardState, Work } from '../shard-state';

/** A settled promise, the `done` of work that has not got its own yet. */
const RESOLVED: Promise<void> = Promise.resolve();

/** The lane of entries without a routing key (they keep their order among themselves); keys get a prefix so none equals it. */
const NO_KEY_LANE = '';

/** The next work to start: `count` queued entries of `state` from `start`, on lane `lane`. */
interface Pick {
  state: ShardState;
  start: number;
  count: number;
  lane: string;
}

/**
 * Runs handlers: per shard one entry at a time (or, with `lanes`, one at a time per routing key on
 * up to `lanes` lanes; or, with `batch`, one batch at a time), at most `runtimeMaxConcurrency` in
 * all, shards served round-robin so that none starves; retries in place with backoff, then
 * dead-letters (fenced, with the ack); hands finished entries to the ack batcher. An entry's lane is
 * held until it is acknowledged, dead-lettered, or its shard is released: no later entry of the
 * shard (of the key, with lanes) starts before (SPEC 5: per-shard order, per-key order), whatever
 * fails meanwhile.
 */
export class ShardDispatcher {
  private cursor = -1;
  private busy = 0;
  private readonly policy: AttemptPolicy;
  private readonly deadLetters: DeadLetterWriter;
  private readonly batches: BatchRunner | undefined;
  /** A dispatch due when a short batch has waited `batch.maxWaitMs`. */
  private batchTimer: { at: number; timer: NodeJS.Timeout } | undefined;
  /** ackMode 'manual': acks and nacks refused (`stats().refusedAcks`). */
  refusedAcks = 0;

  constructor(
    private readonly shards: ShardSet,
    client: ShardClient,
    private readonly acks: AckBatcher,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
    /** False while the member's lease may be lost, or while it is paused: no handler may start then. */
    private readonly mayStartHandlers: () => boolean,
    /** A shard ran out of work (the reader may need to read it sooner). */
    private readonly onDrained: (state: ShardState) => void,
  ) {
    this.policy = new AttemptPolicy(events, options, mayStartHandlers);
    this.deadLetters = new DeadLetterWriter(shards, client, events, options);
    if (options.batch)
      this.batches = new BatchRunner(acks, options, this.policy, this.deadLetters, (call, state, id, controller, limit, kind) =>
        this.withTimeout(call, state, id, controller, limit, kind),
      );
  }

  /** Handlers running now (including retries waiting for their backoff). */
  get activeHandlers(): number {
    return this.busy;
  }

  /** `onDeadLetter` calls that threw or rejected (`stats().deadLetterHookFailures`). */
  get hookFailures(): number {
    return this.deadLetters.hookFailures;
  }

  /** Round-robin from the shard after the last one served: every owned shard keeps making progress. */
  private nextWork(): Pick | undefined {
    const order = this.shards.order;
    const n = order.length;
    const now = Date.now();
    for (let step = 1; step <= n; step++) {
      const position = (this.cursor + step) % n;
      const state = this.shards.get(order[position]);
      if (
        !state ||
        state.queue.length === 0 ||
        state.work.size >= this.options.lanes ||
        state.phase === 'released' ||
        state.sweeping ||
        this.shards.lingering.has(state.index)
      )
        continue;
      const pick = this.pickIn(state, now);
      if (pick) {
        this.cursor = position;
        return pick;
      }
    }
    return undefined;
  }

  /** What may start on a shard with a free lane: the queue's first entry of a key not in flight, or a batch. */
  private pickIn(state: ShardState, now: number): Pick | undefined {
    const batch = this.options.batch;
    if (batch) {
      const count = Math.min(state.queue.length, batch.maxSize);
      if (count < batch.maxSize && batch.maxWaitMs > 0 && this.mayFill(count)) {
        state.batchWaitFrom ??= now;
        const due = state.batchWaitFrom + batch.maxWaitMs;
        if (now < due) {
          this.dispatchAt(due);
          return undefined;
        }
      }
      state.batchWaitFrom = undefined;
      return { state, start: 0, count, lane: NO_KEY_LANE };
    }
    if (this.options.lanes === 1) return { state, start: 0, count: 1, lane: NO_KEY_LANE };
    const queue = state.queue;
    for (let i = 0; i < queue.length; i++) {
      const lane = laneOf(queue[i]);
      if (!state.work.has(lane)) return { state, start: i, count: 1, lane };
    }
    return undefined;
  }

  /**
   * Whether a short batch of `count` entries can still fill by waiting: the buffer has room to read
   * the rest, or a handler in flight will make some when it settles. Otherwise every place of
   * `maxBufferedEntries` is taken by batches waiting to fill (4 shards with batches of 10 sharing
   * 20 places: 5 each), nothing can be read, and waiting would only hold them all for maxWaitMs.
   */
  private mayFill(count: number): boolean {
    return this.busy > 0 || this.options.maxBufferedEntries - this.shards.buffered >= this.options.batch!.maxSize - count;
  }

  /** Dispatches again at `at` (a short batch's wait ends), unless a dispatch is due sooner anyway. */
  private dispatchAt(at: number): void {
    if (this.batchTimer && this.batchTimer.at <= at) return;
    if (this.batchTimer) clearTimeout(this.batchTimer.timer);
    const timer = setTimeout(
      () => {
        this.batchTimer = undefined;
        this.dispatch();
      },
      Math.max(0, at - Date.now()),
    );
    timer.unref();
    this.batchTimer = { at, timer };
  }

  dispatch(): void {
    while (this.busy < this.options.runtimeMaxConcurrency && this.mayStartHandlers()) {
      const pick = this.nextWork();
      if (!pick) return;
      const { state, start, count, lane } = pick;
      let pending: Promise<void> | undefined;
      let work: Work;
      // Counted before the handler runs: a synchronous handler that calls resume() or
      // setRuntimeMaxConcurrency() dispatches again from inside this call, and must find its own slot taken.
      this.busy += 1;
      this.shards.buffered -= count;
      if (this.batches) {
        const taken = state.queue.splice(start, count);
        work = { ids: taken.map((q) => q.entry.id), done: RESOLVED, call: undefined };
        state.work.set(lane, work);
        pending = this.batches.run(state, work, taken);
      } else {
        // One entry (the common case, once per entry): no arrays beyond the work's own id list.
        const queued = start === 0 ? state.queue.shift()! : state.queue.splice(start, 1)[0];
        work = { ids: [queued.entry.id], done: RESOLVED, call: undefined };
        state.work.set(lane, work);
        pending = this.process(state, work, queued);
      }
      if (pending === undefined) {
        // A synchronous handler finished: no promise, no microtask, on to the next entry.
        this.busy -= 1;
        state.work.delete(lane);
        if (state.queue.length === 0) this.onDrained(state);
        continue;
      }
      work.done = pending.finally(() => {
        this.busy -= 1;
        state.work.delete(lane);
        this.shards.settled(state);
        if (state.queue.length === 0) this.onDrained(state);
        this.dispatch();
      });
    }
  }

  /** Handles one entry; returns undefined when it completed synchronously, else a promise. */
  private process(state: ShardState, work: Work, queued: QueuedEntry): Promise<void> | undefined {
    const checked = checkEntry(queued.entry, this.options);
    if (!(checked instanceof Promise)) return this.checked(state, work, queued, checked);
    return checked.then(async (result) => {
      // Paused or the lease unsafe while an asynchronous schema ran: the handler waits, as a retry does.
      if (result.ok && !(await this.policy.untilHandlersMayStart(state))) return undefined;
      // An asynchronous schema answered after the shard was released: the entry stays pending for its next owner.
      if (state.released.signal.aborted) return undefined;
      return this.checked(state, work, queued, result);
    });
  }

  /**
   * A decoded, valid entry runs; an undecodable or invalid one is dead-lettered at once (a retry
   * would not change it), holding only its lane (its key, with lanes) until the letter is written.
   */
  private checked(state: ShardState, work: Work, queued: QueuedEntry, checked: EntryCheck): Promise<void> | undefined {
    if (checked.ok) return this.attempt(state, work, queued, checked.decoded, 1);
    return this.deadLetters
      .write(state, queued.entry, { cause: checked.cause, reason: checked.reason, attempts: 0, error: undefined, message: undefined })
      .then(() => undefined);
  }

  private attempt(state: ShardState, work: Work, queued: QueuedEntry, decoded: DecodedPayload, attempt: number): Promise<void> | undefined {
    const { entry } = queued;
    const call = new CallSignal();
    const message: StreamMessage = new HandlerMessage(
      entry.id,
      this.options.streamPrefix,
      state.index,
      decoded.key,
      decoded.payload,
      decoded.headers,
      queued.deliveries + attempt - 1,
      call,
    );
    work.call = call;
    if (this.options.ackMode === 'manual') return this.manualAttempt(state, work, queued, decoded, attempt, message, call);
    let result: unknown;
    // Undefined (nothing allocated) unless metrics or tracing is on.
    const probe = this.options.telemetry?.startHandler(message, attempt);
    try {
      result = probe
        ? probe.run(this.options.handler as (m: StreamMessage) => unknown, message)
        : (this.options.handler as (m: StreamMessage) => unknown)(message);
    } catch (error) {
      work.call = undefined;
      probe?.end(true, error);
      return this.failed(state, work, queued, decoded, attempt, error, message);
    }
    if (isThenable(result)) {
      // One reaction for both outcomes (no .finally): this runs once per entry.
      return this.withTimeout(Promise.resolve(result), state, entry.id, call, this.options.handlerTimeoutMs, 'handler').then(
        () => {
          // A new grant of the shard has its own state: only this call's own slot is cleared.
          if (work.call === call) work.call = undefined;
          probe?.end(false);
          this.acks.queue(state, entry.id);
        },
        (error: unknown) => {
          if (work.call === call) work.call = undefined;
          probe?.end(true, error);
          return this.failed(state, work, queued, decoded, attempt, error, message);
        },
      );
    }
    work.call = undefined;
    probe?.end(false);
    this.acks.queue(state, entry.id);
    return undefined;
  }

  /**
   * ackMode 'manual': the attempt lasts until `message.ack()` or `nack()` (or the handler's own
   * failure first), at most `ackTimeoutMs`; the handler returning settles nothing.
   */
  private manualAttempt(
    state: ShardState,
    work: Work,
    queued: QueuedEntry,
    decoded: DecodedPayload,
    attempt: number,
    message: StreamMessage,
    call: CallSignal,
  ): Promise<void> {
    const settlement = new ManualSettlement(message.id, state.index, call.signal, (reason, id, text) =>
      this.refuseAck(state, reason, id, text),
    );
    message.ack = settlement.ack;
    message.nack = settlement.nack;
    const probe = this.options.telemetry?.startHandler(message, attempt);
    try {
      const result = probe
        ? probe.run(this.options.handler as (m: StreamMessage) => unknown, message)
        : (this.options.handler as (m: StreamMessage) => unknown)(message);
      if (isThenable(result)) Promise.resolve(result).catch((error: unknown) => settlement.handlerFailed(error));
    } catch (error) {
      settlement.handlerFailed(error);
    }
    return this.withTimeout(settlement.outcome, state, message.id, call, this.options.ackTimeoutMs, 'ack')
      .finally(() => {
        if (work.call === call) work.call = undefined;
      })
      .then(
        () => {
          probe?.end(false);
          this.acks.queue(state, message.id, (outcome) => settlement.acknowledged(outcome));
        },
        (error: unknown) => {
          probe?.end(true, error);
          return this.failed(state, work, queued, decoded, attempt, error, message);
        },
      );
  }

  /** An ack or nack that cannot count: one 'ack-refused' event, a count in stats, and the error its caller gets. */
  private refuseAck(state: ShardState, reason: AckRefusalReason, entryId: string, text: string): AckRefusedError {
    this.refusedAcks += 1;
    this.events.emit('ack-refused', { shardIndex: state.index, entryId, reason, message: text });
    return new AckRefusedError(reason, entryId, text);
  }

  /**
   * A handler call (ackMode 'auto', `handlerTimeoutMs`) or an unsettled entry (ackMode 'manual',
   * `ackTimeoutMs`) past its limit fails the attempt and its signal fires; the shard moves on.
   */
  private withTimeout(
    call: Promise<unknown>,
    state: ShardState,
    id: string,
    controller: CallSignal,
    limit: number,
    kind: 'handler' | 'ack',
  ): Promise<unknown> {
    if (limit === 0) return call;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const what =
          kind === 'handler'
            ? `the handler of ${id} did not settle within handlerTimeoutMs (${limit} ms)`
            : `${id} was neither acked nor nacked within ackTimeoutMs (${limit} ms)`;
        this.events.emit('error', new ShardError(`shard ${state.index}: ${what}`, state.index));
        controller.abort(new HandlerAbortedError(kind === 'handler' ? 'handler-timeout' : 'ack-timeout', what));
        reject(
          kind === 'handler'
            ? new HandlerTimeoutError(`handler did not settle within ${limit} ms`)
            : new AckTimeoutError(`neither acked nor nacked within ${limit} ms`),
        );
      }, limit);
    });
    return Promise.race([call, timeout]).finally(() => clearTimeout(timer));
  }

  /**
   * Retry in place (order is kept) with backoff, then dead-letter; an error that
   * `deadLetter.nonRetryable`/`nonRetryableErrors` names is dead-lettered at once. A retry whose
   * backoff ends while the lease may be lost, or while the member is paused, waits, keeping the
   * entry's lane, until handlers may start again or the shard is released (then the entry stays
   * pending for whoever owns the shard next).
   */
  private async failed(
    state: ShardState,
    work: Work,
    queued: QueuedEntry,
    decoded: DecodedPayload,
    attempt: number,
    error: unknown,
    message: StreamMessage,
  ): Promise<void> {
    const reason = failureReason(error);
    if (this.policy.isNonRetryable(state, error, message)) {
      await this.deadLetters.write(state, queued.entry, { cause: 'non-retryable', reason, attempts: attempt, error, message });
      return;
    }
    if (attempt < this.options.maxAttempts) {
      if (!(await this.policy.waitToRetry(state, attempt, error))) return;
      return this.attempt(state, work, queued, decoded, attempt + 1);
    }
    await this.deadLetters.write(state, queued.entry, { cause: 'attempts-exhausted', reason, attempts: attempt, error, message });
  }
}

/** The lane key of a queued entry: its routing key (entries without one share a lane). */
function laneOf(queued: QueuedEntry): string {
  if (queued.lane === undefined) {
    const key = routingKeyOf(queued.entry.fields);
    queued.lane = key === undefined ? NO_KEY_LANE : `k${key}`;
  }
  return queued.lane;
}
