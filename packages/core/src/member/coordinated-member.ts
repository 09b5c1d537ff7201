import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { CoordinatorAdmin } from '../admin/coordinator-admin';
import { type Cutover, cutoverProgress, readCutover } from '../admin/cutover';
import { ErrorCode } from '../protocol/error-codes';
import { ShardCountConflictError, toCoordinatorError } from '../protocol/errors';
import { type HeartbeatRequest, type HeartbeatResponse, JOIN_EPOCH, LEAVE_EPOCH } from '../protocol/heartbeat';
import { CoordinatorClient } from '../redis/coordinator-client';
import type { RedisClient } from '../redis/scripts';
import { ShardClient } from '../redis/shard-client';
import { WakeHub } from '../redis/wake-hub';
import { sleep } from './abortable-sleep';
import { type CoordinatedMemberOptions, type ResolvedMemberOptions, resolveMemberOptions } from './member-options';
import { type AcknowledgedEvent, type ShardError, ShardPoller } from './shard-poller';

export interface ShardsEvent {
  shards: number[];
  memberEpoch: number;
}

export interface MemberEvents {
  /** Shards this member may now read (after taking over their pending entries). */
  assigned: [ShardsEvent];
  /** Shards this member gave up (its in-flight work on them finished or timed out). */
  revoked: [ShardsEvent];
  /** The coordinator refused this member (UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH): it dropped everything and rejoins. */
  fenced: [{ errorCode: ErrorCode; message: string; shards: number[]; memberEpoch: number }];
  /** No heartbeat succeeded for too long: the member stopped before its lease could be given away, and rejoins. */
  'lease-lost': [{ shards: number[]; memberEpoch: number; sinceLastHeartbeatMs: number }];
  error: [Error];
  'dead-letter': [{ shardIndex: number; id: string; reason: string; attempts: number }];
  /** Acknowledgements sent for a shard; `accepted` is false when a newer owner's fencing token refused them. */
  acknowledged: [AcknowledgedEvent];
}

type Lifecycle = 'new' | 'running' | 'stopping' | 'stopped';

/**
 * One member of a consumer group (SPEC sections 3-5): heartbeats at the interval the coordinator
 * asks for, reconciles its shards with each answer (revoke before the next owner reads), polls and
 * acknowledges under shard fencing, and rejoins when fenced.
 *
 * @example
 * const member = new CoordinatedMember(redis, {
 *   streamPrefix: 'summary', consumerGroup: 'summary-group', runtimeMaxConcurrency: 4,
 *   handler: async (message) => console.log(message.key, message.payload),
 * });
 * await member.start();
 * // ...
 * await member.stop(); // drains, acknowledges, leaves the group
 */
export class CoordinatedMember<T = unknown> extends EventEmitter<MemberEvents> {
  readonly options: ResolvedMemberOptions<T>;
  readonly coordinator: CoordinatorClient;
  private readonly reader: Redis;
  private readonly poller: ShardPoller;
  private lifecycle: Lifecycle = 'new';
  private memberEpoch = JOIN_EPOCH;
  private metadataVersion = 0;
  /** shardIndex -> the epoch it was granted at (its fencing token). */
  private readonly owned = new Map<number, number>();
  private readonly revoking = new Set<number>();
  private readonly revoked = new Set<number>();
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private heartbeatRunning: Promise<void> | undefined;
  private heartbeatAgain = false;
  /** When the last successful heartbeat was sent (monotonic ms): the lease started no earlier. */
  private lastGoodHeartbeatSentAt = 0;
  private joined: { resolve: () => void; reject: (error: Error) => void } | undefined;
  /** Whether the coordinator knows this member (it must leave on stop, whatever its epoch). */
  private hasJoined = false;
  private stopListening: (() => Promise<void>) | undefined;
  /** The group's pending cutover after a resize, as of `metadataVersion`. */
  private cutover: Cutover | null = null;
  private cutoverTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly redis: RedisClient,
    options: CoordinatedMemberOptions<T>,
  ) {
    super();
    this.options = resolveMemberOptions(options);
    this.coordinator = new CoordinatorClient(redis, this.options.coordinator);
    // Blocking reads need a connection of their own (same options: password, ACL user, TLS).
    this.reader = (redis as Redis).duplicate();
    this.reader.on('error', () => undefined); // reported through the read loop
    const shardClient = new ShardClient(redis, this.coordinator.keys, this.options.streamPrefix, this.options.consumerGroup, this.options.memberId);
    this.poller = new ShardPoller(shardClient, redis as Redis, this.reader, this.options as ResolvedMemberOptions, () => this.leaseIsSafe());
    this.poller.on('error', (error: ShardError) => this.emit('error', error));
    this.poller.on('dead-letter', (event) => this.emit('dead-letter', event));
    this.poller.on('acknowledged', (event) => this.emit('acknowledged', event));
    this.poller.on('claim-refused', () => this.requestHeartbeat()); // the grant may be stale: ask now
  }

  get memberId(): string {
    return this.options.memberId;
  }

  /** The shards this member reads now. */
  ownedShards(): number[] {
    return [...this.owned.keys()].sort((a, b) => a - b);
  }

  currentMemberEpoch(): number {
    return this.memberEpoch;
  }

  /** What the member is doing now: for health checks, dashboards and tests. */
  stats(): {
    joined: boolean;
    memberEpoch: number;
    ownedShards: number[];
    revokingShards: number[];
    activeHandlers: number;
    bufferedEntries: number;
    heldEntries: number;
    metadataVersion: number;
    /**
     * What keeps this member from doing its work right now, one line each (a shard it cannot claim, a
     * dead letter it cannot write, a configuration it cannot recover from). Empty when all is well;
     * health checks report these.
     */
    problems: string[];
  } {
    return {
      joined: this.hasJoined && this.lifecycle === 'running' && this.leaseIsSafe(),
      memberEpoch: this.memberEpoch,
      ownedShards: this.ownedShards(),
      revokingShards: [...this.revoking].sort((a, b) => a - b),
      activeHandlers: this.poller.activeHandlers,
      bufferedEntries: this.poller.bufferedEntries,
      heldEntries: this.poller.heldEntries,
      metadataVersion: this.metadataVersion,
      problems: [...this.poller.problems()],
    };
  }

  /** Joins the group and starts polling; resolves after the first successful heartbeat. */
  async start(): Promise<void> {
    if (this.lifecycle !== 'new') throw new Error(`member ${this.memberId} was already started`);
    if (this.options.shardCount !== undefined) {
      // Before anything runs: if Redis cannot be reached yet, start() fails (within a third of the
      // session timeout, not after the client's own retries) and may be called again.
      const admin = new CoordinatorAdmin(this.redis, { keyPrefix: this.coordinator.options.keyPrefix });
      const created = admin.createStream({ streamPrefix: this.options.streamPrefix, shardCount: this.options.shardCount }).catch((error: unknown) => {
        // The stream exists with another count: it was resized after this configuration was written.
        if (!(error instanceof ShardCountConflictError)) throw error;
      });
      await this.withTimeout(created, Math.max(100, Math.floor(this.options.sessionTimeoutMs / 3)));
    }
    if (this.lifecycle !== 'new') throw new Error(`member ${this.memberId} was stopped while starting`);
    this.lifecycle = 'running';
    const joined = new Promise<void>((resolve, reject) => (this.joined = { resolve, reject }));
    // stop() may reject it before start() awaits it; start() still sees the rejection below.
    joined.catch(() => undefined);
    try {
      this.stopListening = await WakeHub.for(this.redis).listen(
        this.coordinator.keys.groupWakeChannel(this.options.streamPrefix, this.options.consumerGroup),
        (publisher) => {
          if (publisher !== this.memberId) this.requestHeartbeat();
        },
      );
    } catch (error) {
      // Without wake-ups the member still works; rebalances just wait for heartbeat intervals.
      this.emit('error', new Error(`member ${this.memberId}: cannot listen for wake-ups: ${(error as Error).message}`));
    }
    this.poller.start();
    this.requestHeartbeat();
    await joined;
  }

  /** Stops reading, finishes in-flight handlers (bounded), acknowledges, and leaves the group. */
  async stop(): Promise<void> {
    if (this.lifecycle === 'stopped' || this.lifecycle === 'stopping') return;
    const wasRunning = this.lifecycle === 'running';
    this.lifecycle = 'stopping';
    clearTimeout(this.heartbeatTimer);
    clearTimeout(this.cutoverTimer);
    this.joined?.reject(new Error(`member ${this.memberId} stopped before it joined`));
    await this.heartbeatRunning?.catch(() => undefined);
    await this.poller.stop(this.options.shutdownTimeoutMs);
    if (wasRunning && this.hasJoined) {
      try {
        await this.coordinator.heartbeat(this.request(LEAVE_EPOCH));
      } catch (error) {
        this.emit('error', new Error(`member ${this.memberId} could not leave the group: ${(error as Error).message}`));
      }
    }
    this.owned.clear();
    this.reader.disconnect();
    await this.stopListening?.();
    this.lifecycle = 'stopped';
  }

  /**
   * Stops at once, as if the process died: no draining, no acknowledgements, no leave; the blocking
   * connection is cut and the timers stop. The coordinator expires the member after its session
   * timeout. For tests and emergency shutdown.
   */
  abort(): void {
    this.lifecycle = 'stopped';
    clearTimeout(this.heartbeatTimer);
    clearTimeout(this.cutoverTimer);
    this.joined?.reject(new Error(`member ${this.memberId} aborted`));
    this.poller.dropAll();
    void this.poller.stop(0);
    this.reader.disconnect();
    void this.stopListening?.();
  }

  // ---- heartbeats -----------------------------------------------------------------------------------

  private request(memberEpoch = this.memberEpoch): HeartbeatRequest {
    return {
      streamPrefix: this.options.streamPrefix,
      consumerGroup: this.options.consumerGroup,
      memberId: this.memberId,
      memberEpoch,
      memberName: this.options.memberName,
      runtimeMaxConcurrency: this.options.runtimeMaxConcurrency,
      // Workers this member can keep busy: one per owned shard, up to its capacity. Stable between
      // rebalances, so a steady member's heartbeat stays on the coordinator's cheap path.
      activeConsumerWorkers: Math.min(this.options.runtimeMaxConcurrency, this.owned.size),
      weight: this.options.weight,
      sessionTimeoutMs: this.options.sessionTimeoutMs,
      rebalanceTimeoutMs: this.options.rebalanceTimeoutMs,
      metadataVersion: this.metadataVersion,
      owned: this.ownedShards(),
      revoking: [...this.revoking],
      ackedRevocations: [...this.revoked],
    };
  }

  /** An out-of-cycle heartbeat as soon as possible: at once, or right after the one in flight. */
  private requestHeartbeat(): void {
    if (this.lifecycle !== 'running') return;
    if (this.heartbeatRunning) {
      this.heartbeatAgain = true;
      return;
    }
    clearTimeout(this.heartbeatTimer);
    this.heartbeatRunning = this.heartbeat().finally(() => {
      this.heartbeatRunning = undefined;
      if (this.heartbeatAgain) {
        this.heartbeatAgain = false;
        this.requestHeartbeat();
      }
    });
  }

  private schedule(intervalMs: number): void {
    if (this.lifecycle !== 'running') return;
    clearTimeout(this.heartbeatTimer);
    // Jitter, never later than asked: members spread out instead of heartbeating in lockstep.
    const delay = Math.max(1, Math.round(intervalMs * (0.85 + 0.15 * Math.random())));
    this.heartbeatTimer = setTimeout(() => this.requestHeartbeat(), delay);
  }

  private async heartbeat(): Promise<void> {
    const request = this.request();
    const sentAt = performance.now();
    let response: HeartbeatResponse;
    try {
      response = await this.withTimeout(this.coordinator.heartbeat(request), Math.max(100, Math.floor(this.options.sessionTimeoutMs / 3)));
    } catch (error) {
      this.emit('error', new Error(`member ${this.memberId}: heartbeat failed: ${(error as Error).message}`));
      this.checkLease();
      this.schedule(Math.min(1000, Math.floor(this.options.sessionTimeoutMs / 5)));
      return;
    }
    if (this.lifecycle !== 'running') return;
    if (response.errorCode === ErrorCode.UNKNOWN_MEMBER_ID || response.errorCode === ErrorCode.FENCED_MEMBER_EPOCH) {
      this.lastGoodHeartbeatSentAt = sentAt;
      this.emit('fenced', { errorCode: response.errorCode, message: response.errorMessage, shards: this.ownedShards(), memberEpoch: this.memberEpoch });
      this.dropEverything();
      this.requestHeartbeat();
      return;
    }
    if (response.errorCode !== ErrorCode.NONE) {
      const error = toCoordinatorError(response.errorCode, `member ${this.memberId}: ${response.errorMessage}`);
      this.emit('error', error);
      this.schedule(Math.min(5000, Math.floor(this.options.sessionTimeoutMs / 3)));
      return;
    }
    this.lastGoodHeartbeatSentAt = sentAt;
    this.hasJoined = true;
    for (const shard of request.ackedRevocations ?? []) this.revoked.delete(shard);
    if (response.metadataVersion !== this.metadataVersion) await this.syncMetadata(response.metadataVersion);
    if (this.lifecycle !== 'running') return;
    this.apply(response);
    this.joined?.resolve();
    this.joined = undefined;
    this.schedule(response.heartbeatIntervalMs);
  }

  private withTimeout<R>(promise: Promise<R>, ms: number): Promise<R> {
    return Promise.race([
      promise,
      sleep(ms).then(() => {
        throw new Error(`no answer within ${ms} ms`);
      }),
    ]);
  }

  // ---- resharding ----------------------------------------------------------------------------------

  /**
   * The stream's metadata changed (or this member just joined): read the group's cutover, hold what
   * it holds, and check on it until it completes (docs/resharding.md). On failure the version stays
   * old, so the next heartbeat tries again.
   */
  private async syncMetadata(metadataVersion: number): Promise<void> {
    let cutover: Cutover | null;
    try {
      cutover = await readCutover(this.redis, this.coordinator.keys, this.options.streamPrefix, this.options.consumerGroup);
    } catch (error) {
      this.emit('error', new Error(`member ${this.memberId}: reading the group's cutover failed: ${(error as Error).message}`));
      return;
    }
    this.cutover = cutover;
    const from = cutover ? `${cutover.switchAt}-0` : '';
    this.poller.setHolds(new Map((cutover?.held ?? []).map((shard) => [shard, from])));
    this.metadataVersion = metadataVersion;
    clearTimeout(this.cutoverTimer);
    if (cutover) this.scheduleCutoverCheck(cutover);
  }

  private scheduleCutoverCheck(cutover: Cutover): void {
    if (this.lifecycle !== 'running' || this.cutover !== cutover) return;
    const delay = Math.round(this.options.cutoverCheckIntervalMs * (0.75 + 0.5 * Math.random()));
    this.cutoverTimer = setTimeout(() => void this.checkCutover(cutover), delay);
  }

  /** Any member of the group may complete its cutover; the script ignores all but the first. */
  private async checkCutover(cutover: Cutover): Promise<void> {
    try {
      const { streamPrefix, consumerGroup } = this.options;
      const progress = await cutoverProgress(this.redis, this.coordinator.keys, streamPrefix, consumerGroup, cutover);
      if (progress.ready && this.cutover === cutover) {
        await this.coordinator.completeCutover(streamPrefix, consumerGroup, cutover.version);
        this.requestHeartbeat();
        return;
      }
    } catch (error) {
      this.emit('error', new Error(`member ${this.memberId}: checking the group's cutover failed: ${(error as Error).message}`));
    }
    this.scheduleCutoverCheck(cutover);
  }

  // ---- reconciliation ------------------------------------------------------------------------------

  private apply(response: HeartbeatResponse): void {
    this.memberEpoch = response.memberEpoch;
    const assigned = new Set(response.assignedShards);
    const toRevoke = new Set(response.revokeShards);

    const revokedNow: number[] = [];
    for (const shard of toRevoke) {
      if (this.owned.has(shard)) {
        this.owned.delete(shard);
        this.revoking.add(shard);
        revokedNow.push(shard);
      } else if (!this.revoking.has(shard)) {
        // Finished earlier, but the answer to the heartbeat that reported it was lost: report again.
        this.revoked.add(shard);
      }
    }
    // A shard the coordinator no longer counts as ours at all (e.g. after a rejoin): stop at once.
    for (const shard of [...this.owned.keys()]) {
      if (!assigned.has(shard) && !toRevoke.has(shard)) {
        this.owned.delete(shard);
        void this.poller.releaseShard(shard, 0);
      }
    }
    if (revokedNow.length > 0) void this.revoke(revokedNow, response.memberEpoch);

    const gained: number[] = [];
    for (const shard of assigned) {
      if (!this.owned.has(shard) && !this.revoking.has(shard)) {
        this.owned.set(shard, response.memberEpoch);
        this.poller.addShard(shard, response.memberEpoch);
        gained.push(shard);
      }
    }
    if (gained.length > 0) {
      this.emit('assigned', { shards: gained.sort((a, b) => a - b), memberEpoch: response.memberEpoch });
      this.requestHeartbeat(); // report the new ownership (and the new activeConsumerWorkers) at once
    }
  }

  /** Revoke-before-assign: stop, let in-flight work finish (bounded), acknowledge, then report at once. */
  private async revoke(shards: number[], memberEpoch: number): Promise<void> {
    await Promise.all(shards.map((shard) => this.poller.releaseShard(shard, this.options.revocationTimeoutMs)));
    for (const shard of shards) {
      if (this.revoking.delete(shard)) this.revoked.add(shard);
    }
    this.emit('revoked', { shards: [...shards].sort((a, b) => a - b), memberEpoch });
    this.requestHeartbeat();
  }

  /** Local ownership is no longer valid: stop reading and acking, clear everything, rejoin with epoch 0. */
  private dropEverything(): void {
    this.poller.dropAll();
    this.owned.clear();
    this.revoking.clear();
    this.revoked.clear();
    this.memberEpoch = JOIN_EPOCH;
  }

  // ---- lease ---------------------------------------------------------------------------------------

  /**
   * The coordinator's lease on this member started no earlier than the send time of the last
   * successful heartbeat; stopping a margin before it can end means no handler starts after the
   * shard could have been given to someone else, whatever the clocks say.
   */
  private leaseIsSafe(): boolean {
    if (this.lastGoodHeartbeatSentAt === 0) return this.owned.size === 0;
    return performance.now() - this.lastGoodHeartbeatSentAt < this.leaseBudgetMs();
  }

  private leaseBudgetMs(): number {
    const margin = Math.min(1000, Math.floor(this.options.sessionTimeoutMs / 5));
    return this.options.sessionTimeoutMs - margin;
  }

  private checkLease(): void {
    if (this.owned.size === 0 && this.revoking.size === 0) return;
    const since = performance.now() - this.lastGoodHeartbeatSentAt;
    if (since < this.leaseBudgetMs()) return;
    this.emit('lease-lost', { shards: this.ownedShards(), memberEpoch: this.memberEpoch, sinceLastHeartbeatMs: Math.round(since) });
    this.dropEverything();
  }
}
