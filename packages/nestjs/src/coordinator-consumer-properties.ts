import type { CoordinatedMemberOptions } from '@redis-stream-coordinator/core';

/** The member options of a bean consumer, and the connection it belongs to. */
export type CoordinatorConsumerOptions<T = unknown> = CoordinatedMemberOptions<T> & {
  /**
   * The `name` of the `CoordinatorModule.forRoot` whose Redis, key prefix and defaults the member
   * uses. Default: the unnamed one (or, in a module's `consumers` option, that module).
   */
  connection?: string;
};

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
    readonly options: CoordinatedMemberOptions<T>,
    readonly connection: string | undefined,
  ) {}

  static consumer<T = unknown>(options: CoordinatorConsumerOptions<T>): CoordinatorConsumerProperties<T> {
    if (options === null || typeof options !== 'object') {
      throw new TypeError('CoordinatorConsumerProperties.consumer(options): options must be an object');
    }
    const { connection, ...memberOptions } = options;
    if (connection !== undefined && (typeof connection !== 'string' || connection === '')) {
      throw new TypeError(`CoordinatorConsumerProperties.consumer(options): connection must be a non-empty string, got ${JSON.stringify(connection)}`);
    }
    return new CoordinatorConsumerProperties(memberOptions as CoordinatedMemberOptions<T>, connection);
  }
}
