import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { CoordinatorAdmin } from '../admin/coordinator-admin';
import { ErrorCode } from '../protocol/error-codes';
import { assertIntegerInRange } from '../protocol/names';
import { type CoordinatorError, ShardCountConflictError, toCoordinatorError } from '../protocol/errors';
import { type HeartbeatRequest, type HeartbeatResponse, JOIN_EPOCH, LEAVE_EPOCH } from '../protocol/heartbeat';
import { CoordinatorClient } from '../redis/coordinator-client';
import type { RedisClient } from '../redis/scripts';
import { ShardClient } from '../redis/shard-client';
import { WakeHub } from '../redis/wake-hub';
import { sleep } from './abortable-sleep';
import { CutoverWatch } from './cutover-watch';
import { HeartbeatSchedule } from './heartbeat-schedule';
import { MemberLease } from './member-lease';
import { type CoordinatedMemberOptions, MAX_RUNTIME_CONCURRENCY, type ResolvedMemberOptions, resolveMemberOptions } from './member-options';
import { reconnect } from './reader-connection';
import type { MemberEvents } from './member-events';
import { type ShardError, ShardPoller } from './shard-poller';

export type { MemberEvents, ShardsEvent } from './member-events';

type Lifecycle = 'new' | 'starting' | 'running' | 'stopping' | 'stopped';

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
 * await member.start(); // and joins again (same memberId and instance)
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
  private readonly heartbeats = new HeartbeatSchedule(
    () => this.heartbeat(),
    () => this.heartbeating(),
  );
  private readonly lease: MemberLease;
  /** Bumped by every start() and stop(): a start() that finds it changed after an await was overtaken. */
  private generation = 0;
  /** The stop() or abort() under way or last done: a start() waits for it to end. */
  private shutdown: Promise<void> | undefined;
  private joined: { resolve: () => void; reject: (error: Error) => void } | undefined;
  /** Whether the coordinator knows this member (it must leave on stop, whatever its epoch). */
  private hasJoined = false;
  private stopListening: (() => Promise<void>) | undefined;
  /**
   * This process's identity under `memberId` (SPEC 9.4): a join from another instance while this
   * one's lease is live is refused with FENCED_INSTANCE_ID, and so is this one's after another took over.
   */
  readonly instanceId = randomUUID();
  private readonly shardClient: ShardClient;
  /** Set for good when this instance was refused its memberId (FencedInstanceIdError). */
  private fatal: CoordinatorError | undefined;
  /** True from stop() until the drain ended: heartbeats go on so the lease outlives every handler. */
  private draining = false;
  /** Resolves when stop()'s drain ended (handlers finished or shutdownTimeoutMs passed). */
  private drained: Promise<void> | undefined;
  /** Heartbeats in a row answered INVALID_REQUEST; two mean the member's view itself is bad. */
  private invalidInARow = 0;
  /** GROUP_NOT_FOUND answers in a row (the stream has no metadata): sets the backoff. */
  private missingInARow = 0;
  /** Conditions of this member (not of a shard) that keep it from working, by kind. */
  private readonly memberProblems = new Map<'group' | 'request' | 'metadata' | 'instance', string>();
  /** The group's cutover after a resize, as of `metadataVersion`. */
  private readonly cutover: CutoverWatch;

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
    this.shardClient = shardClient;
    this.poller = new ShardPoller(shardClient, redis as Redis, this.reader, this.options as ResolvedMemberOptions, () => this.leaseIsSafe());
    this.lease = new MemberLease(this.options.sessionTimeoutMs);
    this.cutover = new CutoverWatch(redis, this.coordinator, {
      streamPrefix: this.options.streamPrefix,
      consumerGroup: this.options.consumerGroup,
      cutoverCheckIntervalMs: this.options.cutoverCheckIntervalMs,
      readTimeoutMs: this.callTimeoutMs(),
      setHolds: (holds) => this.poller.setHolds(holds),
      onCheckFailed: (error) => this.emit('error', new Error(`member ${this.memberId}: checking the group's cutover failed: ${error.message}`)),
      onCompleted: () => this.requestHeartbeat(),
    });
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

  /** Whether the member has been started and not stopped (it may still be joining, or paused). */
  isRunning(): boolean {
    return this.lifecycle === 'starting' || this.lifecycle === 'running';
  }

  /** Whether `pause()` is in effect (until `resume()`, across stop() and start()). */
  isPaused(): boolean {
    return this.poller.isPaused;
  }

  /**
   * Stops fetching entries and starting handlers (retries included), and keeps everything else: the
   * membership, its shards and their fencing tokens, heartbeats, and revocations, which are answered
   * as promptly as ever (a paused member's in-flight handlers are what a revocation waits for).
   * In-flight handlers finish and are acknowledged; entries already read wait, in order, for
   * `resume()`, or stay pending for the next owner if their shard is revoked meanwhile. Shards
   * gained while paused are claimed but not read. Pausing does not fire `message.signal`. The pause
   * lasts until `resume()`, across stop() and start().
   *
   * @example
   * member.pause();   // e.g. a downstream system is down
   * member.resume();
   */
  pause(): void {
    this.poller.pause();
  }

  /** Undoes `pause()`: fetching and handlers start again where they stopped. */
  resume(): void {
    this.poller.resume();
  }

  /**
   * Changes how many handlers this member runs at once, live, without leaving the group. A higher
   * value starts more handlers at once (still one per shard); a lower one lets the calls in flight
   * finish and starts no new one until fewer run than the new value. The coordinator learns it with
   * the next heartbeat (sent at once). Throws a RangeError naming `runtimeMaxConcurrency` for a
   * value that is not an integer from 1 to 10000.
   */
  setRuntimeMaxConcurrency(runtimeMaxConcurrency: number): void {
    assertIntegerInRange('runtimeMaxConcurrency', runtimeMaxConcurrency, 1, MAX_RUNTIME_CONCURRENCY);
    if (this.options.runtimeMaxConcurrency === runtimeMaxConcurrency) return;
    // The poller reads the same options object: the dispatcher sees the new capacity at once.
    this.options.runtimeMaxConcurrency = runtimeMaxConcurrency;
    this.poller.capacityChanged();
    this.requestHeartbeat();
  }

  /** What the member is doing now: for health checks, dashboards and tests. */
  stats(): {
    joined: boolean;
    /** Started and not stopped (it may still be joining). */
    running: boolean;
    /** `pause()` is in effect: nothing is fetched and no handler starts. */
    paused: boolean;
    runtimeMaxConcurrency: number;
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
      running: this.isRunning(),
      paused: this.isPaused(),
      runtimeMaxConcurrency: this.options.runtimeMaxConcurrency,
      memberEpoch: this.memberEpoch,
      ownedShards: this.ownedShards(),
      revokingShards: [...this.revoking].sort((a, b) => a - b),
      activeHandlers: this.poller.activeHandlers,
      bufferedEntries: this.poller.bufferedEntries,
      heldEntries: this.poller.heldEntries,
      metadataVersion: this.metadataVersion,
      problems: [...this.memberProblems.values(), ...this.poller.problems()],
    };
  }

  /**
   * Joins the group and starts polling; resolves after the first successful heartbeat. Rejects with
   * FencedInstanceIdError when another live instance holds this memberId (then and ever after).
   *
   * A stopped member can be started again: it joins with the same memberId and instance id (so a
   * restart before its old membership expired, e.g. after a leave that failed, is this instance
   * rejoining, not a second process), epoch 0, and none of the shards it had. A start() while a
   * stop() or abort() is still under way waits for it first. A start() of a running member throws.
   */
  async start(): Promise<void> {
    if (this.fatal) throw this.fatal;
    if (this.lifecycle === 'stopping') await this.shutdown;
    if (this.fatal) throw this.fatal;
    if (this.lifecycle !== 'new' && this.lifecycle !== 'stopped') throw new Error(`member ${this.memberId} was already started`);
    if (this.lifecycle === 'stopped') {
      // abort() does not wait for its poller to stop: it must have, before the poller starts again.
      await this.shutdown;
      if (this.lifecycle !== 'stopped') throw new Error(`member ${this.memberId} was already started`);
      await this.prepareRestart();
    }
    const generation = ++this.generation;
    this.lifecycle = 'starting';
    // Before anything runs: if Redis cannot be reached yet, start() fails (within a third of the
    // session timeout, not after the client's own retries) and may be called again.
    if (this.options.shardCount !== undefined) {
      try {
        await this.ensureStream(this.options.shardCount);
      } catch (error) {
        if (this.generation === generation) this.lifecycle = 'stopped';
        throw error;
      }
    }
    if (this.generation !== generation || this.lifecycle !== 'starting') throw new Error(`member ${this.memberId} was stopped while starting`);
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
    if (this.generation !== generation || this.lifecycle !== 'running') {
      await this.stopListening?.();
      await joined;
      return;
    }
    this.poller.start();
    this.requestHeartbeat();
    await joined;
  }

  /**
   * A stopped member about to start again: forget everything of its last membership (it rejoins
   * with epoch 0 and no shards) and reconnect its blocking connection, which stop() closed. The
   * instance id and a pause stay.
   */
  private async prepareRestart(): Promise<void> {
    this.memberEpoch = JOIN_EPOCH;
    this.metadataVersion = 0;
    this.owned.clear();
    this.revoking.clear();
    this.revoked.clear();
    this.hasJoined = false;
    this.draining = false;
    this.drained = undefined;
    this.invalidInARow = 0;
    this.missingInARow = 0;
    this.memberProblems.clear();
    this.lease.reset();
    this.cutover.restart();
    await reconnect(this.reader);
  }

  /**
   * Stops reading, finishes in-flight handlers (bounded by shutdownTimeoutMs; past it their
   * `message.signal` fires), acknowledges, and leaves the group. Until it has left, the member keeps
   * heartbeating: its lease outlives every handler it still runs, so no other member is given those
   * shards meanwhile. While stopping it applies revocations (after the drain, bounded by
   * revocationTimeoutMs) and takes no new shards. Calling it again while it runs returns the same
   * promise. The member can be started again afterwards.
   */
  stop(): Promise<void> {
    if (this.lifecycle === 'stopping') return this.shutdown ?? Promise.resolve();
    if (this.lifecycle === 'stopped') return Promise.resolve();
    this.generation += 1;
    this.shutdown = this.stopNow();
    return this.shutdown;
  }

  private async stopNow(): Promise<void> {
    const wasRunning = this.lifecycle === 'running';
    this.lifecycle = 'stopping';
    this.draining = wasRunning && this.hasJoined;
    this.cutover.stop();
    this.joined?.reject(new Error(`member ${this.memberId} stopped before it joined`));
    this.joined = undefined;
    if (!this.draining) this.heartbeats.cancel();
    this.drained = this.poller.stop(this.options.shutdownTimeoutMs);
    await this.drained;
    this.draining = false;
    this.heartbeats.cancel();
    await this.heartbeats.settled();
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
    this.stopListening = undefined;
    this.lifecycle = 'stopped';
  }

  /**
   * Stops at once, as if the process died: no draining, no acknowledgements, no leave; the blocking
   * connection is cut, the timers stop, and the handlers in flight are told (`message.signal`, reason
   * `stopped`). The coordinator expires the member after its session timeout. For tests and
   * emergency shutdown. The member can be started again (it rejoins as the same instance).
   */
  abort(): void {
    this.lifecycle = 'stopped';
    this.generation += 1;
    this.heartbeats.cancel();
    this.cutover.stop();
    this.joined?.reject(new Error(`member ${this.memberId} aborted`));
    this.joined = undefined;
    this.poller.dropAll('stopped');
    const stopping = this.poller.stop(0);
    this.reader.disconnect();
    const listening = this.stopListening?.();
    this.stopListening = undefined;
    this.shutdown = Promise.all([stopping, listening]).then(() => undefined, () => undefined);
  }

  // ---- heartbeats -----------------------------------------------------------------------------------

  private request(memberEpoch = this.memberEpoch): HeartbeatRequest {
    return {
      instanceId: this.instanceId,
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

  /** Heartbeats run while the member runs, and while stop() drains (the lease must outlive the handlers). */
  private heartbeating(): boolean {
    return this.lifecycle === 'running' || (this.lifecycle === 'stopping' && this.draining);
  }

  private requestHeartbeat(): void {
    this.heartbeats.now();
  }

  private schedule(intervalMs: number): void {
    this.heartbeats.after(intervalMs);
  }

  private async heartbeat(): Promise<void> {
    const request = this.request();
    const sentAt = performance.now();
    let response: HeartbeatResponse;
    try {
      response = await this.withTimeout(this.coordinator.heartbeat(request), this.callTimeoutMs());
    } catch (error) {
      this.emit('error', new Error(`member ${this.memberId}: heartbeat failed: ${(error as Error).message}`));
      this.checkLease();
      this.schedule(Math.min(1000, Math.floor(this.options.sessionTimeoutMs / 5)));
      return;
    }
    if (!this.heartbeating()) return;
    if (response.errorCode === ErrorCode.FENCED_INSTANCE_ID) {
      this.halt(toCoordinatorError(response.errorCode, `member ${this.memberId} (instance ${this.instanceId}) stopped for good: ${response.errorMessage}`));
      return;
    }
    if (response.errorCode === ErrorCode.UNKNOWN_MEMBER_ID || response.errorCode === ErrorCode.FENCED_MEMBER_EPOCH) {
      this.lease.renewed(sentAt);
      this.invalidInARow = 0;
      this.emit('fenced', { errorCode: response.errorCode, message: response.errorMessage, shards: this.ownedShards(), memberEpoch: this.memberEpoch });
      this.dropEverything();
      // A stopping member does not rejoin: it has nothing left to keep alive, and leaves.
      if (this.lifecycle === 'stopping') this.draining = false;
      this.requestHeartbeat();
      return;
    }
    if (response.errorCode === ErrorCode.GROUP_NOT_FOUND) {
      await this.groupMissing(response.errorMessage);
      return;
    }
    if (response.errorCode !== ErrorCode.NONE) {
      this.refused(response.errorCode, response.errorMessage);
      return;
    }
    this.lease.renewed(sentAt);
    this.hasJoined = true;
    this.invalidInARow = 0;
    this.missingInARow = 0;
    this.memberProblems.delete('group');
    this.memberProblems.delete('request');
    this.shardClient.setIncarnation(response.incarnation);
    for (const shard of request.ackedRevocations ?? []) this.revoked.delete(shard);
    // Gains wait until the metadata is synced: a shard gained during an ordered shrink needs its hold
    // first. Revocations never wait.
    let synced = response.metadataVersion === this.metadataVersion;
    if (!synced && this.lifecycle === 'running') synced = await this.syncMetadata(response.metadataVersion);
    if (!this.heartbeating()) return;
    this.apply(response, synced && this.lifecycle === 'running');
    this.joined?.resolve();
    this.joined = undefined;
    this.schedule(synced ? response.heartbeatIntervalMs : Math.min(response.heartbeatIntervalMs, 1000));
  }

  /**
   * Creates the stream's metadata with `shardCount` shards unless it exists (with any count: it may
   * have been resized after this configuration was written). True when this call created it.
   * Bounded like a coordinator call.
   */
  private ensureStream(shardCount: number): Promise<boolean> {
    const admin = new CoordinatorAdmin(this.redis, { keyPrefix: this.coordinator.options.keyPrefix });
    const created = admin.createStream({ streamPrefix: this.options.streamPrefix, shardCount }).then(
      (stream) => stream.created,
      (error: unknown) => {
        if (!(error instanceof ShardCountConflictError)) throw error;
        return false;
      },
    );
    return this.withTimeout(created, this.callTimeoutMs());
  }

  /** How long one coordinator call may take before the member treats it as failed. */
  private callTimeoutMs(): number {
    return Math.max(100, Math.floor(this.options.sessionTimeoutMs / 3));
  }

  /**
   * INVALID_REQUEST and other refusals that are not about ownership. The lease is checked as after a
   * failed call (nothing was renewed). A second INVALID_REQUEST in a row means the member's own view
   * no longer fits the group (e.g. it reports shards a shrink deleted while it was paused): it drops
   * everything and rejoins with an empty, valid report.
   */
  private refused(errorCode: Exclude<ErrorCode, 'NONE'>, message: string): void {
    const error = toCoordinatorError(errorCode, `member ${this.memberId}: ${message}`);
    this.emit('error', error);
    this.checkLease();
    const retryMs = Math.min(5000, Math.floor(this.options.sessionTimeoutMs / 3));
    if (errorCode !== ErrorCode.INVALID_REQUEST) {
      this.schedule(retryMs);
      return;
    }
    this.invalidInARow += 1;
    this.memberProblems.set('request', `the coordinator refuses this member's heartbeats: ${message}`);
    const holdsSomething = this.owned.size > 0 || this.revoking.size > 0 || this.revoked.size > 0 || this.memberEpoch !== JOIN_EPOCH;
    if (this.invalidInARow >= 2 && holdsSomething) {
      this.emit('fenced', { errorCode, message, shards: this.ownedShards(), memberEpoch: this.memberEpoch });
      this.dropEverything();
      if (this.lifecycle === 'stopping') this.draining = false;
      this.requestHeartbeat();
      return;
    }
    this.schedule(retryMs);
  }

  /**
   * The stream has no metadata: Redis lost its keys (restart without persistence, FLUSHALL) or an
   * operator deleted it. Whatever this member held is gone with the group. A member configured with
   * `shardCount` recreates the stream and rejoins; one without backs off, reports one error, and
   * lists the problem in stats() until the stream exists again.
   */
  private async groupMissing(message: string): Promise<void> {
    this.missingInARow += 1;
    if (this.owned.size > 0 || this.revoking.size > 0 || this.memberEpoch !== JOIN_EPOCH) {
      this.emit('fenced', { errorCode: ErrorCode.GROUP_NOT_FOUND, message, shards: this.ownedShards(), memberEpoch: this.memberEpoch });
    }
    this.dropEverything();
    // The group is gone with the stream: nothing to leave, nothing joined until the next success.
    this.hasJoined = false;
    // Versions restart with the recreated stream: sync whatever the next answer says.
    this.metadataVersion = 0;
    if (this.lifecycle === 'stopping') this.draining = false;
    const backoffMs = Math.min(30_000, 250 * 2 ** Math.min(7, this.missingInARow - 1));
    const shardCount = this.options.shardCount;
    if (shardCount !== undefined && this.lifecycle === 'running') {
      try {
        const created = await this.ensureStream(shardCount);
        if (created) {
          this.emit('error', new Error(`member ${this.memberId}: stream "${this.options.streamPrefix}" had no metadata (Redis lost its keys?); recreated it with ${shardCount} shards and rejoins`));
        }
        // Rejoin at once the first time; should the stream still be missing after that, back off.
        if (this.missingInARow === 1) this.requestHeartbeat();
        else this.schedule(backoffMs);
        return;
      } catch (error) {
        this.emit('error', new Error(`member ${this.memberId}: stream "${this.options.streamPrefix}" has no metadata and recreating it failed: ${(error as Error).message}`));
        this.schedule(backoffMs);
        return;
      }
    }
    const problem = `stream "${this.options.streamPrefix}" has no metadata (${message}); retrying with backoff`;
    if (!this.memberProblems.has('group')) this.emit('error', toCoordinatorError(ErrorCode.GROUP_NOT_FOUND, `member ${this.memberId}: ${problem}`));
    this.memberProblems.set('group', problem);
    this.schedule(backoffMs);
  }

  /**
   * Another live instance holds this memberId: stop for good, at once. No more heartbeats, reads or
   * acknowledgements (its shards belong to the other instance), no leave (that would end the other
   * instance's membership); start() rejects with the error now and on every later call.
   */
  private halt(error: CoordinatorError): void {
    this.fatal = error;
    this.memberProblems.set('instance', error.message);
    const joined = this.joined;
    this.joined = undefined;
    joined?.reject(error);
    this.dropEverything();
    this.hasJoined = false;
    this.draining = false;
    this.lifecycle = 'stopped';
    this.heartbeats.cancel();
    this.cutover.stop();
    this.shutdown = this.poller.stop(0);
    this.reader.disconnect();
    void this.stopListening?.();
    this.stopListening = undefined;
    this.emit('error', error);
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
   * it holds, and check on it until it completes (docs/resharding.md). The read is bounded (a third
   * of the session timeout), so it cannot hold up the heartbeat loop. On failure the version stays
   * old, the next heartbeat tries again, and false tells the caller to take no new shards meanwhile.
   */
  private async syncMetadata(metadataVersion: number): Promise<boolean> {
    try {
      await this.cutover.sync();
    } catch (error) {
      const problem = `reading the group's cutover failed: ${(error as Error).message}; no new shards until it succeeds`;
      this.memberProblems.set('metadata', problem);
      this.emit('error', new Error(`member ${this.memberId}: ${problem}`));
      return false;
    }
    this.memberProblems.delete('metadata');
    this.metadataVersion = metadataVersion;
    return true;
  }

  // ---- reconciliation ------------------------------------------------------------------------------

  /** `takeNewShards` false: apply revocations and losses only (metadata not synced, or stopping). */
  private apply(response: HeartbeatResponse, takeNewShards: boolean): void {
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
        void this.poller.releaseShard(shard, 0, 'shard-lost');
      }
    }
    if (revokedNow.length > 0) void this.revoke(revokedNow, response.memberEpoch);

    const gained: number[] = [];
    // Not taken now, still granted: the next heartbeat's answer offers them again.
    if (!takeNewShards) assigned.clear();
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
    // While stopping, the poller already released every shard, so it cannot wait for the shard's
    // handler: wait for the drain instead, bounded as a revocation is.
    if (this.drained) await Promise.race([this.drained, sleep(this.options.revocationTimeoutMs)]);
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

  private leaseIsSafe(): boolean {
    return this.lease.isSafe(this.owned.size > 0);
  }

  /** No heartbeat got through for the lease budget: stop before the shards can be given away. */
  private checkLease(): void {
    if (this.owned.size === 0 && this.revoking.size === 0) return;
    if (!this.lease.isSpent()) return;
    this.emit('lease-lost', { shards: this.ownedShards(), memberEpoch: this.memberEpoch, sinceLastHeartbeatMs: Math.round(this.lease.sinceRenewedMs()) });
    this.dropEverything();
  }
}
