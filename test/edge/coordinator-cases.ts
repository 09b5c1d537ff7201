import { StreamProducer } from '@redis-stream-coordinator/core';
import { expect } from 'vitest';
import { pollUntil } from '../support/poll';
import { uniqueName } from '../support/vitest-redis';
import { type EdgeCase, handOff, maxOf, produce, STOP_BOUND_MS } from './edge-kit';

/** A coordinator option (the same for the whole group: members and admin) at its maximum through the hand-off run. */
const coordinatorInHandOff = (row: Parameters<typeof maxOf>[0], option: string): EdgeCase => ({
  title: `${option} at its maximum for the group: two members hand shards over and back, every entry handled once`,
  covers: [row],
  tier: 'quick',
  timeoutMs: 60_000,
  run: (env) => handOff(env, { coordinator: { [option]: maxOf(row) } }).then(() => undefined),
});

/** The coordinator's options (CoordinatorOptions), at their maxima. */
export const COORDINATOR_CASES: EdgeCase[] = [
  coordinatorInHandOff('coordinator.heartbeatIntervalMs', 'heartbeatIntervalMs'),
  coordinatorInHandOff('coordinator.fastHeartbeatIntervalMs', 'fastHeartbeatIntervalMs'),
  coordinatorInHandOff('coordinator.assignmentTimeoutMs', 'assignmentTimeoutMs'),
  {
    title: 'retentionMs and retentionMaxCount at their maximum: the member that left is kept in the group record',
    covers: ['coordinator.retentionMs', 'coordinator.retentionMaxCount'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const coordinator = { retentionMs: maxOf('coordinator.retentionMs'), retentionMaxCount: maxOf('coordinator.retentionMaxCount') };
      const { admin, streamPrefix } = await handOff(env, { coordinator });
      const members = (await admin.describeGroup(streamPrefix, 'group')).members;
      expect(members.map((m) => [m.memberId, m.state]).sort()).toEqual([
        ['a', 'LEFT'],
        ['b', 'ACTIVE'],
      ]);
    },
  },
  {
    title: 'eventLogMaxLen at its maximum: the group records its decisions, which readGroupEvents at its maximum count returns',
    covers: ['coordinator.eventLogMaxLen', 'admin.readGroupEvents.count'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const { admin, streamPrefix } = await handOff(env, { coordinator: { eventLogMaxLen: maxOf('coordinator.eventLogMaxLen') } });
      const events = await admin.readGroupEvents(streamPrefix, 'group', { count: maxOf('admin.readGroupEvents.count') });
      const kinds = new Set(events.map((e) => e.type));
      expect([...kinds]).toEqual(expect.arrayContaining(['MEMBER_JOINED', 'MEMBER_LEFT']));
    },
  },
  {
    title:
      'assignmentDelayMs at its maximum: a joining member waits (the group ASSIGNING, nothing owned), and stop() still returns at once',
    covers: ['coordinator.assignmentDelayMs'],
    tier: 'quick',
    timeoutMs: 30_000,
    run: async (env) => {
      const coordinator = { assignmentDelayMs: maxOf('coordinator.assignmentDelayMs') };
      const streamPrefix = uniqueName('edge-delay');
      const admin = env.admin(coordinator);
      await admin.createStream({ streamPrefix, shardCount: 2 });
      const member = env.member(streamPrefix, 'a', { coordinator, handler: () => undefined });
      await member.start();
      await produce(new StreamProducer(env.redis.client(), { streamPrefix }), 4);
      // A second of heartbeats: still within the delay, the target is not computed.
      const until = Date.now() + 1000;
      await pollUntil('a second of heartbeats', async () => Date.now() >= until);
      const d = await admin.describeGroup(streamPrefix, 'group');
      expect([d.group.state, member.ownedShards(), d.shards.map((s) => s.owner)]).toEqual(['ASSIGNING', [], [null, null]]);
      const stopping = performance.now();
      await member.stop();
      expect(performance.now() - stopping).toBeLessThan(STOP_BOUND_MS);
    },
  },
];
