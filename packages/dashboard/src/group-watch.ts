import {
  type CoordinatorAdmin,
  type GroupCutoverStatus,
  type GroupEvent,
  type GroupMetadata,
  type MemberMetadata,
  SHARD_SCHEDULE_COUNTS,
  type ShardDescription,
} from '@redis-stream-coordinator/core';
import { redisLateAfterMs } from './dashboard-options';
import type { HandlerRates } from './handler-rates';

/** A member as the dashboard shows it: the stored record, its lease left (Redis time) and, for members of this process, its handler rate. */
export interface MemberView extends MemberMetadata {
  leaseLeftMs: number;
  /** Acknowledged entries per second over the last 10 s; null for a member of another process. */
  handlerRate: number | null;
}

/** One read of a group: what every browser watching it is sent. */
export interface GroupView {
  /** Redis time of the read, ms. */
  at: number;
  group: GroupMetadata;
  shards: ShardDescription[];
  members: MemberView[];
  /** The group's cutover after a resize and what it waits for; null when there is none. */
  cutover: GroupCutoverStatus | null;
  /** Lag + pending over every shard. */
  backlog: number;
  /**
   * The per-shard counts of entries waiting outside the stream (core's SHARD_SCHEDULE_COUNTS), in
   * the order the page shows them: the page renders whatever this lists, so a count added to the
   * core's list is shown without a change here or in the page.
   */
  scheduleCounts: readonly string[];
}

export interface LagPoint {
  at: number;
  lag: number;
  pending: number;
}

/** What a watch sends: `hello` once per subscriber, then `snapshot`, `events`, `problem`, `recovered`. */
export type WatchSubscriber = (event: string, data: unknown) => void;

const RECENT_EVENTS = 200;
const HISTORY_POINTS = 300;
const FIRST_EVENTS = 50;
const EVENTS_PER_READ = 500;
/** How long a group stays watched after its last browser left (a reload, a tab switch back). */
const LINGER_MS = 60_000;

/**
 * One group watched for every browser that looks at it: one loop reads the event log and the
 * group from Redis at a fixed rate and fans the result out, so Redis sees the same load for one
 * browser or fifty. The loop never overlaps itself: a slow reply delays the next read instead of
 * piling reads up, and one that takes too long is shown to the browsers as a problem while it is
 * awaited. A failed read is shown the same way and retried on the next round.
 */
export class GroupWatch {
  private readonly subscribers = new Set<WatchSubscriber>();
  private readonly recent: GroupEvent[] = [];
  private readonly history: LagPoint[] = [];
  private lastEventId: string | undefined;
  private snapshot: GroupView | undefined;
  private snapshotAt = 0;
  private problem: string | undefined;
  private loop: Promise<void> | undefined;
  private wake: (() => void) | undefined;
  /** Idle from its creation: a watch nobody subscribed to is swept like one everybody left. */
  private idleSince: number | undefined = Date.now();
  private stopped = false;

  constructor(
    private readonly admin: CoordinatorAdmin,
    readonly streamPrefix: string,
    readonly consumerGroup: string,
    private readonly refreshMs: number,
    private readonly rates: HandlerRates,
    private readonly trackMembers: () => void,
    private readonly report: (problem: string | undefined) => void,
  ) {}

  get subscriberCount(): number {
    return this.subscribers.size;
  }

  /** The last read, when it is at most `maxAgeMs` old (for the overview, which then reads nothing). */
  latest(maxAgeMs: number): GroupView | undefined {
    return this.snapshot && Date.now() - this.snapshotAt <= maxAgeMs ? this.snapshot : undefined;
  }

  /** The problem of the last round, if it failed. */
  currentProblem(): string | undefined {
    return this.problem;
  }

  /** Since when nobody watches (Date.now() ms); undefined while someone does. */
  idleSinceMs(): number | undefined {
    return this.subscribers.size === 0 ? this.idleSince : undefined;
  }

  /** True once nobody has watched for LINGER_MS: the owner then stops and forgets it. */
  isIdle(now = Date.now()): boolean {
    return this.subscribers.size === 0 && this.idleSince !== undefined && now - this.idleSince >= LINGER_MS;
  }

  subscribe(subscriber: WatchSubscriber): () => void {
    this.subscribers.add(subscriber);
    this.idleSince = undefined;
    subscriber('hello', {
      snapshot: this.snapshot ?? null,
      events: this.recent,
      history: this.history,
      problem: this.problem ?? null,
      refreshMs: this.refreshMs,
    });
    this.loop ??= this.run();
    return () => {
      this.subscribers.delete(subscriber);
      if (this.subscribers.size === 0) this.idleSince = Date.now();
    };
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.loop;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      await this.watched(this.round());
      if (this.stopped) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.refreshMs / 2);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  /**
   * Awaits a round; if Redis has not answered after a while, tells the browsers (their view is
   * stale) but still waits, so that commands never queue up on a Redis that does not answer.
   */
  private async watched(round: Promise<void>): Promise<void> {
    const lateAfterMs = redisLateAfterMs(this.refreshMs);
    const timer = setTimeout(() => this.fail(`Redis has not answered for ${lateAfterMs / 1000} s: the view is stale`), lateAfterMs);
    try {
      await round;
    } finally {
      clearTimeout(timer);
    }
  }

  private async round(): Promise<void> {
    try {
      const fresh = await this.readEvents();
      const sinceMs = Date.now() - this.snapshotAt;
      // A new event (a join, a commit, a revocation) brings the read forward, within limits.
      if (sinceMs >= this.refreshMs || (fresh && sinceMs >= this.refreshMs / 4)) await this.readGroup();
      if (this.problem !== undefined) {
        this.problem = undefined;
        this.report(undefined);
        this.broadcast('recovered', {});
      }
    } catch (error) {
      this.fail(`reading group "${this.consumerGroup}" of stream "${this.streamPrefix}" failed: ${(error as Error).message}`);
    }
  }

  private async readEvents(): Promise<boolean> {
    const events =
      this.lastEventId === undefined
        ? await this.admin.readGroupEvents(this.streamPrefix, this.consumerGroup, { count: FIRST_EVENTS })
        : await this.admin.readGroupEvents(this.streamPrefix, this.consumerGroup, { after: this.lastEventId, count: EVENTS_PER_READ });
    if (events.length === 0) return false;
    this.lastEventId = events[events.length - 1].id;
    this.recent.push(...events);
    this.recent.splice(0, Math.max(0, this.recent.length - RECENT_EVENTS));
    this.broadcast('events', events);
    return true;
  }

  private async readGroup(): Promise<void> {
    this.trackMembers();
    const [description, now] = await Promise.all([
      this.admin.describeGroup(this.streamPrefix, this.consumerGroup),
      this.admin.serverTimeMs(),
    ]);
    const cutover = description.group.cutoverInProgress
      ? ((await this.admin.cutoverStatus(this.streamPrefix)).find((status) => status.consumerGroup === this.consumerGroup) ?? null)
      : null;
    const rates = this.rates.rates();
    const members = description.members.map((member) => ({
      ...member,
      leaseLeftMs: Math.max(0, Date.parse(member.memberLeaseExpiresAt) - now),
      // A departed static member: how long its shards still wait for its next instance (Redis time).
      awaitedLeftMs: member.awaitedUntil === null ? null : Math.max(0, Date.parse(member.awaitedUntil) - now),
      handlerRate: rates.get(member.memberId) ?? null,
    }));
    let lag = 0;
    let pending = 0;
    for (const shard of description.shards) {
      lag += shard.lag;
      pending += shard.pending;
    }
    this.snapshot = {
      at: now,
      group: description.group,
      shards: description.shards,
      members,
      cutover,
      backlog: lag + pending,
      scheduleCounts: SHARD_SCHEDULE_COUNTS,
    };
    this.snapshotAt = Date.now();
    const point = { at: now, lag, pending };
    this.history.push(point);
    this.history.splice(0, Math.max(0, this.history.length - HISTORY_POINTS));
    this.broadcast('snapshot', { snapshot: this.snapshot, point });
  }

  private fail(problem: string): void {
    const changed = problem !== this.problem;
    this.problem = problem;
    // One report per distinct problem, not one per round: a Redis outage is one line, not hundreds.
    if (changed) this.report(problem);
    this.broadcast('problem', { message: problem });
  }

  private broadcast(event: string, data: unknown): void {
    for (const subscriber of this.subscribers) subscriber(event, data);
  }
}
