import type { AssignmentInput, AssignmentMember, AssignmentPlan } from '../protocol/heartbeat';

/** Small builders for assignor fixtures, so tests say what differs instead of copying literals. */
export function aMember(memberId: string, weight = 1): AssignmentMember {
  return { memberId, weight };
}

export function members(count: number, prefix = 'member-'): AssignmentMember[] {
  return Array.from({ length: count }, (_, i) => aMember(`${prefix}${String(i).padStart(3, '0')}`));
}

export function shardRange(count: number): number[] {
  return Array.from({ length: count }, (_, i) => i);
}

export function anAssignmentInput(overrides: Partial<AssignmentInput> = {}): AssignmentInput {
  return {
    groupEpoch: 1,
    members: [],
    readableShardSet: [],
    previousTarget: {},
    ...overrides,
  };
}

/** The shards whose owner differs between two plans (a shard absent from one counts as moved). */
export function movedShards(before: AssignmentPlan, after: AssignmentPlan): number[] {
  const ownerBefore = ownerByShard(before);
  const ownerAfter = ownerByShard(after);
  const moved: number[] = [];
  for (const [shard, owner] of ownerAfter) {
    if (ownerBefore.get(shard) !== owner) moved.push(shard);
  }
  return moved.sort((a, b) => a - b);
}

export function ownerByShard(plan: AssignmentPlan): Map<number, string> {
  const owners = new Map<number, string>();
  for (const [memberId, shards] of Object.entries(plan)) {
    for (const shard of shards) owners.set(shard, memberId);
  }
  return owners;
}

export function loads(plan: AssignmentPlan): number[] {
  return Object.values(plan).map((shards) => shards.length);
}
