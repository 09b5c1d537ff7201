import type { EventEmitter } from 'node:events';
import { deferralOf, type StreamMessage } from '../../protocol/entry-format';
import type { ShardClient } from '../../redis/shard-client';
import {
  AckRefusedError,
  type AckRefusalReason,
  AckTimeoutError,
  HandlerAbortedError,
  HandlerTimeoutError,
  ShardError,
} from '../consumption-errors';
import type { ResolvedMemberOptions } from '../member-options';
import type { PollerEvents, QueuedEntry, ShardSet, ShardState, Work } from '../shard-state';
import type { AckBatcher } from './ack-batcher';
import { AttemptPolicy } from './attempt-policy';
import { BatchRunner } from './batch-runner';
import { CallSignal } from './call-signal';
import { DeadLetterWriter, failureReason, isThenable } from './dead-letter-writer';
import { DeferralWriter } from './deferral-writer';
import { checkEntry, type DecodedPayload, type EntryCheck } from './entry-check';
import { HandlerMessage } from './handler-message';
import { type EntryOrigin, keyFieldOf, originOf } from './key-order';
import { ManualSettlement } from './manual-ack';
import { ParksAhead } from './parks-ahead';
import type { Workers } from './workers';
import { sleep } from '../abortable-sleep';

/**
 * How long a released copy of a key released in part waits before it asks again (parkFenced-5.lua
 * 'hold'): the rest of the key's release is due now, in the owner's next read turn.
 */
const HOLD_RECHECK_MS = 100;

/**
 * The life of one piece of work once the dispatcher started it: check the entry, run the handler,
 * and on failure back off and run it again in place, or dead-letter it; then settle (the ack
 * batcher acknowledges, fenced). It promises:
 * - nothing is dropped: an entry ends acknowledged, dead-lettered (fenced, with its ack), or pending
 *   for the shard's next owner when the shard is released first (SPEC 5 handler failure, 9.2);
 * - a retry runs in place, after its backoff: the work keeps its lane all along, so its shard's
 *   (its key's) later entries wait (SPEC 5 order); or, deferred (`retryMode: 'deferred'`,
 *   `nack({ defer: true })`), the entry is acknowledged and scheduled in one fenced step and the
 *   lane is free at once (docs/runtime.md, Deferred retries);
 * - it holds a worker only while a handler call runs: it gives it back for a backoff or a
 *   dead-letter write, and asks the dispatcher for one before the next call (SPEC 10.8);
 * - a call past `handlerTimeoutMs` (`ackTimeoutMs`, manual acks) fails its attempt, its signal
 *   fired, one 'error' (SPEC 10.1).
 * The private methods read as the steps of one entry's life: process, check, attempt, fail.
 */
export class AttemptSequence {
  private readonly policy: AttemptPolicy;
  private readonly deadLetters: DeadLetterWriter;
  private readonly deferrals: DeferralWriter;
  private readonly parksAhead: ParksAhead;
  private readonly batches: BatchRunner | undefined;
  /** ackMode 'manual': acks and nacks refused (`stats().refusedAcks`). */
  refusedAcks = 0;

  constructor(
    shards: ShardSet,
    client: ShardClient,
    private readonly acks: AckBatcher,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
    private readonly workers: Workers,
  ) {
    this.policy = new AttemptPolicy(events, options);
    this.deadLetters = new DeadLetterWriter(shards, client, events, options);
    this.deferrals = new DeferralWriter(shards, client, events, options);
    this.parksAhead = new ParksAhead(this.deferrals, client, options);
    if (options.batch)
      this.batches = new BatchRunner(
        acks,
        options,
        this.policy,
        this.deadLetters,
        (call, state, id, controller, limit, kind) => this.withTimeout(call, state, id, controller, limit, kind),
        workers,
      );
  }

  /** `onDeadLetter` calls that threw or rejected (`stats().deadLetterHookFailures`). */
  get hookFailures(): number {
    return this.deadLetters.hookFailures;
  }

  /** Handles a batch (`batch` option): see BatchRunner. */
  runBatch(state: ShardState, work: Work, taken: QueuedEntry[]): Promise<void> {
    return this.batches!.run(state, work, taken);
  }

  /** Handles one entry; returns undefined when it completed synchronously (its worker still held), else a promise. */
  runEntry(state: ShardState, work: Work, queued: QueuedEntry): Promise<void> | undefined {
    // A released deferred retry is its group's alone: another group acknowledges it unhandled; the
    // deferring group's attempts go on from the count it carries (docs/runtime.md, Deferred retries).
    const deferral = deferralOf(queued.entry.fields);
    if (deferral !== undefined && deferral.consumerGroup !== this.options.consumerGroup) {
      this.acks.queue(state, queued.entry.id);
      return undefined;
    }
    const used = deferral?.attempts ?? 0;
    // deferredOrder 'key', checked at dispatch (what the key's state is now, not when it was read):
    // the mirror lets most entries run with no call; the rest Redis decides (parkFenced-5.lua).
    const origin = originOf(deferral);
    // Asked ahead of its turn (ParksAhead): its answer decides, whatever the mirror says now (a park
    // answered is an entry acknowledged and scheduled: it must not run).
    if (
      this.parksAhead.has(queued) ||
      (state.keyOrder && state.keyOrder.verdict(keyFieldOf(queued.entry.fields), queued.entry.id, origin) !== 'run')
    )
      return this.inKeyOrder(state, work, queued, used, origin);
    return this.check(state, work, queued, used);
  }

  /**
   * An entry whose key may have to wait (deferredOrder 'key'; the rules: key-order.ts): parked
   * behind its key's deferred entries, or appended again behind its key's copies in the stream
   * (acknowledged either way: its lane is free at once, as a deferral's), or run when Redis says it
   * has nothing to wait for; an entry of a key released in part waits for the rest of its release
   * (HOLD_RECHECK_MS, then asked again), keeping its lane and no worker. A failed call is a
   * deferral's failure (retried while the shard is owned, visibly).
   */
  private async inKeyOrder(state: ShardState, work: Work, queued: QueuedEntry, used: number, origin: EntryOrigin): Promise<void> {
    this.workers.release(state, work);
    const field = keyFieldOf(queued.entry.fields);
    let ask = this.parksAhead.take(queued);
    for (;;) {
      ask ??= this.parksAhead.ask(state, queued, used, origin);
      const outcome = await ask.answer;
      if (outcome !== 'run' && outcome !== 'hold') return; // parked, appended again, refused, or the shard released
      const mirrorRuns = () => state.keyOrder?.verdict(field, queued.entry.id, origin) === 'run';
      if (ask.ahead) {
        // Answered ahead of the turn: it holds if the mirror says 'run' now too (nothing of its key
        // deferred since, its release over), else it asks again now.
        if (mirrorRuns()) break;
        ask = this.parksAhead.ask(state, queued, used, origin, ask);
        continue;
      }
      if (outcome === 'run') break;
      await sleep(HOLD_RECHECK_MS, state.released.signal);
      if (state.released.signal.aborted) {
        this.parksAhead.decided(state, ask);
        return;
      }
      if (mirrorRuns()) break;
      ask = this.parksAhead.ask(state, queued, used, origin, ask);
    }
    // It runs: its key's later entries may be asked about (its handler's deferral, if any, is asked
    // after them: 'busy', in place).
    this.parksAhead.decided(state, ask);
    if (!(await this.workers.acquire(state, work))) return;
    return this.check(state, work, queued, used);
  }

  /** The entry's checks (codec, schema), then its attempts. */
  private check(state: ShardState, work: Work, queued: QueuedEntry, used: number): Promise<void> | undefined {
    const checked = checkEntry(queued.entry, this.options);
    if (!(checked instanceof Promise)) return this.checked(state, work, queued, checked, used);
    return checked.then(async (result) => {
      // Paused or the lease unsafe while an asynchronous schema ran: the handler waits for a worker, as a retry does.
      if (result.ok && !(await this.workers.acquire(state, work))) return undefined;
      // An asynchronous schema answered after the shard was released: the entry stays pending for its next owner.
      if (state.released.signal.aborted) return undefined;
      return this.checked(state, work, queued, result, used);
    });
  }

  /**
   * A decoded, valid entry runs; an undecodable or invalid one is dead-lettered at once (a retry
   * would not change it), holding only its lane (its key, with lanes) until the letter is written.
   */
  private checked(state: ShardState, work: Work, queued: QueuedEntry, checked: EntryCheck, used: number): Promise<void> | undefined {
    if (checked.ok) return this.attempt(state, work, queued, checked.decoded, used + 1);
    this.workers.release(state, work);
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
          // A new grant of the shard has its own state: only this call's own signal is cleared.
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
   * failure first), at most `ackTimeoutMs`; the handler returning settles nothing. The worker is
   * held until then (the entry is still being handled, wherever the handler handed it), as the
   * stall watch bounds (`handlerStallMs`).
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
        // Rejected before the abort: a manual settlement rejects as soon as its signal fires, and
        // the race must fail the attempt with the timeout, not with the abort it caused.
        reject(
          kind === 'handler'
            ? new HandlerTimeoutError(`handler did not settle within ${limit} ms`)
            : new AckTimeoutError(`neither acked nor nacked within ${limit} ms`),
        );
        controller.abort(new HandlerAbortedError(kind === 'handler' ? 'handler-timeout' : 'ack-timeout', what));
      }, limit);
    });
    return Promise.race([call, timeout]).finally(() => clearTimeout(timer));
  }

  /**
   * The call failed: its worker goes to other work at once (SPEC 10.8). Then retry in place (order
   * is kept) after the backoff, with a worker again, or dead-letter; an error that
   * `deadLetter.nonRetryable`/`nonRetryableErrors` names is dead-lettered at once. A retry whose
   * backoff ends while the lease may be lost, or while the member is paused, waits for a worker in
   * its shard's turn, keeping the entry's lane, until handlers may start again or the shard is
   * released (then the entry stays pending for whoever owns the shard next).
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
    this.workers.release(state, work);
    const reason = failureReason(error);
    if (this.policy.isNonRetryable(state, error, message)) {
      await this.deadLetters.write(state, queued.entry, { cause: 'non-retryable', reason, attempts: attempt, error, message });
      return;
    }
    if (attempt < this.options.maxAttempts) {
      // Deferred: acknowledged and scheduled in one fenced step; the lane is free once it is written.
      // 'busy': its key has entries parked behind a barrier that must come after this one (deferredOrder
      // 'key'); a deferral due later would come out after them, so this retry runs in place, holding the key.
      if (this.policy.defers(error)) {
        const deferred = await this.deferrals.defer(state, queued.entry, attempt, this.policy.delayOf(attempt, error), reason);
        if (deferred !== 'busy') {
          this.options.telemetry?.retried();
          return;
        }
      }
      if (!(await this.policy.backoff(state, attempt, error))) return;
      if (!(await this.workers.acquire(state, work))) return;
      return this.attempt(state, work, queued, decoded, attempt + 1);
    }
    await this.deadLetters.write(state, queued.entry, { cause: 'attempts-exhausted', reason, attempts: attempt, error, message });
  }
}
