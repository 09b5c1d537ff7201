import type { BatchMemberOptions, CoordinatedMemberOptions, MessageHandler } from '@redis-stream-coordinator/core';

/** Where a handler made by `CoordinatorConsumerProperties.providerMethod` keeps its provider and method. */
const PROVIDER_METHOD = Symbol('redis-stream-coordinator:provider-method');

/** A bean consumer's handler that is a method of a provider: the explorer runs it through Nest's pipeline. */
export interface ProviderMethodHandler extends MessageHandler<never> {
  readonly [PROVIDER_METHOD]: { instance: object; method: string };
}

/** The provider and method a bean's handler names, if it was made with `providerMethod`. */
export function providerMethodOf(handler: unknown): { instance: object; method: string } | undefined {
  return typeof handler === 'function' ? (handler as Partial<ProviderMethodHandler>)[PROVIDER_METHOD] : undefined;
}

/** The member options of a bean consumer, and the connection it belongs to. */
export type CoordinatorConsumerOptions<T = unknown> = CoordinatedMemberOptions<T> & ConsumerPlacement;
/** The options of a bean consumer whose handler gets batches (`batch`: one shard's entries in order). */
export type CoordinatorBatchConsumerOptions<T = unknown> = BatchMemberOptions<T> & ConsumerPlacement;

/** Where a bean consumer belongs: its connection, registry id and startup. */
export interface ConsumerPlacement {
  /**
   * The `name` of the `CoordinatorModule.forRoot` whose Redis, key prefix and defaults the member
   * uses. Default: the unnamed one (or, in a module's `consumers` option, that module).
   */
  connection?: string;
  /**
   * The consumer's id in `StreamListenerRegistry`. Default: the provider's token (a string token as
   * it is, a class by its name), or `consumers[i]` for an entry of a module's `consumers`.
   */
  id?: string;
  /** Whether the member starts when the application bootstraps. Default true; else `registry.get(id).start()`. */
  autoStartup?: boolean;
}

/**
 * A bean-style consumer: any provider whose value is one of these (and every entry of the module's
 * `consumers` option) becomes exactly one member of its group, running up to
 * `runtimeMaxConcurrency` handlers at once. It creates no other member.
 *
 * @example
 * { provide: 'auditConsumer', inject: [AuditService],
 *   useFactory: (audit: AuditService) => CoordinatorConsumerProperties.consumer({
 *     streamPrefix: 'audit', consumerGroup: 'audit-group', memberName: 'audit-a',
 *     runtimeMaxConcurrency: 4, handler: (m) => audit.handle(m) }) }
 */
export class CoordinatorConsumerProperties<T = unknown> {
  private constructor(
    readonly options: CoordinatedMemberOptions<T> | BatchMemberOptions<T>,
    readonly connection: string | undefined,
    /** Its id in StreamListenerRegistry, if given. */
    readonly id: string | undefined,
    readonly autoStartup: boolean,
  ) {}

  /**
   * A handler that is `instance[method]`: inside a Nest application it runs through Nest's pipeline
   * like a @StreamListener method (the guards, interceptors, pipes and filters of the method, its
   * class and the application; `@StreamPayload()`/`@StreamCtx()` parameters). Elsewhere it is a plain
   * call of the method.
   *
   * @example
   * useFactory: (audit: AuditService) => CoordinatorConsumerProperties.consumer({
   *   streamPrefix: 'audit', consumerGroup: 'audit-group',
   *   handler: CoordinatorConsumerProperties.providerMethod(audit, 'handle') })
   */
  static providerMethod<P extends object>(instance: P, method: keyof P & string): MessageHandler<never> {
    const fn = (instance as Record<string, unknown> | null | undefined)?.[method];
    if (typeof fn !== 'function') {
      throw new TypeError(
        `CoordinatorConsumerProperties.providerMethod(instance, method): ${JSON.stringify(method)} is not a method of ${instance?.constructor?.name ?? String(instance)}`,
      );
    }
    const handler = (message: unknown) => (fn as (message: unknown) => unknown).call(instance, message);
    return Object.assign(handler, { [PROVIDER_METHOD]: { instance, method } });
  }

  static consumer<T = unknown>(options: CoordinatorBatchConsumerOptions<T>): CoordinatorConsumerProperties<T>;
  static consumer<T = unknown>(options: CoordinatorConsumerOptions<T>): CoordinatorConsumerProperties<T>;
  static consumer<T = unknown>(
    options: CoordinatorConsumerOptions<T> | CoordinatorBatchConsumerOptions<T>,
  ): CoordinatorConsumerProperties<T> {
    if (options === null || typeof options !== 'object') {
      throw new TypeError('CoordinatorConsumerProperties.consumer(options): options must be an object');
    }
    const { connection, id, autoStartup = true, ...memberOptions } = options;
    if (connection !== undefined && (typeof connection !== 'string' || connection === '')) {
      throw new TypeError(
        `CoordinatorConsumerProperties.consumer(options): connection must be a non-empty string, got ${JSON.stringify(connection)}`,
      );
    }
    if (id !== undefined && (typeof id !== 'string' || id === '')) {
      throw new TypeError(`CoordinatorConsumerProperties.consumer(options): id must be a non-empty string, got ${JSON.stringify(id)}`);
    }
    if (typeof autoStartup !== 'boolean') {
      throw new TypeError(
        `CoordinatorConsumerProperties.consumer(options): autoStartup must be a boolean, got ${JSON.stringify(autoStartup)}`,
      );
    }
    return new CoordinatorConsumerProperties(memberOptions as CoordinatedMemberOptions<T>, connection, id, autoStartup);
  }
}
