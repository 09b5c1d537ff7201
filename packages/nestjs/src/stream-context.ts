import type { StreamMessage } from '@redis-stream-coordinator/core';

/**
 * The execution context type of a stream handler: `context.getType()` in a guard, interceptor or
 * exception filter returns it, so an enhancer shared with HTTP or RPC handlers can tell them apart.
 *
 * @example
 * canActivate(context: ExecutionContext) {
 *   if (context.getType<StreamContextType>() !== STREAM_CONTEXT_TYPE) return true;
 *   const stream = context.switchToRpc().getContext<StreamContext>();
 *   return stream.headers.tenant !== undefined;
 * }
 */
export const STREAM_CONTEXT_TYPE = 'rsc';
export type StreamContextType = typeof STREAM_CONTEXT_TYPE;

/** What a StreamContext knows about the member that runs the handler. */
export interface StreamContextMember {
  readonly memberId: string;
  readonly consumerGroup: string;
  /** The member's epoch when the handler was called (-1 if it had none, e.g. it was just fenced). */
  readonly memberEpoch: number;
}

/**
 * The stream entry a handler is running for, beside its payload: what `@StreamCtx()` injects and
 * `context.switchToRpc().getContext()` returns in a guard, interceptor, pipe or filter (where
 * `getData()` is the payload), as `KafkaContext` is for Nest's Kafka transport.
 */
export class StreamContext {
  /** The entry id in its shard stream. */
  readonly id: string;
  readonly streamPrefix: string;
  readonly shardIndex: number;
  /** The routing key the producer gave, if any. */
  readonly key: string | undefined;
  readonly headers: Readonly<Record<string, string>>;
  /** Deliveries of this entry so far, this one included (1 on the first try; retries in place count). */
  readonly deliveryCount: number;
  readonly consumerGroup: string;
  readonly memberId: string;
  /** The member's epoch when the handler was called: useful in logs to see which assignment handled an entry. */
  readonly memberEpoch: number;

  constructor(
    /** The whole message as the core handed it over (payload included); a batch's first. */
    readonly message: StreamMessage,
    member: StreamContextMember,
    /**
     * A batch listener's (`batch` option) messages, in order; `@StreamMessageParam()` and the implicit
     * first parameter get this array, `@StreamPayload()` the payloads. The other fields are the first message's.
     */
    readonly batch?: readonly StreamMessage[],
  ) {
    this.id = message.id;
    this.streamPrefix = message.streamPrefix;
    this.shardIndex = message.shardIndex;
    this.key = message.key;
    this.headers = message.headers;
    this.deliveryCount = message.deliveryCount;
    this.consumerGroup = member.consumerGroup;
    this.memberId = member.memberId;
    this.memberEpoch = member.memberEpoch;
  }
}
