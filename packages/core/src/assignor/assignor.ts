import type { AssignmentInput, AssignmentPlan } from '../protocol/heartbeat';

/**
 * Computes a target assignment from its input. Implementations must be pure and deterministic
 * (same input, same output) and satisfy invariant 5: only members of `input.members`, every shard of
 * `input.readableShardSet` exactly once. The commit script refuses a plan that does not.
 *
 * @example
 * const roundRobin: ShardAssignor = {
 *   name: 'round-robin',
 *   assign: ({ members, readableShardSet }) => {
 *     const plan: AssignmentPlan = Object.fromEntries(members.map((m) => [m.memberId, []]));
 *     readableShardSet.forEach((s, i) => plan[members[i % members.length].memberId].push(s));
 *     return plan;
 *   },
 * };
 */
export interface ShardAssignor {
  readonly name: string;
  assign(input: AssignmentInput): AssignmentPlan;
}
