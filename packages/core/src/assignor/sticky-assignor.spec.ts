import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { AssignmentInput, AssignmentPlan } from '../protocol/heartbeat';
import { aMember, anAssignmentInput, loads, members, movedShards, shardRange } from '../testing/fixtures';
import { StickyAssignor } from './sticky-assignor';
import { findPlanViolation } from './validate-plan';

const assignor = new StickyAssignor();
const RUNS = 2000;

/** Random inputs: members with weights, a readable set with holes, a messy previous target. */
const inputs = fc
  .record({
    memberCount: fc.integer({ min: 0, max: 24 }),
    weights: fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 24, maxLength: 24 }),
    shardCount: fc.integer({ min: 0, max: 120 }),
    holes: fc.array(fc.integer({ min: 0, max: 119 }), { maxLength: 10 }),
    previous: fc.array(fc.tuple(fc.integer({ min: 0, max: 30 }), fc.integer({ min: 0, max: 140 })), {
      maxLength: 150,
    }),
  })
  .map(({ memberCount, weights, shardCount, holes, previous }): AssignmentInput => {
    const live = Array.from({ length: memberCount }, (_, i) => aMember(`m${i}`, weights[i]));
    const holeSet = new Set(holes);
    const previousTarget: Record<string, number[]> = {};
    // previous owners m0..m30: some live, some gone; shards may be unreadable or listed twice
    for (const [owner, shard] of previous) (previousTarget[`m${owner}`] ??= []).push(shard);
    return anAssignmentInput({
      members: live,
      readableShardSet: shardRange(shardCount).filter((s) => !holeSet.has(s)),
      previousTarget,
    });
  });

const equalWeightInputs = inputs.map((input) => ({
  ...input,
  members: input.members.map((m) => aMember(m.memberId)),
}));

function reassign(input: AssignmentInput, plan: AssignmentPlan, memberIds: string[]): AssignmentInput {
  return { ...input, previousTarget: plan, members: memberIds.map((id) => aMember(id)) };
}

describe('StickyAssignor', () => {
  it('always satisfies invariant 5: only ACTIVE members, every readable shard exactly once', () => {
    fc.assert(
      fc.property(inputs, (input) => {
        expect(findPlanViolation(input, assignor.assign(input))).toBeNull();
      }),
      { numRuns: RUNS },
    );
  });

  it('balances equal weights to max - min <= 1', () => {
    fc.assert(
      fc.property(equalWeightInputs, (input) => {
        const counts = loads(assignor.assign(input));
        if (counts.length > 0) expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
      }),
      { numRuns: RUNS },
    );
  });

  it('gives each member its weighted share rounded by largest remainder (off by less than one)', () => {
    fc.assert(
      fc.property(inputs, (input) => {
        const plan = assignor.assign(input);
        const totalWeight = input.members.reduce((sum, m) => sum + m.weight, 0);
        for (const member of input.members) {
          const exact = (input.readableShardSet.length * member.weight) / totalWeight;
          const got = plan[member.memberId]?.length ?? 0;
          expect(Math.abs(got - exact)).toBeLessThan(1);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('is deterministic: the same input, in any member order, gives the same output', () => {
    fc.assert(
      fc.property(inputs, fc.integer(), (input, seed) => {
        const shuffled = [...input.members].sort((a, b) => ((a.memberId.length * 31 + seed) % 7) - ((b.memberId.length * 31 + seed) % 7));
        expect(assignor.assign({ ...input, members: shuffled })).toEqual(assignor.assign(input));
      }),
      { numRuns: RUNS },
    );
  });

  it('is stable: assigning again from its own output moves nothing', () => {
    fc.assert(
      fc.property(inputs, (input) => {
        const plan = assignor.assign(input);
        expect(assignor.assign({ ...input, previousTarget: plan })).toEqual(plan);
      }),
      { numRuns: RUNS },
    );
  });

  it('scale-in moves only the departed member shards', () => {
    fc.assert(
      fc.property(equalWeightInputs, fc.nat(), (input, pick) => {
        fc.pre(input.members.length >= 2);
        const plan = assignor.assign(input);
        const departed = input.members[pick % input.members.length].memberId;
        const survivors = input.members.map((m) => m.memberId).filter((id) => id !== departed);
        const after = assignor.assign(reassign(input, plan, survivors));
        expect(movedShards(plan, after)).toEqual([...(plan[departed] ?? [])].sort((a, b) => a - b));
      }),
      { numRuns: RUNS },
    );
  });

  it('scale-out moves only the shards the new member receives', () => {
    fc.assert(
      fc.property(equalWeightInputs, (input) => {
        fc.pre(input.members.length >= 1);
        const plan = assignor.assign(input);
        const ids = [...input.members.map((m) => m.memberId), 'newcomer'];
        const after = assignor.assign(reassign(input, plan, ids));
        expect(movedShards(plan, after)).toEqual(after.newcomer);
      }),
      { numRuns: RUNS },
    );
  });

  describe('the cases the specification names', () => {
    const twenty = shardRange(20);
    const four = members(4);
    const start = assignor.assign(anAssignmentInput({ members: four, readableShardSet: twenty }));

    it('20 shards, 4 -> 5 members moves exactly 4 shards, all to the new member', () => {
      const five = [...four, aMember('member-new')];
      const after = assignor.assign(anAssignmentInput({ members: five, readableShardSet: twenty, previousTarget: start }));
      expect(movedShards(start, after)).toHaveLength(4);
      expect(after['member-new']).toHaveLength(4);
      expect(loads(after)).toEqual([4, 4, 4, 4, 4]);
    });

    it('20 shards, 5 -> 4 members moves only the departed member shards', () => {
      const five = [...four, aMember('member-new')];
      const withFive = assignor.assign(anAssignmentInput({ members: five, readableShardSet: twenty, previousTarget: start }));
      const after = assignor.assign(anAssignmentInput({ members: four, readableShardSet: twenty, previousTarget: withFive }));
      expect(movedShards(withFive, after)).toEqual(withFive['member-new']);
    });

    it('weights 2:1:1 over 20 shards give 10/5/5', () => {
      const weighted = [aMember('a', 2), aMember('b', 1), aMember('c', 1)];
      const plan = assignor.assign(anAssignmentInput({ members: weighted, readableShardSet: twenty }));
      expect([plan.a.length, plan.b.length, plan.c.length]).toEqual([10, 5, 5]);
    });

    it('with no members the target is empty', () => {
      expect(assignor.assign(anAssignmentInput({ readableShardSet: twenty }))).toEqual({});
    });
  });
});
