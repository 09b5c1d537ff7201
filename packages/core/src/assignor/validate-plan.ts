import type { AssignmentInput, AssignmentPlan } from '../protocol/heartbeat';

/**
 * Invariant 5 for a plan, as the commit script checks it: returns the first violation, or null.
 * Used by tests of any assignor and by `CoordinatorClient` to name an assignor bug before committing.
 */
export function findPlanViolation(input: AssignmentInput, plan: AssignmentPlan): string | null {
  const active = new Set(input.members.map((m) => m.memberId));
  const readable = new Set(input.readableShardSet);
  const seen = new Map<number, string>();
  for (const [memberId, shards] of Object.entries(plan)) {
    if (!active.has(memberId)) return `member ${memberId} is not an ACTIVE member of the group`;
    for (const shard of shards) {
      if (!readable.has(shard)) return `shard ${shard} (member ${memberId}) is not readable`;
      const other = seen.get(shard);
      if (other !== undefined) return `shard ${shard} is assigned to both ${other} and ${memberId}`;
      seen.set(shard, memberId);
    }
  }
  if (active.size > 0) {
    for (const shard of readable) {
      if (!seen.has(shard)) return `readable shard ${shard} is assigned to no member`;
    }
  }
  return null;
}
