import { SetMetadata } from '@nestjs/common';
import type { BatchOptions, CoordinatedMemberOptions } from '@redis-stream-coordinator/core';
import { STREAM_LISTENER_METADATA } from './coordinator.constants';

export type StreamListenerOptions = Omit<CoordinatedMemberOptions, 'handler' | 'memberId' | 'batch'> & {
  /**
   * The method gets batches: an array of one shard's entries in order (`StreamMessage[]`, or the
   * payloads with `@StreamPayload()`), at most `maxSize` per call, one acknowledgement for them.
   * Throw a `BatchError` to say which entry failed (docs/nestjs.md, "Batches").
   */
  batch?: BatchOptions;
  /**
   * Logical members this listener runs, each with its own heartbeat loop, consumer name, epoch and
   * shards: `<baseId>-m0` … `-m(N-1)`. Default 1.
   */
  concurrency?: number;
  /**
   * Static membership (docs/runtime.md "Static membership"): a stable name of this listener in this
   * process, e.g. `summary-${process.env.POD_NAME}`. Its members are `<memberInstanceId>-m0` …
   * `-m(N-1)` (their memberIds too), so a restarted process takes each member's shards back
   * without a rebalance. Every process of the group needs its own.
   */
  memberInstanceId?: string;
  /** Workers of each of those members (one entry at a time per shard, or per key of a shard with `lanes`). Default its own `lanes`, else the module's `defaults.runtimeMaxConcurrency`, else `defaults.lanes`, else 1. */
  runtimeMaxConcurrency?: number;
  /**
   * The `name` of the `CoordinatorModule.forRoot` whose Redis, key prefix and defaults the members
   * use. Default: the unnamed one. A name no module has fails the startup.
   */
  connection?: string;
  /**
   * The listener's id in `StreamListenerRegistry` (`registry.get(id)`). Default: `Class.method`.
   * Two listeners or consumers with one id fail the startup.
   */
  id?: string;
  /**
   * Whether the members start when the application bootstraps. Default true. With false they are
   * registered (health lists them as `stopped`, no readiness problem) and start with
   * `registry.get(id).start()`.
   */
  autoStartup?: boolean;
};

/**
 * Makes a provider method the handler of `concurrency` members of a consumer group, controlled at
 * runtime through `StreamListenerRegistry.get(id)`.
 *
 * @example
 * @Injectable()
 * export class SummaryHandlers {
 *   @StreamListener({ id: 'summaries', streamPrefix: 'summary', consumerGroup: 'summary-group', concurrency: 4 })
 *   async onSummary(message: StreamMessage<Summary>) { ... }
 * }
 */
export const StreamListener = (options: StreamListenerOptions): MethodDecorator => SetMetadata(STREAM_LISTENER_METADATA, options);
