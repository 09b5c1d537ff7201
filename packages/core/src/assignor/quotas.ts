import type { AssignmentMember } from '../protocol/heartbeat';

/**
 * How many shards each member should own: proportional to weight, rounded by largest remainder
 * (SPEC section 4). With equal weights every member gets ⌊S/M⌋ or ⌈S/M⌉.
 *
 * Remainder ties go first to a member that already holds more than its base share (so a rounding
 * seat never moves a shard needlessly, and assigning again from the result changes nothing), then to
 * the heavier member, then by memberId.
 * Integer arithmetic only, so the result does not depend on floating-point rounding.
 */
export function computeQuotas(
  members: readonly AssignmentMember[],
  shardCount: number,
  keepable: ReadonlyMap<string, number>,
): Map<string, number> {
  const totalWeight = members.reduce((sum, m) => sum + m.weight, 0);
  const quotas = new Map<string, number>();
  const seats: { member: AssignmentMember; remainder: number; holdsMore: number }[] = [];
  let given = 0;
  for (const member of members) {
    const share = shardCount * member.weight;
    const base = Math.floor(share / totalWeight);
    quotas.set(member.memberId, base);
    given += base;
    const holdsMore = (keepable.get(member.memberId) ?? 0) > base ? 1 : 0;
    seats.push({ member, remainder: share % totalWeight, holdsMore });
  }
  seats.sort(
    (a, b) =>
      b.remainder - a.remainder ||
      b.holdsMore - a.holdsMore ||
      b.member.weight - a.member.weight ||
      compareIds(a.member.memberId, b.member.memberId),
  );
  for (let i = 0; i < shardCount - given; i++) {
    const id = seats[i].member.memberId;
    quotas.set(id, (quotas.get(id) ?? 0) + 1);
  }
  return quotas;
}

/** Code-unit order, the same order Lua and Redis sort strings in. */
export function compareIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
