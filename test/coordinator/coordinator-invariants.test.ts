import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ErrorCode, type GroupDescription, GroupNotFoundError } from '@redis-stream-coordinator/core';
import { aGroup, type GroupFixture } from '../support/group-fixture';
import { type ProtocolMember, settle } from '@redis-stream-coordinator/core/testing';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();

const SHARDS = 5;
const MEMBER_IDS = ['m0', 'm1', 'm2', 'm3'];
// RSC_PROPERTY_RUNS raises the count for a soak; CI runs the default.
const SEQUENCES = Number(process.env.RSC_PROPERTY_RUNS ?? 300);

type Action =
  | { kind: 'join' | 'heartbeat' | 'slowHeartbeat' | 'leave' | 'staleEpoch' | 'futureEpoch' | 'expireLease'; member: number }
  | { kind: 'falseOwnership'; member: number; shard: number }
  | { kind: 'unknownMember'; epoch: number };

const member = fc.integer({ min: 0, max: MEMBER_IDS.length - 1 });
const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('join' as const), member }) },
  { weight: 8, arbitrary: fc.record({ kind: fc.constant('heartbeat' as const), member }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('slowHeartbeat' as const), member }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('leave' as const), member }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('staleEpoch' as const), member }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('futureEpoch' as const), member }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('expireLease' as const), member }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant('falseOwnership' as const), member, shard: fc.integer({ min: 0, max: SHARDS - 1 }) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('unknownMember' as const), epoch: fc.integer({ min: 1, max: 50 }) }) },
);

/** Who holds each shard (owned or revoking) according to the members' records. */
function holders(d: GroupDescription): Map<number, string> {
  const held = new Map<number, string>();
  for (const m of d.members) {
    for (const { shardIndex } of [...m.currentAssignment, ...m.revoking]) {
      // invariant 2: at most one member holds a readable shard
      expect(held.has(shardIndex), `shard ${shardIndex} held by ${held.get(shardIndex)} and ${m.memberId}`).toBe(false);
      held.set(shardIndex, m.memberId);
    }
  }
  return held;
}

/** Checks SPEC 2.3's invariants on the step from `before` to `after`. */
function checkInvariants(before: GroupDescription | undefined, after: GroupDescription, maxEpochs: Map<string, number>): void {
  const { group } = after;
  // 1. memberEpoch <= assignmentEpoch <= groupEpoch, and no epoch ever decreases
  expect(group.assignmentEpoch).toBeLessThanOrEqual(group.groupEpoch);
  if (before) {
    expect(group.groupEpoch).toBeGreaterThanOrEqual(before.group.groupEpoch);
    expect(group.assignmentEpoch).toBeGreaterThanOrEqual(before.group.assignmentEpoch);
  }
  for (const m of after.members) {
    expect(m.memberEpoch).toBeLessThanOrEqual(group.assignmentEpoch);
    expect(m.memberEpoch, `epoch of ${m.memberId} decreased`).toBeGreaterThanOrEqual(maxEpochs.get(m.memberId) ?? 0);
    maxEpochs.set(m.memberId, m.memberEpoch);
    if (m.state !== 'ACTIVE') expect(m.currentAssignment.length + m.revoking.length).toBe(0);
  }
  // 2. one holder per shard, and the owners index agrees with the records
  const held = holders(after);
  for (const shard of after.shards) expect(shard.owner).toBe(held.get(shard.shardIndex) ?? null);
  // 3. a shard reaches a new owner only after the previous one released it or was removed
  if (before) {
    const previous = holders(before);
    for (const [shard, owner] of held) {
      const was = previous.get(shard);
      if (was !== undefined && was !== owner) {
        const wasState = after.members.find((m) => m.memberId === was)?.state;
        expect(wasState, `shard ${shard} moved from ${was} to ${owner} without a release`).not.toBe('ACTIVE');
      }
    }
  }
  // 5. a newly committed target names only ACTIVE members and covers every readable shard once
  if (!before || group.assignmentEpoch !== before.group.assignmentEpoch) {
    const active = new Set(after.members.filter((m) => m.state === 'ACTIVE').map((m) => m.memberId));
    const targeted = Object.entries(after.targetAssignment.members).flatMap(([id, shards]) => {
      expect(active.has(id), `target names ${id}, which is not ACTIVE`).toBe(true);
      return shards.map((s) => s.shardIndex);
    });
    if (active.size > 0) expect(targeted.sort((a, b) => a - b)).toEqual(group.readableShardSet);
  }
}

async function run(
  group: GroupFixture,
  members: ProtocolMember[],
  step: Action,
): Promise<{ errorCode: ErrorCode; mustNotChange: boolean }> {
  const m = 'member' in step ? members[step.member] : undefined;
  switch (step.kind) {
    case 'join':
      return { errorCode: (await m!.join()).errorCode, mustNotChange: false };
    case 'heartbeat':
      return { errorCode: (await m!.heartbeat()).errorCode, mustNotChange: false };
    case 'slowHeartbeat': // a member whose handlers are still running: nothing acknowledged yet
      return { errorCode: (await m!.heartbeat({ ackedRevocations: [] })).errorCode, mustNotChange: false };
    case 'leave':
      return { errorCode: (await m!.leave()).errorCode, mustNotChange: false };
    case 'staleEpoch': {
      // epoch - 2 must stay positive: 0 would be a (legal) rejoin
      if (m!.memberEpoch < 3) return { errorCode: ErrorCode.NONE, mustNotChange: false };
      const response = await m!.send({ memberEpoch: m!.memberEpoch - 2 });
      // epoch - 2 can still be the member's previous epoch (accepted: keep the model in step with
      // what the coordinator now holds); anything else must be refused and change nothing
      if (response.errorCode === ErrorCode.NONE) m!.apply(response);
      return { errorCode: response.errorCode, mustNotChange: response.errorCode !== ErrorCode.NONE };
    }
    case 'futureEpoch': {
      const response = await m!.send({ memberEpoch: m!.memberEpoch + 1 });
      expect(response.errorCode).not.toBe(ErrorCode.NONE);
      return { errorCode: response.errorCode, mustNotChange: true };
    }
    case 'expireLease': {
      // time passing, without waiting for it: the lease ends now, the next call notices
      const { leases } = group.coordinator.keys.groupKey(group.streamPrefix, group.consumerGroup);
      await redis.client().zadd(leases, 'XX', 1, m!.memberId);
      return { errorCode: ErrorCode.NONE, mustNotChange: false };
    }
    case 'falseOwnership': {
      if (m!.memberEpoch === 0 || m!.owned.includes(step.shard) || m!.revoking.includes(step.shard)) {
        return { errorCode: ErrorCode.NONE, mustNotChange: false };
      }
      const response = await m!.send({ owned: [...m!.owned, step.shard] });
      expect(response.errorCode).not.toBe(ErrorCode.NONE);
      return { errorCode: response.errorCode, mustNotChange: true };
    }
    case 'unknownMember': {
      const response = await group.member('stranger').send({ memberEpoch: step.epoch });
      expect(response.errorCode).toBe(ErrorCode.UNKNOWN_MEMBER_ID);
      return { errorCode: response.errorCode, mustNotChange: true };
    }
  }
}

describe('SPEC 2.3 invariants under random protocol sequences', () => {
  it(`hold after every step of ${SEQUENCES} sequences, and the group converges afterwards`, async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 25 }), async (steps) => {
        const group = await aGroup(redis, SHARDS);
        const members = MEMBER_IDS.map((id) => group.member(id));
        const maxEpochs = new Map<string, number>();
        const joined = new Set<number>();
        let before: GroupDescription | undefined;
        for (const step of steps) {
          if ('member' in step && step.kind !== 'join' && !joined.has(step.member)) continue;
          const { errorCode, mustNotChange } = await run(group, members, step);
          if ('member' in step) {
            if (step.kind === 'join') joined.add(step.member);
            if (step.kind === 'leave') joined.delete(step.member);
          }
          const after = await group.describe().catch((error) => {
            if (error instanceof GroupNotFoundError) return undefined; // nobody joined yet
            throw error;
          });
          if (!after) continue;
          if (mustNotChange && before) {
            expect(errorCode).not.toBe(ErrorCode.NONE);
            expect(after, 'a refused request changed state (invariant 4)').toEqual(before);
          }
          checkInvariants(before, after, maxEpochs);
          before = after;
        }
        const live = [...joined].map((i) => members[i]);
        if (live.length > 0) {
          const done = await settle(live);
          expect(done.state).toBe('STABLE');
          const loads = Object.values((await group.describe()).targetAssignment.members).map((s) => s.length);
          while (loads.length < live.length) loads.push(0);
          expect(Math.max(...loads) - Math.min(...loads)).toBeLessThanOrEqual(1);
        }
      }),
      { numRuns: SEQUENCES },
    );
  }, 180_000);
});
