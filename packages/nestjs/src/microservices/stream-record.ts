/** Where a StreamRecord's entry goes and what it carries beside the payload. */
export interface StreamRecordOptions {
  /** The routing key: all entries of one key go to one shard, in order. Overrides the client's `key` option. */
  key?: string;
  headers?: Record<string, string>;
  /** Writes to this shard instead of routing by key. */
  shardIndex?: number;
  /**
   * `emit` only: delayed delivery (docs/runtime.md, Delayed delivery), as the producer's message
   * option: the entry enters its stream this many ms later (0 to 365 days, Redis' clock).
   */
  delayMs?: number;
  /** `emit` only: delayed delivery at this time (a Date or epoch ms, at most 365 days ahead). */
  deliverAt?: Date | number;
}

/**
 * Data for `CoordinatorClientProxy.emit()`/`send()` with a key and headers of its own, as Nest's
 * `RmqRecord` or `NatsRecord` are for theirs. The handler receives `payload`; the key and headers
 * are in its RedisStreamsContext.
 *
 * @example
 * this.client.emit('orders', new StreamRecord(order, { key: order.customerId, headers: { tenant: 'acme' } }));
 * this.client.emit('reminders', new StreamRecord(reminder, { key: userId, delayMs: 60 * 60 * 1000 })); // in an hour
 */
export class StreamRecord<T = unknown> {
  constructor(
    readonly payload: T,
    readonly options: StreamRecordOptions = {},
  ) {
    if (options === null || typeof options !== 'object')
      throw new TypeError(`StreamRecord: options must be an object, got ${JSON.stringify(options)}`);
    if (options.key !== undefined && typeof options.key !== 'string')
      throw new TypeError(`StreamRecord: key must be a string, got ${JSON.stringify(options.key)}`);
  }
}
