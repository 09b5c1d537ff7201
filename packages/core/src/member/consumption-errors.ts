/**
 * Thrown by a batch handler (`batch` member option) whose entry `failedIndex` failed: the entries
 * before it are handled and acknowledged; the failed one and those after it are retried as a batch,
 * and once the failed entry's attempts are used up it alone is dead-lettered (with `cause` as its
 * error) and the rest go on. Any other error fails the whole batch.
 *
 * @example
 * handler: async (messages: StreamMessage<Row>[]) => {
 *   for (const [i, m] of messages.entries()) {
 *     try { await insert(m.payload); } catch (error) { throw new BatchError(i, error); }
 *   }
 * }
 */
export class BatchError extends Error {
  constructor(
    readonly failedIndex: number,
    cause: unknown,
  ) {
    super(`entry ${failedIndex} of the batch failed: ${cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause)}`, {
      cause,
    });
    this.name = 'BatchError';
  }
}

/** Why `message.ack()`/`nack()` was refused. */
export type AckRefusalReason = 'released' | 'settled' | 'fenced' | 'unsent' | 'auto';

/**
 * `message.ack()`/`nack()` could not count (ackMode 'manual'): the shard was revoked or lost
 * (`released`; its next owner runs the entry again), a newer owner's fencing token refused the
 * acknowledgement (`fenced`), it could not be sent (`unsent`: Redis unreachable), the entry was already settled (`settled`: acked, nacked, failed, or
 * its ackTimeoutMs passed), or the member acknowledges on its own (`auto`).
 */
export class AckRefusedError extends Error {
  constructor(
    readonly reason: AckRefusalReason,
    readonly entryId: string,
    message: string,
  ) {
    super(message);
    this.name = 'AckRefusedError';
  }
}

/** ackMode 'manual': the entry was neither acked nor nacked within `ackTimeoutMs`; the attempt failed. */
export class AckTimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AckTimeoutError';
  }
}

/** ackMode 'manual': the handler called `message.nack()`; the attempt failed. */
export class NackedError extends Error {
  constructor(
    message: string,
    /** The retry delay it asked for, if any. */
    readonly retryAfterMs: number | undefined,
    /** `nack({ defer: true })`: the retry is deferred (docs/runtime.md, Deferred retries), not in place. */
    readonly defer = false,
  ) {
    super(message);
    this.name = 'NackedError';
  }
}

/** An acknowledgement refused after the handler asked for it ('ack-refused' event). */
export interface AckRefusedEvent {
  shardIndex: number;
  entryId: string;
  reason: AckRefusalReason;
  message: string;
}

/** Something went wrong on a shard; the poller goes on. `shardIndex` is set where it applies. */
export class ShardError extends Error {
  constructor(
    message: string,
    readonly shardIndex?: number,
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'ShardError';
  }
}

/** A handler call exceeded `handlerTimeoutMs`; the attempt counts as failed. */
export class HandlerTimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HandlerTimeoutError';
  }
}

/** Why a handler's `message.signal` fired. */
export type HandlerAbortReason = 'handler-timeout' | 'ack-timeout' | 'revoked' | 'shard-lost' | 'stopped';

/**
 * The `reason` of an aborted `message.signal`: the member no longer waits for this call; the entry
 * is retried (timeout) or left to the shard's next owner, which runs it again unless the call's
 * acknowledgement lands before the shard changes hands. `reason` says why: `handler-timeout` (handlerTimeoutMs passed), `ack-timeout` (ackMode 'manual': ackTimeoutMs passed), `revoked`
 * (the shard was revoked and revocationTimeoutMs passed), `shard-lost` (lease lost, fenced, the group
 * gone, the shard no longer this member's), `stopped` (stop()'s shutdownTimeoutMs passed, or abort()).
 */
export class HandlerAbortedError extends Error {
  constructor(
    readonly reason: HandlerAbortReason,
    message: string,
  ) {
    super(message);
    this.name = 'HandlerAbortedError';
  }
}
