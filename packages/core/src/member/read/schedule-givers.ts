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
 * away from it. A shard at or past `countNow` (removed, draining) gets none, and a live shard only
 * from shards of lower index, so no two shards ever wait for each other.
 */
export function giversOf(shard: number, history: readonly ResizeStep[], countNow: number, nowMs: number): number[] {
  const givers = new Set<number>();
  if (shard >= countNow) return [];
  // Each count of the history, with the last switch away from it (none: it is in effect, or was
  // until a resize the history does not keep, an unordered growth).
  const leftAt = new Map<number, number>();
  for (const step of history) leftAt.set(step.from, Math.max(leftAt.get(step.from) ?? 0, step.switchAt));
  for (const step of history) if (!leftAt.has(step.to)) leftAt.set(step.to, Number.POSITIVE_INFINITY);
  for (const [count, left] of leftAt) {
    if (count === countNow || left + LONGEST_WAIT_MS < nowMs) continue;
    if (count < countNow && shard >= count) for (let s = 0; s < count; s++) givers.add(s);
    if (count > countNow) for (let s = countNow; s < count; s++) givers.add(s);
  }
  givers.delete(shard);
  return [...givers].sort((a, b) => a - b);
}

/**
 * How long before a giver's known first due time it is read again: a bound read earlier stays
 * true (it only grows), so it is read again only once the receiving shard may have entries due at
 * it; this covers the member's clock running behind Redis'.
 */
const READ_AGAIN_BEFORE_MS = 1000;

/**
 * Delayed order across resizes, the receiving side (docs/runtime.md, Delayed delivery): a shard that
 * received keys in a resize releases only its schedule's entries due before the first entry still
 * waiting in the schedule of a shard that gave it keys (its `bound`, releaseDue-8.lua ARGV[8]),
 * whichever group this member is of and whether or not its group holds anything: a key's entry
 * sent before the switch enters the key's stream before the key's later ones, however late its
 * shard's owner releases or moves it.
 *
 * A giver's first score read once it has switched to the latest count stays a lower bound of its
 * entries routed with an older count for good (new writes there are routed with the new count: its
 * own keys), so it is kept until the receiving shard's entries reach it; an empty schedule then
 * bounds nothing for good. Read before its switch, or under another version than the history's
 * latest, it is used once and read again.
 */
export class ScheduleGivers {
  private history: readonly ResizeStep[] = [];
  private countNow = 0;
  /** The stream's metadataVersion the history is of: the givers' markers carry it once written. */
  private latest = 0;
  private readonly givers = new Map<number, number[]>();
  /** giver -> its first score read after the switch of the latest version (+Infinity: empty then). */
  private readonly known = new Map<number, number>();

  constructor(private readonly client: Pick<ShardClient, 'scheduleBound'>) {}

  /** The stream's resize history, shard count and metadata version, as the member's last metadata sync read them. */
  setHistory(history: readonly ResizeStep[], countNow: number, metadataVersion: number): void {
    if (history === this.history && countNow === this.countNow && metadataVersion === this.latest) return;
    this.history = history;
    this.countNow = countNow;
    this.givers.clear();
    if (metadataVersion !== this.latest) this.known.clear();
    this.latest = metadataVersion;
  }

  /**
   * The bound of `shard`'s release and the giver that sets it (the lowest first score among its
   * givers; +Infinity when they hold nothing), or undefined when no resize gave it keys. Reads
   * the givers it does not know a bound of far enough ahead, side by side; rejects when a read failed.
   */
  async bound(shard: number): Promise<{ bound: number; by: number } | undefined> {
    let givers = this.givers.get(shard);
    if (givers === undefined) {
      givers = giversOf(shard, this.history, this.countNow, Date.now());
      this.givers.set(shard, givers);
    }
    if (givers.length === 0) return undefined;
    const readAgainBelow = Date.now() + READ_AGAIN_BEFORE_MS;
    const read = new Map<number, number>();
    const stale = givers.filter((giver) => (this.known.get(giver) ?? Number.NEGATIVE_INFINITY) <= readAgainBelow);
    const latest = this.latest;
    await forShardsSideBySide(stale, async (giver) => {
      const answer = await this.client.scheduleBound(giver);
      const first = answer.first ?? Number.POSITIVE_INFINITY;
      read.set(giver, first);
      if (answer.switched && answer.version === latest && this.latest === latest) this.known.set(giver, first);
      else this.known.delete(giver);
    });
    let result = { bound: Number.POSITIVE_INFINITY, by: givers[0] };
    for (const giver of givers) {
      const bound = read.get(giver) ?? this.known.get(giver) ?? Number.NEGATIVE_INFINITY;
      if (bound < result.bound) result = { bound, by: giver };
    }
    return result;
  }
}
