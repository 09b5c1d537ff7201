import type { Redis } from 'ioredis';
import { afterEach } from 'vitest';
import { CoordinatedMember, type CoordinatedMemberOptions } from '@redis-stream-coordinator/core';
import type { KeyedPayload } from './handler-recorder';
import type { RedisFixture } from './vitest-redis';

export type TestMemberOptions = Omit<CoordinatedMemberOptions<KeyedPayload>, 'consumerGroup'> & { consumerGroup?: string };

/**
 * `aMember(options, connection?)` for a test file: members of group "group" with a short heartbeat
 * interval and the file's defaults, errors swallowed (tests listen for what they check), each
 * stopped after its test.
 */
export function memberFactory(
  redis: RedisFixture,
  defaults: Partial<CoordinatedMemberOptions<KeyedPayload>> = {},
  connect: () => Redis = () => redis.client(),
) {
  const started: CoordinatedMember<KeyedPayload>[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
  });
  return (options: TestMemberOptions, connection: Redis = connect()) => {
    const member = new CoordinatedMember<KeyedPayload>(connection, {
      consumerGroup: 'group',
      coordinator: { heartbeatIntervalMs: 200 },
      ...defaults,
      ...options,
    });
    member.on('error', () => undefined);
    started.push(member);
    return member;
  };
}
