import type { OutgoingMessage } from '../protocol/entry-format';

/** Where an entry landed. */
export interface SendResult {
  shardIndex: number;
  /**
   * Its id in the shard stream; for a delayed entry (`delayMs`, `deliverAt`) its id in the shard's
   * schedule (`s` and a 16-digit zero-padded sequence number): it gets a stream id when it is released, once due.
   */
  id: string;
  /** A delayed entry's due time (epoch ms, Redis' clock): it is in the shard's schedule until then. */
  dueAt?: number;
}

/** An entry of a batch that is in its shard stream. */
export interface WrittenEntry extends SendResult {
  /** Position in the batch passed to `sendBatch`. */
  index: number;
}

/** An entry of a batch that is not (or, with `maybeWritten`, may not be) in any shard stream. */
export interface FailedEntry<T = unknown> {
  /** Position in the batch passed to `sendBatch`. */
  index: number;
  message: OutgoingMessage<T>;
  /** The shard it was routed to last, if it got that far. */
  shardIndex: number | undefined;
  error: Error;
  /**
   * True when the write's reply never came (connection lost, timeout): the entry may be in the
   * stream, and a retry may write it twice (at-least-once); and when it is on the master but not
   * confirmed on replicas (`id` set, `NotReplicatedError`). False: Redis said no, or the write was
   * not attempted because an earlier entry of the same key failed.
   */
  maybeWritten: boolean;
  /**
   * Its id, when it is known to be on the master but `waitForReplicas` did not see it on enough
   * replicas (a `NotReplicatedError`): it stays unless a failover loses it.
   */
  id?: string;
}

/**
 * `sendBatch` wrote some entries of the batch but not all. Nothing is hidden: `written` has the id
 * of every entry that landed, `failed` every other entry with its error, both by batch position.
 *
 * Per-key order survives a retry of `retryBatch()`: entries are written in batch order and a key's
 * writes stop at its first failure, so no entry of a key is written after one of its earlier
 * entries failed; retrying the failed entries in their order appends them after everything
 * of theirs that landed.
 *
 * @example
 * try {
 *   await producer.sendBatch(batch);
 * } catch (error) {
 *   if (!(error instanceof PartialBatchError)) throw error;
 *   record(error.written);                           // ids of what landed
 *   await producer.sendBatch(error.retryBatch());    // the rest, in order
 * }
 */
export class PartialBatchError<T = unknown> extends Error {
  constructor(
    readonly written: WrittenEntry[],
    readonly failed: FailedEntry<T>[],
  ) {
    const first = failed[0];
    super(
      `${written.length} of ${written.length + failed.length} entries written; ${failed.length} not written` +
        (first
          ? ` (first: batch entry ${first.index}${first.shardIndex === undefined ? '' : ` for shard ${first.shardIndex}`}: ${first.error.message})`
          : ''),
    );
    this.name = 'PartialBatchError';
  }

  /** The messages not written, in batch order: pass them to `sendBatch` again. */
  retryBatch(): OutgoingMessage<T>[] {
    return this.failed.map((entry) => entry.message);
  }
}
