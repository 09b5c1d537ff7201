import { OPTION_RANGES } from '../../protocol/option-ranges';
import type { ShardClient } from '../../redis/shard-client';
import { forShardsSideBySide } from './shards-side-by-side';

/** One resize of the stream's history (its metadata's `resizeHistory`: every shrink and ordered growth). */
export interface ResizeStep {
  version: number;
  from: number;
  to: number;
  switchAt: number;
}

/**
 * The stream metadata's `resizeHistory` (resizeShards-n.lua), the steps whose fields are all
 * numbers; an empty list for none (cjson writes an empty table as `{}`).
 */
export function parseResizeHistory(raw: string | null | undefined): ResizeStep[] {
  if (!raw) return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return [];
  }
  if (!Array.isArray(parsed)) return [];
  return parsed
    .map((step: Record<string, unknown>) => ({
      version: Number(step?.version),
      from: Number(step?.from),
      to: Number(step?.to),
      switchAt: Number(step?.switchAt),
    }))
    .filter((step) => [step.version, step.from, step.to, step.switchAt].every(Number.isFinite));
}

/**
 * A delayed entry waits in its shard's schedule at most the longest delay a send may ask for (a
 * `deliverAt` is bounded by it too): a resize whose switch is older than that left no entry routed
 * with its old count in any schedule.
 */
const LONGEST_WAIT_MS = OPTION_RANGES['producer.send.delayMs'].max;

/**
 * The shards that gave `shard` keys, under `countNow` shards, in the resizes of `history`: those a
 * key routed to under an earlier count (its delayed entries sent then wait there, routed with it,
 * until released or moved) when it routes to `shard` now. Jump hash moves a key only to a shard at
 * or past the smaller count, so under an earlier count `c` below `countNow` a shard at or past `c`
 * got keys from `[0, c)`; under one above it, a shard below `countNow` from the removed `[countNow, c)`.
 * A count counts while entries routed with it may still wait: until LONGEST_WAIT_MS after the switch
 * away from it. A shard at or past `countNow` (removed, draining, or not switched away from yet)
 * gets givers too: the keys it received in an earlier growth have older entries elsewhere, which its
 * moves (and, before the switch, its releases) must not overtake. So a survivor may wait for a
 * removed shard that waits for it: `boundOf` breaks such a tie by index, so they never wait for
 * each other for good.
 */
export function giversOf(shard: number, history: readonly ResizeStep[], countNow: number, nowMs: number): number[] {
  const givers = new Set<number>();
  // Each count of the history, with the last switch away from it (none: it is in effect, or was
  // until a resize the history does not keep, an unordered growth).
  const leftAt = new Map<number, number>();
  for (const step of history) leftAt.set(step.from, Math.max(leftAt.get(step.from) ?? 0, step.switchAt));
  for (const step of history) if (!leftAt.has(step.to)) leftAt.set(step.to, Number.POSITIVE_INFINITY);
  for (const [count, left] of leftAt) {
    if (count === countNow || left + LONGEST_WAIT_MS < nowMs) continue;
    if (count < countNow && shard >= count) for (let s = 0; s < count; s++) givers.add(s);
    if (count > countNow && shard < countNow) for (let s = countNow; s < count; s++) givers.add(s);
  }
  givers.delete(shard);
  return [...givers].sort((a, b) => a - b);
}

/**
 * The bound a giver's first score sets its receiver: exclusive (an entry due at it waits), but for a
 * giver of higher index, inclusive (a quarter millisecond past it: scores are whole or half ms).
 * Every wait of a shard for a higher one is a shrink's survivor waiting for a removed shard, which
 * may wait for the survivor in turn (it received keys from it in an earlier growth): around any such
 * cycle one wait is inclusive and one exclusive, so the shard holding the lowest first entry always
 * releases it. Between such entries of one due time, the lower shard's comes first (the order a
 * key's entries of one due time across three resizes is not kept: docs/runtime.md).
 */
export function boundOf(receiver: number, giver: number, first: number): number {
  return giver > receiver ? first + 0.25 : first;
}

/**
 * Delayed order across resizes, the receiving side (docs/runtime.md, Delayed delivery): a shard that
 * received keys in a resize releases only its schedule's entries due before the first entry still
 * waiting in the schedule of a shard that gave it keys (its `bound`, releaseDue-8.lua ARGV[8]),
 * whichever group this member is of and whether or not its group holds anything: a key's entry
 * sent before the switch enters the key's stream before the key's later ones, however late its
 * shard's owner releases or moves it.
 *
 * Each giver is read at most once per turn of the read loop, whichever receivers need it (a member
 * owning every shard of a grown stream has thousands of receivers sharing the same givers). A giver
 * found empty once its marker switched to its latest count is not read again until the stream's
 * metadata changes: entries routed with an older count cannot arrive there any more, and nothing
 * else a giver receives (its own keys' writes and moves) bounds a receiver. A giver holding entries
 * is read again each turn: an operator's makeScheduledDue may lower its first score at any time.
 */
export class ScheduleGivers {
  private history: readonly ResizeStep[] = [];
  private countNow = 0;
  private version = 0;
  private readonly givers = new Map<number, number[]>();
  /** Givers found empty after their switch, under `version`. */
  private readonly empty = new Set<number>();
  /** This turn's reads: giver -> its first score (+Infinity: empty). */
  private readonly thisTurn = new Map<number, number>();

  constructor(private readonly client: Pick<ShardClient, 'scheduleBound'>) {}

  /** The stream's resize history, shard count and metadata version, as the member's last metadata sync read them. */
  setHistory(history: readonly ResizeStep[], countNow: number, metadataVersion: number): void {
    if (history === this.history && countNow === this.countNow && metadataVersion === this.version) return;
    this.history = history;
    this.countNow = countNow;
    this.givers.clear();
    if (metadataVersion !== this.version) this.empty.clear();
    this.version = metadataVersion;
  }

  /** A new turn of the read loop: givers are read afresh (once). */
  beginTurn(): void {
    this.thisTurn.clear();
  }

  /**
   * The bound of `shard`'s release and the giver that sets it (the lowest first score among its
   * givers; +Infinity when they hold nothing), or undefined when no resize gave it keys. Reads the
   * givers not read this turn (nor known empty), side by side; rejects when a read failed.
   */
  async bound(shard: number): Promise<{ bound: number; by: number } | undefined> {
    let givers = this.givers.get(shard);
    if (givers === undefined) {
      givers = giversOf(shard, this.history, this.countNow, Date.now());
      this.givers.set(shard, givers);
    }
    if (givers.length === 0) return undefined;
    const version = this.version;
    const unread = givers.filter((giver) => !this.empty.has(giver) && !this.thisTurn.has(giver));
    await forShardsSideBySide(unread, async (giver) => {
      const answer = await this.client.scheduleBound(giver);
      const first = answer.first ?? Number.POSITIVE_INFINITY;
      if (this.version !== version) return;
      this.thisTurn.set(giver, first);
      if (answer.first === null && answer.switched) this.empty.add(giver);
    });
    let result = { bound: Number.POSITIVE_INFINITY, by: givers[0] };
    for (const giver of givers) {
      const first = this.empty.has(giver) ? Number.POSITIVE_INFINITY : (this.thisTurn.get(giver) ?? Number.NEGATIVE_INFINITY);
      const bound = boundOf(shard, giver, first);
      if (bound < result.bound) result = { bound, by: giver };
    }
    return result;
  }
}
