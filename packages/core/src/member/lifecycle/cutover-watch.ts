import { type Cutover, cutoverProgress, heldFrom, readGroupCutover } from '../../admin/cutover';
import type { CoordinatorClient } from '../../redis/coordinator-client';
import type { RedisClient } from '../../redis/scripts';
import { withTimeout } from '../abortable-sleep';
import { parseResizeHistory, type ResizeStep } from '../read/schedule-givers';

export interface CutoverWatchSettings {
  streamPrefix: string;
  consumerGroup: string;
  cutoverCheckIntervalMs: number;
  /** How long the cutover read (`sync`, which gates new shards) may take before it counts as failed. */
  readTimeoutMs: number;
  /**
   * How long each call of a periodic check (its progress read, then the completion) may take before
   * it counts as failed and is tried again: a check renews and gates nothing, so it gets the bound of
   * a call beside the heartbeats (commandCallTimeoutMs), not a heartbeat's. A progress read is three
   * round trips; bounded as one heartbeat, every check on a slow link failed and the cutover never
   * completed (the short tier on a loaded machine: "waits for nothing (not completed)").
   */
  checkTimeoutMs: number;
  /** Entries of these shards from this id on wait until the cutover completes (ordered shrink, a later group's steps). */
  setHolds(holds: Map<number, string>): void;
  /**
   * The stream's resize history, shard count and metadata version, read with the cutover: the
   * shards that gave each shard keys, whose schedules bound its releases (ScheduleGivers).
   */
  setResizeHistory(history: readonly ResizeStep[], shardCount: number, metadataVersion: number): void;
  /** A check of the cutover's progress failed; it is tried again at the next interval. */
  onCheckFailed(error: Error): void;
  /** This member completed the cutover: the group's metadata changed, heartbeat now. */
  onCompleted(): void;
}

/**
 * A member's view of its group's cutover after a resize (docs/resharding.md): what it must hold,
 * and a periodic check that completes the cutover when the shard streams allow it. Any member of
 * the group may complete it; the script ignores all but the first.
 */
export class CutoverWatch {
  /** The group's pending cutover as of the last successful `sync`. */
  private cutover: Cutover | null = null;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly redis: RedisClient,
    private readonly coordinator: CoordinatorClient,
    private readonly settings: CutoverWatchSettings,
  ) {}

  /**
   * Reads the group's cutover, holds what it holds and checks on it until it completes. The read is
   * bounded by `readTimeoutMs`, so it cannot hold up a heartbeat loop; it rejects when the read failed
   * or was late, and then nothing changed. `incarnation` is the group's life the answer that asked
   * for this read came from: when the group's keys are gone by the time of the read, or it is another
   * life's (recreated meanwhile), it rejects too and the holds stay: "no cutover" read then would
   * release entries that the group, in either life, still orders after others.
   */
  async sync(incarnation: string, metadataVersion = 0): Promise<void> {
    const { streamPrefix, consumerGroup, readTimeoutMs } = this.settings;
    const [read, [history, shardCount]] = await withTimeout(
      Promise.all([
        readGroupCutover(this.redis, this.coordinator.keys, streamPrefix, consumerGroup),
        this.redis.hmget(this.coordinator.keys.streamMeta(streamPrefix), 'resizeHistory', 'shardCount'),
      ]),
      readTimeoutMs,
    );
    if (read.incarnation === null)
      throw new Error(`the group's keys are gone (lost, or the group deleted); what is held stays held until the member has rejoined`);
    if (read.incarnation !== incarnation) {
      throw new Error(
        `the group was recreated since the answer (incarnation ${read.incarnation}, the answer's ${incarnation}); what is held stays held until the member has rejoined`,
      );
    }
    this.settings.setResizeHistory(parseResizeHistory(history), Number(shardCount ?? 0), metadataVersion);
    const cutover = read.cutover;
    const fresh = cutover !== null && cutover.version !== this.cutover?.version;
    this.cutover = cutover;
    this.settings.setHolds(new Map(cutover ? cutover.held.map((shard) => [shard, heldFrom(cutover, shard)]) : []));
    clearTimeout(this.timer);
    // A replayed step (a group created after resizes) is checked at once when it is new: its switch
    // and grace are long past and its shards mostly processed, so a group with a long history crosses
    // it step after step at the speed of Redis, not one check interval per recorded resize.
    if (cutover) this.schedule(cutover, fresh && cutover.replay);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** For a member started again after stop(): forgets the old cutover; the next `sync` reads it afresh. */
  restart(): void {
    this.stopped = false;
    this.cutover = null;
  }

  private schedule(cutover: Cutover, now = false): void {
    if (this.stopped || this.cutover !== cutover) return;
    const delay = now ? 0 : Math.round(this.settings.cutoverCheckIntervalMs * (0.75 + 0.5 * Math.random()));
    this.timer = setTimeout(() => void this.check(cutover), delay);
  }

  private async check(cutover: Cutover): Promise<void> {
    try {
      const { streamPrefix, consumerGroup, checkTimeoutMs } = this.settings;
      // Each call bounded (SPEC 10.1): a check stuck on a silent connection would end the checks for
      // good. A completion that lands late is harmless: completing a completed cutover changes nothing.
      const progress = await withTimeout(
        cutoverProgress(this.redis, this.coordinator.keys, streamPrefix, consumerGroup, cutover),
        checkTimeoutMs,
      );
      if (progress.ready && this.cutover === cutover && !this.stopped) {
        await withTimeout(this.coordinator.completeCutover(streamPrefix, consumerGroup, cutover.version), checkTimeoutMs);
        this.settings.onCompleted();
        return;
      }
    } catch (error) {
      this.settings.onCheckFailed(error as Error);
    }
    this.schedule(cutover);
  }
}
