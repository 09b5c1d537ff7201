import { deferralOf, type StreamMessage } from '../../protocol/entry-format';
import type { AckBatcher } from './ack-batcher';
import type { AttemptPolicy } from './attempt-policy';
import { CallSignal } from './call-signal';
import { BatchError } from '../consumption-errors';
import { type DeadLetterWriter, failureReason } from './dead-letter-writer';
import { checkEntry } from './entry-check';
import { HandlerMessage } from './handler-message';
import type { ResolvedMemberOptions } from '../member-options';
import type { QueuedEntry, ShardState, Work } from '../shard-state';
import type { Workers } from './workers';

/** Races a handler call against `handlerTimeoutMs` (the dispatcher's: it fires the signal and reports). */
export type HandlerTimeout = (
  call: Promise<unknown>,
  state: ShardState,
  id: string,
  controller: CallSignal,
  limit: number,
  kind: 'handler',
) => Promise<unknown>;

/** One entry of a batch, with the failed attempts it has had in this batch. */
interface BatchEntry {
  queued: QueuedEntry;
  payload: unknown;
  key: string | undefined;
  headers: Record<string, string>;
  failures: number;
}

/**
 * Batch handlers (`batch` member option): one shard's entries, in ID order, in one call, and one
 * fenced acknowledgement for them. A plain failure fails the whole batch: it is retried in place,
 * and once `maxAttempts` are used every entry is dead-lettered (each its own letter). A `BatchError`
 * names the failed entry: those before it are acknowledged, and only the failed one and those after
 * it are retried; when the failed entry's attempts are used up (or its error is not retryable) it
 * alone is dead-lettered and the rest go on, in order. An entry that cannot be decoded or that the
 * `schema` refuses is dead-lettered in place (cause `undecodable` / `invalid`), never handed to the
 * handler: the entries before it are handled first, those after it form the next call. The batch
 * holds a worker only while its call runs: a backoff or a dead-letter write gives it back, and the
 * next call asks again (SPEC 10.8); the shard's later entries wait throughout (SPEC 5 order).
 */
export class BatchRunner {
  constructor(
    private readonly acks: AckBatcher,
    private readonly options: ResolvedMemberOptions,
    private readonly policy: AttemptPolicy,
    private readonly deadLetters: DeadLetterWriter,
    private readonly withTimeout: HandlerTimeout,
    private readonly workers: Workers,
  ) {}

  async run(state: ShardState, work: Work, taken: QueuedEntry[]): Promise<void> {
    let pending: BatchEntry[] = [];
    for (const [i, queued] of taken.entries()) {
      // Another group's released deferred retry is acknowledged unhandled (docs/runtime.md, Deferred retries).
      const deferral = deferralOf(queued.entry.fields);
      if (deferral !== undefined && deferral.consumerGroup !== this.options.consumerGroup) {
        this.acks.queue(state, queued.entry.id);
        continue;
      }
      // Each entry is decoded with the codec it names and checked against the schema on its own.
      const maybe = checkEntry(queued.entry, this.options);
      const checked = maybe instanceof Promise ? await maybe : maybe;
      if (state.released.signal.aborted) return;
      if (checked.ok) {
        const { decoded } = checked;
        pending.push({ queued, payload: decoded.payload, key: decoded.key, headers: decoded.headers, failures: 0 });
        continue;
      }
      // An undecodable or invalid entry is dead-lettered in place. Entries before it are not
      // handled yet: they go first, so the shard's order holds for what is handled.
      if (pending.length > 0 && !(await this.handle(state, work, pending))) return;
      pending = [];
      this.workers.release(state, work);
      if (
        !(await this.deadLetters.write(state, queued.entry, {
          cause: checked.cause,
          reason: checked.reason,
          attempts: 0,
          error: undefined,
          message: undefined,
        }))
      )
        return;
      // The rest are checked (the schema is the application's code) with a worker again.
      if (i < taken.length - 1 && !(await this.workers.acquire(state, work))) return;
    }
    if (pending.length > 0) await this.handle(state, work, pending);
  }

  /** Runs `pending` until every entry is acknowledged or dead-lettered; false if the shard was released first. */
  private async handle(state: ShardState, work: Work, pending: BatchEntry[]): Promise<boolean> {
    // `pending` comes fresh from run(): its first call is the first time its entries are handed.
    let firstCall = true;
    while (pending.length > 0) {
      // Every call asks, not only the first (which the dispatcher let start): a batch split by a dead
      // letter, or retried after a backoff, gave its worker back, and the member may have been
      // paused or lost its lease meanwhile.
      if (!(await this.workers.acquire(state, work))) return false;
      const call = new CallSignal();
      const messages = pending.map(
        (p): StreamMessage =>
          new HandlerMessage(
            p.queued.entry.id,
            this.options.streamPrefix,
            state.index,
            p.key,
            p.payload,
            p.headers,
            p.queued.deliveries + p.failures,
            call,
          ),
      );
      work.call = call;
      let failure: { error: unknown } | undefined;
      // Undefined (nothing allocated) unless metrics or tracing is on.
      const probe = this.options.telemetry?.startBatch(messages, state.index, firstCall);
      firstCall = false;
      const handler = this.options.handler as (messages: StreamMessage[]) => unknown;
      try {
        const result = probe ? probe.run(handler, messages) : handler(messages);
        await this.withTimeout(Promise.resolve(result), state, messages[0].id, call, this.options.handlerTimeoutMs, 'handler');
      } catch (error) {
        failure = { error };
      } finally {
        if (work.call === call) work.call = undefined;
      }
      const index =
        failure &&
        failure.error instanceof BatchError &&
        Number.isInteger(failure.error.failedIndex) &&
        failure.error.failedIndex >= 0 &&
        failure.error.failedIndex < pending.length
          ? failure.error.failedIndex
          : undefined;
      probe?.end(failure && { error: failure.error, failedIndex: index });
      if (!failure) {
        this.acks.queue(
          state,
          messages.map((m) => m.id),
        );
        return true;
      }
      const { error } = failure;
      // The call is over: what follows (a backoff, dead-letter writes) waits without a worker.
      this.workers.release(state, work);
      if (index === undefined) {
        // The whole batch failed: no entry is known to be done.
        for (const p of pending) p.failures += 1;
        const attempts = Math.max(...pending.map((p) => p.failures));
        if (this.policy.isNonRetryable(state, error, messages[0]) || attempts >= this.options.maxAttempts) {
          const cause = attempts >= this.options.maxAttempts ? 'attempts-exhausted' : 'non-retryable';
          for (const [i, p] of pending.entries()) {
            const written = await this.deadLetters.write(state, p.queued.entry, {
              cause,
              reason: failureReason(error),
              attempts: p.failures,
              error,
              message: messages[i],
            });
            if (!written) return false;
          }
          return true;
        }
        if (!(await this.policy.backoff(state, attempts, error))) return false;
        continue;
      }
      // Entries before the failed one are done: acknowledged now, the rest retried from the failed one.
      if (index > 0)
        this.acks.queue(
          state,
          messages.slice(0, index).map((m) => m.id),
        );
      pending = pending.slice(index);
      const head = pending[0];
      head.failures += 1;
      const cause = (error as BatchError).cause;
      const nonRetryable = this.policy.isNonRetryable(state, cause, messages[index]);
      if (nonRetryable || head.failures >= this.options.maxAttempts) {
        const written = await this.deadLetters.write(state, head.queued.entry, {
          cause: nonRetryable ? 'non-retryable' : 'attempts-exhausted',
          reason: failureReason(cause),
          attempts: head.failures,
          error: cause,
          message: messages[index],
        });
        if (!written) return false;
        pending = pending.slice(1);
        continue;
      }
      if (!(await this.policy.backoff(state, head.failures, cause))) return false;
    }
    return true;
  }
}
