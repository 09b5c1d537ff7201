// The member's facade and its lifecycle (start, stop, abort, restart, halt). The work is done by
// its parts, one job each: the heartbeat loop (member-heartbeat.ts, refusals in
// heartbeat-refusals.ts), the reconciler (member-reconciler.ts: ownership, revocations, lease
// checks), the metadata sync (metadata-sync.ts: the stream's metadata, cutovers after a resize)
// and the poller (shard-poller.ts).
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { checkOption } from '../protocol/option-ranges';
import type { CoordinatorError } from '../protocol/errors';
import { leavesAReplicaByItself, resetConnection } from '../redis/connection/connection-reset';
import { CoordinatorClient } from '../redis/coordinator-client';
import type { RedisClient } from '../redis/scripts';
import { ShardClient } from '../redis/shard-client';
import { WakeHub } from '../redis/read-hubs/wake-hub';
import type { MemberEvents } from './member-events';
import { MemberHeartbeat } from './lifecycle/member-heartbeat';
import { MemberLease, staticTakeoverAfterMs } from './lifecycle/member-lease';
import {
  type BatchMemberOptions,
  type CoordinatedMemberOptions,
  ackCallTimeoutMs,
  coordinatorCallTimeoutMs,
  type ResolvedMemberOptions,
  resolveMemberOptions,
} from './member-options';
import type { MemberProblems } from './member-problems';
import { MemberReconciler } from './lifecycle/member-reconciler';
import type { MemberStats } from './member-stats';
import { MetadataSync } from './lifecycle/metadata-sync';
import { reconnect } from './read/reader-connection';
import { duplicateClient, isCluster } from '../redis/connection/slot-pipelines';
import { ClusterReadHub } from '../redis/read-hubs/cluster-read-hub';
import { ReadHub } from '../redis/read-hubs/read-hub';
import type { ShardError } from './consumption-errors';
import { ShardPoller } from './shard-poller';

export type { MemberEvents, ShardsEvent } from './member-events';

type Lifecycle = 'new' | 'starting' | 'running' | 'stopping' | 'stopped';

/** How `stop()` ends a member's membership. */
export interface StopOptions {
  /**
   * A static member (`memberInstanceId`) leaves the group for good instead of departing, so that its
   * shards move to the other members at once rather than wait for its next instance (scaling down).
   * No effect on other members, which always leave.
   */
  leaveGroup?: boolean;
}

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
  /**
   * With `ackWaitForReplicas`: the connection acknowledgements are sent on. Their WAIT holds its
   * connection for up to `timeoutMs` when replicas are missing: on the command connection, the
   * heartbeats queued behind it until the lease ran out.
   */
  private readonly ackConnection: Redis | undefined;
  private readonly poller: ShardPoller;
  private lifecycle: Lifecycle = 'new';
  private readonly lease: MemberLease;
  private readonly reconciler: MemberReconciler;
  private readonly metadata: MetadataSync;
  private readonly heartbeats: MemberHeartbeat;
  /** Bumped by every start() and stop(): a start() that finds it changed after an await was overtaken. */
  private generation = 0;
  /** The stop() or abort() under way or last done: a start() waits for it to end. */
  private shutdown: Promise<void> | undefined;
  private stopListening: (() => Promise<void>) | undefined;
  /**
   * This process's identity under `memberId` (SPEC 9.4): a join from another instance while this
   * one's lease is live is refused with FENCED_INSTANCE_ID, and so is this one's after another took over.
   */
  readonly instanceId = randomUUID();
  /** Set for good when this instance was refused its memberId (FencedInstanceIdError). */
  private fatal: CoordinatorError | undefined;
  /** True from stop() until the drain ended: heartbeats go on so the lease outlives every handler. */
  private draining = false;
  /** Resolves when stop()'s drain ended (handlers finished or shutdownTimeoutMs passed). */
  private drained: Promise<void> | undefined;
  /** stop({ leaveGroup: true }) asked: a static member leaves for good instead of departing. */
  private leaveForGood = false;
  /** Conditions of this member (not of a shard) that keep it from working, by kind. */
  private readonly memberProblems: MemberProblems = new Map();

  /** A member whose handler gets batches (`batch`): one shard's entries in order. */
  constructor(redis: RedisClient, options: BatchMemberOptions<T>);
  constructor(redis: RedisClient, options: CoordinatedMemberOptions<T>);
  constructor(
    private readonly redis: RedisClient,
    options: CoordinatedMemberOptions<T> | BatchMemberOptions<T>,
  ) {
    super();
    this.options = resolveMemberOptions(options);
    const resolved = this.options as ResolvedMemberOptions;
    this.coordinator = new CoordinatorClient(redis, this.options.coordinator);
    // Reads go through the process's ReadHub (shared by every member made from this client), which
    // needs one node. On a Cluster, reads are polled per shard through the process's ClusterReadHub
    // (one read connection per node for every member made from this client, same options).
    const transport = isCluster(redis) ? { polled: ClusterReadHub.for(redis), command: redis } : { hub: ReadHub.for(redis) };
    this.ackConnection = this.options.ackWaitForReplicas ? (duplicateClient(redis) as Redis) : undefined;
    this.ackConnection?.on('error', () => undefined); // a failed ack is reported (and retried) by the ack batcher
    const textCodecs = new Set([...this.options.codecs.values()].filter((codec) => !codec.binary).map((codec) => codec.name));
    if (!this.options.codec.binary) textCodecs.add(''); // entries that name no codec are the member's own
    const shardClient = new ShardClient(
      redis,
      this.coordinator.keys,
      this.options.streamPrefix,
      this.options.consumerGroup,
      this.options.memberId,
      {
        ackWait: this.options.ackWaitForReplicas,
        ackClient: this.ackConnection,
        textCodecs,
      },
    );
    const ackConnection = this.ackConnection;
    this.poller = new ShardPoller(shardClient, transport, resolved, () => this.mayStartHandlers(), {
      callTimeoutMs: ackCallTimeoutMs(this.options),
      reset: ackConnection && (() => resetConnection(ackConnection, 'acknowledgement')),
    });
    // A static member can be taken over by a new instance long before its session times out.
    const takeoverAfterMs =
      this.options.memberInstanceId === undefined
        ? undefined
        : staticTakeoverAfterMs(this.coordinator.options.heartbeatIntervalMs, this.options.sessionTimeoutMs);
    this.lease = new MemberLease(this.options.sessionTimeoutMs, takeoverAfterMs);
    const requestHeartbeat = () => this.heartbeats.now();
    this.reconciler = new MemberReconciler(this.poller, this, this.lease, this.options, requestHeartbeat, () => this.drained);
    this.metadata = new MetadataSync(
      redis,
      this.coordinator,
      resolved,
      this.poller,
      this,
      this.memberProblems,
      coordinatorCallTimeoutMs(this.options),
      requestHeartbeat,
    );
    const parts = {
      coordinator: this.coordinator,
      shardClient,
      reconciler: this.reconciler,
      metadata: this.metadata,
      lease: this.lease,
      problems: this.memberProblems,
      resetConnection: () => resetConnection(redis, 'command'),
      leavesAReplicaByItself: leavesAReplicaByItself(redis),
    };
    this.heartbeats = new MemberHeartbeat(resolved, this.instanceId, this, parts, {
      heartbeating: () => this.heartbeating(),
      wakeUpsHeard: () => this.wakeUpsHeard(),
      running: () => this.lifecycle === 'running',
      endDrain: () => {
        if (this.lifecycle === 'stopping') this.draining = false;
      },
      halt: (error) => this.halt(error),
    });
    this.poller.on('error', (error: ShardError) => this.emit('error', error));
    this.poller.on('dead-letter', (event) => this.emit('dead-letter', event));
    this.poller.on('deferred', (event) => this.emit('deferred', event));
    this.poller.on('released', (event) => this.emit('released', event));
    this.poller.on('parked', (event) => this.emit('parked', event));
    this.poller.on('acknowledged', (event) => this.emit('acknowledged', event));
    this.poller.on('ack-refused', (event) => this.emit('ack-refused', event));
    this.poller.on('claim-refused', requestHeartbeat); // the grant may be stale: ask now
    this.poller.on('shard-lost', requestHeartbeat); // a fenced call was refused: is the shard still ours?
  }

  get memberId(): string {
    return this.options.memberId;
  }

  /** The shards this member reads now. */
  ownedShards(): number[] {
    return this.reconciler.ownedShards();
  }

  currentMemberEpoch(): number {
    return this.reconciler.memberEpoch;
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
    checkOption('member.runtimeMaxConcurrency', runtimeMaxConcurrency);
    if (this.options.runtimeMaxConcurrency === runtimeMaxConcurrency) return;
    // The poller reads the same options object: the dispatcher sees the new capacity at once.
    this.options.runtimeMaxConcurrency = runtimeMaxConcurrency;
    this.poller.capacityChanged();
    this.heartbeats.now();
  }

  /** What the member is doing now: for health checks, dashboards and tests. */
  stats(): MemberStats {
    return {
      joined: this.heartbeats.hasJoined && this.lifecycle === 'running' && this.reconciler.leaseIsSafe(),
      running: this.isRunning(),
      paused: this.isPaused(),
      runtimeMaxConcurrency: this.options.runtimeMaxConcurrency,
      memberEpoch: this.reconciler.memberEpoch,
      ownedShards: this.ownedShards(),
      revokingShards: this.reconciler.revokingShards(),
      activeHandlers: this.poller.activeHandlers,
      bufferedEntries: this.poller.bufferedEntries,
      clientBuffer: this.poller.clientBuffer,
      heldEntries: this.poller.heldEntries,
      metadataVersion: this.metadata.version,
      problems: [...this.memberProblems.values(), ...this.wakeProblems(), ...this.poller.problems()],
      deadLetterHookFailures: this.poller.deadLetterHookFailures,
      refusedAcks: this.poller.refusedAcks,
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
        await this.metadata.ensureStream(this.options.shardCount);
      } catch (error) {
        if (this.generation === generation) this.lifecycle = 'stopped';
        throw error;
      }
    }
    if (this.generation !== generation || this.lifecycle !== 'starting')
      throw new Error(`member ${this.memberId} was stopped while starting`);
    this.lifecycle = 'running';
    const joined = this.heartbeats.waitForJoin();
    // Wake-ups are hints (a lost one costs a heartbeat interval): the hub subscribes by itself, and
    // until it hears the channel the heartbeat loop polls at a short interval instead (wakeUpsHeard).
    this.stopListening = WakeHub.for(this.redis).listen(
      this.wakeChannel(),
      this.memberId,
      () => this.heartbeats.now(),
      (message) => {
        this.emit('error', new Error(`member ${this.memberId}: ${message}; heartbeats come at a short interval meanwhile`));
        // The next heartbeat may be a whole interval away: from this one on they come at the short one.
        this.heartbeats.now();
      },
    );
    this.poller.start();
    this.heartbeats.now();
    await joined;
  }

  /**
   * A stopped member about to start again: forget everything of its last membership (it rejoins
   * with epoch 0 and no shards); on a Cluster, reconnect its read connections, which stop() closed.
   * The instance id and a pause stay.
   */
  private async prepareRestart(): Promise<void> {
    this.reconciler.forget();
    this.metadata.restart();
    this.heartbeats.restart();
    this.draining = false;
    this.drained = undefined;
    this.memberProblems.clear();
    this.lease.reset();
    if (this.ackConnection) await reconnect(this.ackConnection);
  }

  /**
   * Stops reading, finishes in-flight handlers (bounded by shutdownTimeoutMs; past it their
   * `message.signal` fires), acknowledges, and leaves the group. Until it has left, the member keeps
   * heartbeating: its lease outlives every handler it still runs, so no other member is given those
   * shards meanwhile. While stopping it applies revocations (after the drain, bounded by
   * revocationTimeoutMs) and takes no new shards. Calling it again while it runs returns the same
   * promise. The member can be started again afterwards.
   *
   * A static member (`memberInstanceId`) departs instead of leaving: the coordinator keeps its
   * membership and shards, unread, for its next instance until its session times out. Pass
   * `{ leaveGroup: true }` when no instance will come back (scaling down): it leaves for good and
   * its shards move at once. Other members always leave.
   *
   * ```ts
   * await member.stop();                      // a restart: a static member's next instance takes its shards back
   * await member.stop({ leaveGroup: true });  // for good: its shards move to the other members now
   * ```
   */
  stop(options: StopOptions = {}): Promise<void> {
    if (options.leaveGroup === true) this.leaveForGood = true;
    if (this.lifecycle === 'stopping') return this.shutdown ?? Promise.resolve();
    if (this.lifecycle === 'stopped') return Promise.resolve();
    this.generation += 1;
    this.shutdown = this.stopNow();
    return this.shutdown;
  }

  private async stopNow(): Promise<void> {
    const wasRunning = this.lifecycle === 'running';
    this.lifecycle = 'stopping';
    this.draining = wasRunning && this.heartbeats.hasJoined;
    this.metadata.stop();
    this.heartbeats.joinFailed(new Error(`member ${this.memberId} stopped before it joined`));
    if (!this.draining) this.heartbeats.cancel();
    this.drained = this.poller.stop(this.options.shutdownTimeoutMs);
    await this.drained;
    this.draining = false;
    this.heartbeats.cancel();
    await this.heartbeats.settled();
    if (wasRunning && this.heartbeats.mayHaveJoined) {
      try {
        // Bounded like every coordinator call: a leave that cannot get through must not hold up
        // stop() (the coordinator expires the member after its session timeout instead).
        await this.heartbeats.leave(this.leaveForGood);
      } catch (error) {
        this.emit('error', new Error(`member ${this.memberId} could not leave the group: ${(error as Error).message}`));
      }
    }
    this.leaveForGood = false;
    this.reconciler.left();
    this.ackConnection?.disconnect(); // the drain sent the last acknowledgements
    await this.stopListening?.();
    this.stopListening = undefined;
    this.lifecycle = 'stopped';
  }

  /**
   * Stops at once, as if the process died: no draining, no acknowledgements, no leave; a blocking
   * read is cut short, the timers stop, and the handlers in flight are told (`message.signal`, reason
   * `stopped`). The coordinator expires the member after its session timeout. For tests and
   * emergency shutdown. The member can be started again (it rejoins as the same instance).
   */
  abort(): void {
    this.lifecycle = 'stopped';
    this.generation += 1;
    this.heartbeats.cancel();
    this.metadata.stop();
    this.heartbeats.joinFailed(new Error(`member ${this.memberId} aborted`));
    this.poller.dropAll('stopped');
    const stopping = this.poller.stop(0).finally(() => this.ackConnection?.disconnect());
    const listening = this.stopListening?.();
    this.stopListening = undefined;
    this.shutdown = Promise.all([stopping, listening]).then(
      () => undefined,
      () => undefined,
    );
  }

  /** Heartbeats run while the member runs, and while stop() drains (the lease must outlive the handlers). */
  private heartbeating(): boolean {
    return this.lifecycle === 'running' || (this.lifecycle === 'stopping' && this.draining);
  }

  /**
   * Another live instance holds this memberId: stop for good, at once. No more heartbeats, reads or
   * acknowledgements (its shards belong to the other instance), no leave (that would end the other
   * instance's membership); start() rejects with the error now and on every later call.
   */
  private halt(error: CoordinatorError): void {
    this.fatal = error;
    this.memberProblems.set('instance', error.message);
    this.heartbeats.joinFailed(error);
    this.reconciler.dropEverything();
    this.heartbeats.forgetJoin();
    this.draining = false;
    this.lifecycle = 'stopped';
    this.heartbeats.cancel();
    this.metadata.stop();
    this.shutdown = this.poller.stop(0).finally(() => this.ackConnection?.disconnect());
    void this.stopListening?.();
    this.stopListening = undefined;
    this.emit('error', error);
  }

  private wakeChannel(): string {
    return this.coordinator.keys.groupWakeChannel(this.options.streamPrefix, this.options.consumerGroup);
  }

  /** Whether wake-ups reach this member now: it listens and the hub's subscription is confirmed. */
  private wakeUpsHeard(): boolean {
    return this.stopListening !== undefined && WakeHub.for(this.redis).hears(this.wakeChannel());
  }

  /** The wake-up subscriber's trouble while this member listens on it (a stuck connection, SPEC 10.1). */
  private wakeProblems(): string[] {
    const problem = this.stopListening ? WakeHub.for(this.redis).problem() : undefined;
    return problem === undefined ? [] : [problem];
  }

  /** Whether a handler may start now: the lease is safe and the member's view of the cutover is current. */
  private mayStartHandlers(): boolean {
    return this.reconciler.leaseIsSafe() && !this.metadata.isBehind;
  }
}
