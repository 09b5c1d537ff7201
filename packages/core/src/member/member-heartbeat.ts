import type { EventEmitter } from 'node:events';
import { ErrorCode } from '../protocol/error-codes';
import { type HeartbeatRequest, type HeartbeatResponse, LEAVE_EPOCH } from '../protocol/heartbeat';
import type { CoordinatorClient } from '../redis/coordinator-client';
import type { ShardClient } from '../redis/shard-client';
import { withTimeout } from './abortable-sleep';
import { HeartbeatRefusals, type RefusalActions } from './heartbeat-refusals';
import { HeartbeatSchedule } from './heartbeat-schedule';
import type { MemberEvents } from './member-events';
import type { MemberLease } from './member-lease';
import type { MemberProblems } from './member-problems';
import type { MemberReconciler } from './member-reconciler';
import { coordinatorCallTimeoutMs, type ResolvedMemberOptions } from './member-options';
import type { MetadataSync } from './metadata-sync';

/** What the heartbeat loop needs from the member's lifecycle. */
export interface HeartbeatHost extends Pick<RefusalActions, 'halt' | 'endDrain' | 'running'> {
  /** Heartbeats run while the member runs, and while stop() drains (the lease must outlive the handlers). */
  heartbeating(): boolean;
}

/** The parts of the member a heartbeat reports and changes. */
export interface HeartbeatParts {
  coordinator: CoordinatorClient;
  shardClient: ShardClient;
  reconciler: MemberReconciler;
  metadata: MetadataSync;
  lease: MemberLease;
  problems: MemberProblems;
}

/**
 * A member's heartbeat loop (SPEC 3): one heartbeat at a time at the interval the coordinator asks
 * for (sooner when something changed), each reporting the member's ownership; an accepted answer
 * renews the lease, syncs the metadata and is reconciled, a refusal goes to `HeartbeatRefusals`, and
 * a failed or late call (bounded by a third of the session timeout) is retried soon while the lease
 * is checked. Also tracks whether the member joined, for start() and for the leave in stop().
 */
export class MemberHeartbeat {
  private readonly schedule: HeartbeatSchedule;
  private readonly refusals: HeartbeatRefusals;
  private readonly callTimeoutMs: number;
  /** Whether the coordinator knows this member (it must leave on stop, whatever its epoch). */
  private joinedGroup = false;
  /**
   * Whether a heartbeat was sent since the last answer that said the group is gone: the coordinator
   * may know this member even though no answer arrived (stop() during the join), so stop() leaves.
   */
  private sentSinceGroupGone = false;
  private joinWaiter: { resolve: () => void; reject: (error: Error) => void } | undefined;

  constructor(
    private readonly options: ResolvedMemberOptions,
    private readonly instanceId: string,
    private readonly events: EventEmitter<MemberEvents>,
    private readonly parts: HeartbeatParts,
    private readonly host: HeartbeatHost,
  ) {
    this.callTimeoutMs = coordinatorCallTimeoutMs(options);
    this.schedule = new HeartbeatSchedule(
      () => this.beat(),
      () => host.heartbeating(),
    );
    this.refusals = new HeartbeatRefusals(options, instanceId, events, parts.reconciler, parts.lease, parts.problems, {
      halt: (error) => host.halt(error),
      endDrain: () => host.endDrain(),
      running: () => host.running(),
      ensureStream: (shardCount) => parts.metadata.ensureStream(shardCount),
      groupGone: () => {
        this.joinedGroup = false;
        this.sentSinceGroupGone = false;
        parts.metadata.forgetVersion();
      },
      requestHeartbeat: () => this.now(),
      schedule: (intervalMs) => this.after(intervalMs),
    });
  }

  /** Whether the coordinator knows this member: an answer accepted it since it last joined. */
  get hasJoined(): boolean {
    return this.joinedGroup;
  }

  /** Whether the coordinator may know this member: it must leave on stop even without an answer. */
  get mayHaveJoined(): boolean {
    return this.joinedGroup || this.sentSinceGroupGone;
  }

  /** An out-of-cycle heartbeat as soon as possible (at once, or right after the one in flight). */
  now(): void {
    this.schedule.now();
  }

  /** The next heartbeat in about `intervalMs`. */
  after(intervalMs: number): void {
    this.schedule.after(intervalMs);
  }

  /** No heartbeat timer runs after this (one in flight finishes; see `settled`). */
  cancel(): void {
    this.schedule.cancel();
  }

  /** Resolves when no heartbeat is in flight. */
  settled(): Promise<void> {
    return this.schedule.settled();
  }

  /** Resolves at the first accepted answer, rejects when `joinFailed` comes first. */
  waitForJoin(): Promise<void> {
    const joined = new Promise<void>((resolve, reject) => (this.joinWaiter = { resolve, reject }));
    // stop() may reject it before start() awaits it; start() still sees the rejection.
    joined.catch(() => undefined);
    return joined;
  }

  /** The member stopped (or halted) before it joined: the waiting start() rejects with `error`. */
  joinFailed(error: Error): void {
    const waiter = this.joinWaiter;
    this.joinWaiter = undefined;
    waiter?.reject(error);
  }

  /** The coordinator must not be taken to know this member any more (halted, or started again). */
  forgetJoin(): void {
    this.joinedGroup = false;
  }

  /** For a member started again: not joined, no refusals in a row. */
  restart(): void {
    this.joinedGroup = false;
    this.refusals.reset();
  }

  /**
   * Leaves the group, bounded like every coordinator call (rejects when it fails or is late). A
   * static member departs (keeps its membership for its next instance) unless `forGood`: then it
   * leaves as a plain member does, and its shards move at once.
   */
  async leave(forGood = false): Promise<void> {
    await withTimeout(this.parts.coordinator.heartbeat(this.request(LEAVE_EPOCH, forGood)), this.callTimeoutMs);
  }

  private request(memberEpoch = this.parts.reconciler.memberEpoch, leaveForGood = false): HeartbeatRequest {
    const { reconciler, metadata } = this.parts;
    return {
      instanceId: this.instanceId,
      staticMember: this.options.memberInstanceId !== undefined && !leaveForGood,
      streamPrefix: this.options.streamPrefix,
      consumerGroup: this.options.consumerGroup,
      memberId: this.options.memberId,
      memberEpoch,
      memberName: this.options.memberName,
      runtimeMaxConcurrency: this.options.runtimeMaxConcurrency,
      // Workers this member can keep busy: one per owned shard, up to its capacity. Stable between
      // rebalances, so a steady member's heartbeat stays on the coordinator's cheap path.
      activeConsumerWorkers: Math.min(this.options.runtimeMaxConcurrency, reconciler.ownedCount),
      weight: this.options.weight,
      sessionTimeoutMs: this.options.sessionTimeoutMs,
      rebalanceTimeoutMs: this.options.rebalanceTimeoutMs,
      metadataVersion: metadata.version,
      ...reconciler.report(),
    };
  }

  private async beat(): Promise<void> {
    const { reconciler, metadata } = this.parts;
    const request = this.request();
    const sentAt = performance.now();
    this.sentSinceGroupGone = true;
    let response: HeartbeatResponse;
    try {
      response = await withTimeout(this.parts.coordinator.heartbeat(request), this.callTimeoutMs);
    } catch (error) {
      this.events.emit('error', new Error(`member ${this.options.memberId}: heartbeat failed: ${(error as Error).message}`));
      reconciler.checkLease();
      this.after(Math.min(1000, Math.floor(this.options.sessionTimeoutMs / 5)));
      return;
    }
    if (!this.host.heartbeating()) return;
    if (response.errorCode !== ErrorCode.NONE) {
      await this.refusals.handle(response.errorCode, response.errorMessage, sentAt);
      return;
    }
    reconciler.leaseRenewed(sentAt);
    this.joinedGroup = true;
    this.refusals.accepted();
    this.parts.shardClient.setIncarnation(response.incarnation);
    reconciler.revocationsAcknowledged(request.ackedRevocations ?? []);
    // Gains wait until the metadata is synced: a shard gained during an ordered shrink needs its hold
    // first. Revocations never wait.
    let synced = response.metadataVersion === metadata.version;
    if (!synced && this.host.running()) synced = await metadata.sync(response.metadataVersion);
    if (!this.host.heartbeating()) return;
    reconciler.apply(response, synced && this.host.running());
    this.joinWaiter?.resolve();
    this.joinWaiter = undefined;
    this.after(synced ? response.heartbeatIntervalMs : Math.min(response.heartbeatIntervalMs, 1000));
  }
}
