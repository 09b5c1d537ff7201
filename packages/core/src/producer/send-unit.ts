import type { OutgoingMessage } from '../protocol/entry-format';
import type { EntryPlace } from './entry-writer';
import type { PublishProbe } from '../telemetry/producer-telemetry';
import { type FailedEntry, PartialBatchError, type SendResult, type WrittenEntry } from './send-results';

/**
 * One `send()` or `sendBatch()` call while its entries are written: what became of each, and the
 * caller's promise, settled once every entry is written or failed. Its entries may share script
 * calls with other callers' (merged sends); what it reports is its own entries' fate only.
 */
export class SendUnit<T = unknown> {
  /** The caller's: a `send()`'s resolves to its entry's result, a `sendBatch()`'s to all of them. */
  readonly promise: Promise<SendResult[] | SendResult>;
  /** Whether an explicit `shardIndex` beyond the producer's known count was checked against a fresh read. */
  rangeChecked: boolean;
  /** Whether any of its entries was routed to a shard: until then it can be refused as a whole. */
  routed = false;
  /** The highest explicit `shardIndex` of its messages, or -1. */
  readonly maxShardIndex: number;
  private readonly written: (WrittenEntry | undefined)[];
  private readonly failed: FailedEntry<T>[] = [];
  private remaining: number;
  private resolve!: (results: SendResult[] | SendResult) => void;
  private reject!: (error: unknown) => void;

  constructor(
    readonly messages: OutgoingMessage<T>[],
    /** A `send()`: it rejects with its entry's own error, not a batch error. */
    private readonly single: boolean,
    private readonly probe: PublishProbe | undefined,
    knownShardCount: number | undefined,
  ) {
    this.written = new Array(messages.length);
    this.remaining = messages.length;
    let max = -1;
    for (const message of messages) if (message.shardIndex !== undefined && message.shardIndex > max) max = message.shardIndex;
    this.maxShardIndex = max;
    this.rangeChecked = knownShardCount !== undefined && max < knownShardCount;
    this.promise = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  /** Every entry is written or failed (or the unit was refused), and the caller told. */
  get done(): boolean {
    return this.remaining <= 0;
  }

  /** The entry at `index` landed on `shardIndex` (in its stream, or in its schedule until `dueAt`). */
  wrote(index: number, shardIndex: number, place: EntryPlace): void {
    if (this.remaining <= 0) return;
    this.written[index] =
      place.dueAt === undefined ? { index, shardIndex, id: place.id } : { index, shardIndex, id: place.id, dueAt: place.dueAt };
    this.settled();
  }

  /** The entry at `index` is not (or, with `maybeWritten`, may not be) in any shard stream. */
  fail(index: number, shardIndex: number | undefined, error: Error, maybeWritten: boolean, id?: string): void {
    if (this.remaining <= 0) return;
    const entry: FailedEntry<T> = { index, message: this.messages[index], shardIndex, error, maybeWritten };
    if (id !== undefined) entry.id = id;
    this.failed.push(entry);
    this.settled();
  }

  /** Refused as a whole before any of its entries was routed (bad input, no routing): nothing was written. */
  refuse(error: unknown): void {
    if (this.remaining <= 0) return;
    this.remaining = 0;
    this.probe?.end([], this.messages.length, error);
    this.reject(error);
  }

  private settled(): void {
    if (--this.remaining > 0) return;
    if (this.failed.length === 0) {
      const results = this.written.map((entry) => resultOf(entry!));
      this.probe?.end(results, 0);
      this.resolve(this.single ? results[0] : results);
      return;
    }
    const written = this.written.filter((entry): entry is WrittenEntry => entry !== undefined);
    const error = this.single
      ? this.failed[0].error
      : new PartialBatchError<T>(
          written,
          this.failed.sort((a, b) => a.index - b.index),
        );
    this.probe?.end(written, this.failed.length, error);
    this.reject(error);
  }
}

/** What a caller gets for a written entry: where it is, and a delayed one's due time. */
function resultOf(entry: WrittenEntry): SendResult {
  return entry.dueAt === undefined
    ? { shardIndex: entry.shardIndex, id: entry.id }
    : { shardIndex: entry.shardIndex, id: entry.id, dueAt: entry.dueAt };
}
