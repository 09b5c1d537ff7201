import type { CoordinatedMemberOptions } from '@redis-stream-coordinator/core';

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
  private constructor(readonly options: CoordinatedMemberOptions<T>) {}

  static consumer<T = unknown>(options: CoordinatedMemberOptions<T>): CoordinatorConsumerProperties<T> {
    if (options === null || typeof options !== 'object') {
      throw new TypeError('CoordinatorConsumerProperties.consumer(options): options must be an object');
    }
    return new CoordinatorConsumerProperties({ ...options });
  }
}
