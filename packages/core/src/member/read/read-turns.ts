import type { ShardSet, ShardState } from '../shard-state';

/**
 * At most `room` of the shards (the buffer's room for reads of leastCount entries each): those with
 * the fewest entries queued, which run dry first; among as many queued, those whose last read came
 * back full (they have more) before those read to their end, and then those read longest ago
 * (`lastRead`): by index alone, the same idle shards would win every time and the others, entries
 * waiting in their streams, would never be read. And, within `budget` (one entry each at least),
 * those a read must serve whatever the floor (`mustRead`: a batch waiting to fill). In shard order,
 * the order reads list them.
 */
export function fewestQueued(
  shards: ShardSet,
  candidates: number[],
  room: number,
  budget: number,
  mustRead: (state: ShardState) => boolean,
  lastRead: (state: ShardState) => { read: number; short: boolean } | undefined,
): number[] {
  if (candidates.length <= room) return candidates;
  const rank = (s: number) => {
    const state = shards.get(s)!;
    const last = lastRead(state);
    return { s, queued: state.queue.length, short: last?.short === true ? 1 : 0, read: last?.read ?? 0 };
  };
  const chosen = new Set(
    room <= 0
      ? []
      : candidates
          .map(rank)
          .sort((a, b) => a.queued - b.queued || a.short - b.short || a.read - b.read || a.s - b.s)
          .slice(0, room)
          .map((r) => r.s),
  );
  for (const s of candidates) {
    if (chosen.size >= budget) break;
    if (!chosen.has(s) && mustRead(shards.get(s)!)) chosen.add(s);
  }
  return candidates.filter((s) => chosen.has(s));
}
