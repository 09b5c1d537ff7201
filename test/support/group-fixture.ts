import {
  CoordinatorAdmin,
  CoordinatorClient,
  type CoordinatorOptions,
  type GroupDescription,
  type HeartbeatRequest,
} from '@redis-stream-coordinator/core';
import type { RedisFixture } from './vitest-redis';
import { uniqueName } from './vitest-redis';
import { ProtocolMember } from '@redis-stream-coordinator/core/testing';

/** A fresh stream and group on the file's server, with helpers to make members and look at them. */
export interface GroupFixture {
  streamPrefix: string;
  consumerGroup: string;
  admin: CoordinatorAdmin;
  coordinator: CoordinatorClient;
  member(memberId: string, extra?: Partial<HeartbeatRequest>, coordinator?: CoordinatorClient): ProtocolMember;
  describe(): Promise<GroupDescription>;
  /** A coordinator client of the same group with other settings (e.g. an assignment delay). */
  client(options: CoordinatorOptions): CoordinatorClient;
}

export async function aGroup(redis: RedisFixture, shardCount: number, options: CoordinatorOptions = {}): Promise<GroupFixture> {
  const connection = redis.client();
  const streamPrefix = uniqueName('stream');
  const consumerGroup = 'group';
  const admin = new CoordinatorAdmin(connection, options);
  await admin.createStream({ streamPrefix, shardCount });
  const coordinator = new CoordinatorClient(connection, options);
  return {
    streamPrefix,
    consumerGroup,
    admin,
    coordinator,
    member: (memberId, extra = {}, via = coordinator) => new ProtocolMember(via, streamPrefix, consumerGroup, memberId, extra),
    // The description's Redis time (`describedAt`) differs on every call: a "changes nothing"
    // comparison of two descriptions would see it, so the fixture gives 0; a test of the time itself
    // reads `admin.describeGroup`.
    describe: async () => {
      const description = await admin.describeGroup(streamPrefix, consumerGroup);
      return { ...description, group: { ...description.group, describedAt: 0 } };
    },
    client: (other) => new CoordinatorClient(connection, { ...options, ...other }),
  };
}

/** memberId -> owned shard indices, from a description. */
export function ownership(description: GroupDescription): Record<string, number[]> {
  return Object.fromEntries(
    description.members.filter((m) => m.state === 'ACTIVE').map((m) => [m.memberId, m.currentAssignment.map((s) => s.shardIndex)]),
  );
}
