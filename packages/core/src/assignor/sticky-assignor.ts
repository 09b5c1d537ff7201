import type { AssignmentInput, AssignmentMember, AssignmentPlan } from '../protocol/heartbeat';
import type { ShardAssignor } from './assignor';
import { MinHeap } from './min-heap';
import { compareIds, computeQuotas } from './quotas';

interface Load {
  member: AssignmentMember;
  quota: number;
  shards: number[];
}

/**
 * The default assignor (SPEC section 4): balance by weight, keep every shard with its previous owner
 * while that owner is live and within quota, and move only what balance or departure requires.
 *
 * - scale-out moves only the shards the new members need (each over-quota member gives up its highest
 *   indices first);
 * - scale-in moves only the departed members' shards;
 * - the same input always gives the same output.
 */
export class StickyAssignor implements ShardAssignor {
  readonly name = 'sticky';

  assign(input: AssignmentInput): AssignmentPlan {
    const members = [...input.members].sort((a, b) => compareIds(a.memberId, b.memberId));
    if (members.length === 0) return {};
    const readable = new Set(input.readableShardSet);

    // Step 1-2: what each live previous owner could keep (readable shards, each shard once).
    const claimed = new Set<number>();
    const kept = new Map<string, number[]>();
    for (const member of members) {
      const previous = [...(input.previousTarget[member.memberId] ?? [])].sort((a, b) => a - b);
      const mine: number[] = [];
      for (const shard of previous) {
        if (readable.has(shard) && !claimed.has(shard)) {
          claimed.add(shard);
          mine.push(shard);
        }
      }
      kept.set(member.memberId, mine);
    }

    const quotas = computeQuotas(members, readable.size, new Map([...kept].map(([id, shards]) => [id, shards.length])));

    // Shards above a member's quota go back, highest index first, so the low ones stay put.
    const loads: Load[] = [];
    const unassigned: number[] = [];
    for (const member of members) {
      const quota = quotas.get(member.memberId) ?? 0;
      const mine = kept.get(member.memberId) ?? [];
      for (const shard of mine.splice(quota)) {
        claimed.delete(shard);
      }
      loads.push({ member, quota, shards: mine });
    }
    for (const shard of readable) {
      if (!claimed.has(shard)) unassigned.push(shard);
    }
    unassigned.sort((a, b) => a - b);

    // Step 4-5: each unassigned shard goes to the least loaded member that still has room.
    const heap = new MinHeap<Load>(
      (a, b) => a.shards.length - b.shards.length || b.member.weight - a.member.weight || compareIds(a.member.memberId, b.member.memberId),
    );
    for (const load of loads) {
      if (load.shards.length < load.quota) heap.push(load);
    }
    for (const shard of unassigned) {
      const load = heap.pop();
      if (!load) throw new Error('sticky assignor: quotas do not cover the readable shard set');
      load.shards.push(shard);
      if (load.shards.length < load.quota) heap.push(load);
    }

    const plan: AssignmentPlan = {};
    for (const load of loads) {
      plan[load.member.memberId] = load.shards.sort((a, b) => a - b);
    }
    return plan;
  }
}
