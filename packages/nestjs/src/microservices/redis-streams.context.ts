import { BaseRpcContext } from '@nestjs/microservices';
import type { StreamMessage } from '@redis-stream-coordinator/core';
import { StreamContext } from '../stream-context';

/**
 * What `@Ctx()` injects into an `@EventPattern` / `@MessagePattern` handler of RedisStreamsServer,
 * as `KafkaContext` or `RedisContext` do for Nest's own transports: the stream entry the handler
 * runs for (id, key, shard, headers, delivery count) and the member running it.
 *
 * @example
 * @EventPattern('orders')
 * onOrder(@Payload() order: Order, @Ctx() context: RedisStreamsContext) {
 *   this.logger.log(`order ${order.id} from shard ${context.getShardIndex()}, try ${context.getDeliveryCount()}`);
 * }
 */
export class RedisStreamsContext extends BaseRpcContext<[StreamContext]> {
  constructor(args: [StreamContext]) {
    super(args);
  }

  /** The same StreamContext a `@StreamListener` handler gets from `@StreamCtx()`. */
  getStreamContext(): StreamContext {
    return this.args[0];
  }

  /** The whole message as the member handed it over (payload, headers, abort signal). */
  getMessage(): StreamMessage {
    return this.args[0].message;
  }

  /**
   * The entry's id, unique across the stream's shards: `<shardIndex>/<entryId>` (e.g. `3/1715763600000-0`).
   * Entry ids are per shard stream, so two shards can hold entries with the same one; key
   * idempotency on this (with `getStreamPrefix()` when several streams share a store).
   */
  getId(): string {
    return `${this.args[0].shardIndex}/${this.args[0].id}`;
  }

  /** The entry's id in its shard stream (`getShardIndex()`), as Redis gave it: not unique across shards. */
  getEntryId(): string {
    return this.args[0].id;
  }

  /** The stream prefix: the pattern the handler was registered with. */
  getStreamPrefix(): string {
    return this.args[0].streamPrefix;
  }

  getShardIndex(): number {
    return this.args[0].shardIndex;
  }

  /** The routing key the producer gave, if any. */
  getKey(): string | undefined {
    return this.args[0].key;
  }

  getHeaders(): Readonly<Record<string, string>> {
    return this.args[0].headers;
  }

  /** Deliveries of this entry so far, this one included (1 on the first try). */
  getDeliveryCount(): number {
    return this.args[0].deliveryCount;
  }

  getConsumerGroup(): string {
    return this.args[0].consumerGroup;
  }

  getMemberId(): string {
    return this.args[0].memberId;
  }

  getMemberEpoch(): number {
    return this.args[0].memberEpoch;
  }

  /** Fires when the member stops waiting for this call (handler timeout, revocation, stop): pass it to fetch, drivers, timers. */
  getSignal(): AbortSignal {
    return this.args[0].message.signal;
  }
}
