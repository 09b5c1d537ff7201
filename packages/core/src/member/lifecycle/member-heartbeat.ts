import type { EventEmitter } from 'node:events';
import { ErrorCode } from '../../protocol/error-codes';
import { toCoordinatorError } from '../../protocol/errors';
import { type HeartbeatRequest, type HeartbeatResponse, LEAVE_EPOCH } from '../../protocol/heartbeat';
import type { CoordinatorClient } from '../../redis/coordinator-client';
import { isReadonlyError } from '../../redis/connection/readonly-reconnect';
import type { ShardClient } from '../../redis/shard-client';
import { NoAnswerError, withTimeout } from '../abortable-sleep';
import { HeartbeatRefusals, type RefusalActions } from './heartbeat-refusals';
import { HeartbeatSchedule } from './heartbeat-schedule';
import type { MemberEvents } from '../member-events';
import type { MemberLease } from './member-lease';
import type { MemberProblems } from '../member-problems';
import type { MemberReconciler } from './member-reconciler';
import { coordinatorCallTimeoutMs, type ResolvedMemberOptions } from '../member-options';
import type { MetadataSync } from './metadata-sync';
import { RedisClockBound } from './redis-clock';

/** Heartbeats in a row that got no answer at all before the command connection is reset (`resetStuckConnection`). */
export const NO_ANSWERS_BEFORE_RESET = 2;

/**
 * The longest pause between heartbeats while wake-ups do not reach the member (its wake-up
 * subscriber is not subscribed yet, or stuck): a member told to revoke, or waiting for a released
 * shard, learns it from its next heartbeat instead, so a rebalance takes at most about this long
 * per step rather than a whole heartbeat interval. Steady heartbeats cost Redis ~20 µs each
 * (docs/benchmarks.md, scenario 5), so polling at this pace while the subscriber is down is cheap.
 */
export const WAKELESS_HEARTBEAT_INTERVAL_MS = 500;

/** What the heartbeat loop needs from the member's lifecycle. */
export interface HeartbeatHost extends Pick<RefusalActions, 'halt' | 'endDrain' | 'running'> {
  /** Heartbeats run while the member runs, and while stop() drains (the lease must outlive the handlers). */
  heartbeating(): boolean;
  /** Whether wake-ups reach the member now; when not, it heartbeats at least every WAKELESS_HEARTBEAT_INTERVAL_MS. */
  wakeUpsHeard(): boolean;
}

/** The parts of the member a heartbeat reports and changes. */
export interface HeartbeatParts {
  coordinator: CoordinatorClient;
  shardClient: ShardClient;
  reconciler: MemberReconciler;
  metadata: MetadataSync;
  lease: MemberLease;
  problems: MemberProblems;
  /**
   * Resets the command connection (the one heartbeats and acknowledgements use) and says what it
   * did; called only with `resetStuckConnection`.
   */
  resetConnection: () => string;
  /** Whether the command connection's client reconnects by itself when Redis answers READONLY. */
  leavesAReplicaByItself: boolean;
}

/**
 * A member's heartbeat loop (SPEC 3): one heartbeat at a time at the interval the coordinator asks
 * for (sooner when something changed), each reporting the member's ownership; an accepted answer
 * renews the lease, syncs the metadata and is reconciled, a refusal goes to `HeartbeatRefusals`, and
 * a failed or late call (bounded by a third of the session timeout) is retried soon while the lease
 * is checked; a target the answer asks it to compute is committed in a call of its own, bounded the
 * same way (`commitTarget`). Also tracks whether the member joined, for start() and for the leave in stop().
 *
 * Every heartbeat carries a deadline in Redis time (SPEC 9.1: a lease is renewed only by a heartbeat
 * whose answer the member acts on): the moment the member stops waiting for the answer, or gives its
 * lease up if that comes first. A heartbeat that reaches Redis later (it sat in ioredis' offline
 * queue through a reconnect, or on a slow link) changes nothing there. Every heartbeat also says when
 * the latest answer received in time ran (`answeredAt`), and when the latest accepted one did
 * (`acceptedAt`, the renewal it can prove), so Redis stops renewing a member whose accepted answers
 * come back late, however its refusals come (SPEC 10.2); a late answer still bounds the clock and, accepted, counts as
 * the renewal it was (never for ownership). With `resetStuckConnection`,
 * heartbeats that got no answer at all twice in a row reset the command connection (half-open).
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
  /** Bounds Redis's clock from the answers, to put deadlines in it. */
  private readonly redisClock = new RedisClockBound();
  /** Heartbeats in a row that got no answer within the call timeout. */
  private noAnswersInARow = 0;
  /**
   * Redis time of the latest answer received within the call timeout, 0 before any: sent with every
   * heartbeat (`answeredAt`), so that Redis stops renewing the lease of a member whose answers all
   * come back late (SPEC 10.2, redis/lua/includes/answers.lua). Kept across restarts: it is about the link.
   */
  private answeredAt = 0;
  /**
   * Redis time of the latest accepted answer received within the call timeout, 0 before any: sent
   * with every heartbeat (`acceptedAt`). Only this proves to Redis that a renewal reached the member:
   * a refusal can come back in time while every answer that renews comes late, and must not let the
   * next heartbeat renew again (SPEC 10.2). Kept across restarts like `answeredAt`.
   */
  private acceptedAt = 0;
  /** NO_TIMELY_ANSWER answers received in time, in a row: the first is sent again at once. */
  private untimelyInARow = 0;

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

  /** Resolves at the first accepted answer of a proven join, rejects when `joinFailed` comes first. */
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
    const request = this.request(LEAVE_EPOCH, forGood);
    const sentAt = performance.now();
    // A leave that got here after stop() gave up on it must not end a membership begun since (start()).
    request.deadline = this.redisClock.redisTimeAt(sentAt + this.callTimeoutMs);
    const call = this.parts.coordinator.heartbeat(request);
    call.then(
      (late) => this.observeClock(late),
      () => undefined,
    );
    const response = await withTimeout(call, this.callTimeoutMs);
    if (response.errorCode === ErrorCode.DEADLINE_EXCEEDED) throw toCoordinatorError(response.errorCode, response.errorMessage);
  }

  /**
   * The Redis time by which a heartbeat sent at `sentAt` must have run to count: when the member stops
   * waiting for its answer, or, while it holds shards, when it gives its lease up if that is sooner
   * (from then on no handler starts, and a renewal would keep its shards from the others unread).
   * Undefined before the first answer (no bound of Redis's clock yet): a join holds nothing.
   */
  private deadline(sentAt: number): number | undefined {
    let until = sentAt + this.callTimeoutMs;
    const giveUpAt = this.parts.reconciler.holdsShards() ? this.parts.lease.giveUpAt() : undefined;
    if (giveUpAt !== undefined) until = Math.min(until, giveUpAt);
    return this.redisClock.redisTimeAt(until);
  }

  /** Every answer, late ones included, bounds Redis's clock (SPEC 10.2: what a late answer proves is kept). */
  private observeClock(response: HeartbeatResponse): void {
    if (response.serverTimeMs !== undefined) this.redisClock.observe(response.serverTimeMs, performance.now());
  }

  /**
   * The heartbeat sent at `sentAt` got no answer in time; when its answer comes anyway, what it proves
   * is kept (SPEC 10.2), its ownership is not (the member stopped waiting and may have moved on):
   * the Redis clock it carries, and, if Redis accepted it, the renewal of the lease, which began no
   * earlier than `sentAt`. Redis renews at most once after the member's answers began to come late
   * (redis/lua/includes/answers.lua), so counting that renewal keeps the two in step: the member
   * gives its lease up just before Redis expires it.
   */
  private keepWhatALateAnswerProves(call: Promise<HeartbeatResponse>, memberEpoch: number, sentAt: number): void {
    call.then(
      (response) => {
        this.observeClock(response);
        if (response.errorCode === ErrorCode.NONE && memberEpoch > 0 && this.host.heartbeating()) {
          this.parts.reconciler.leaseRenewed(sentAt);
        }
      },
      () => undefined,
    );
  }

  /**
   * Redis refused the heartbeat (NO_TIMELY_ANSWER): no accepted answer since its last renewal came in
   * time, or, holding no lease there, no answer lately. This answer came in time: it proves the
   * link to a join (`answeredAt`; a member's first join is answered so, it has no answer yet), not
   * a renewal, so the next request goes at once and a member whose renewals come back late is
   * refused again. Twice in a row is a failed heartbeat (its lease runs out, or its answers come in
   * time only now and then), retried after the usual pause; the refusal that retry gets starts a
   * new pair. It must: the proof holds for a third of the session from when Redis answered, and a
   * refusal that took most of that to come back is stale after the pause, so a member that only
   * ever sent after a pause would be refused for good although its answers come in time.
   */
  private untimely(error: Error): void {
    this.untimelyInARow += 1;
    if (this.untimelyInARow > 1) {
      this.untimelyInARow = 0;
      this.failed(error);
      return;
    }
    this.parts.reconciler.checkLease();
    this.now();
  }

  /**
   * A heartbeat that renewed nothing: no answer in time, an error, or too late for its deadline. The
   * lease is checked, and the next one goes soon. Heartbeats that got no answer at all, twice in a
   * row, mean a connection that is stuck (half-open: the socket stays, nothing gets through); with
   * `resetStuckConnection` it is reset, and ioredis sends what waited on it again on the new one
   * (acknowledgements are decided there, accepted or refused by their fencing token; a heartbeat
   * resent past its deadline changes nothing).
   */
  private failed(error: Error): void {
    this.events.emit('error', new Error(`member ${this.options.memberId}: heartbeat failed: ${error.message}`));
    this.parts.reconciler.checkLease();
    this.connectionOnReplica(error);
    this.noAnswersInARow = error instanceof NoAnswerError ? this.noAnswersInARow + 1 : 0;
    if (this.noAnswersInARow >= NO_ANSWERS_BEFORE_RESET) {
      // Cleared by the next accepted heartbeat. Redis stops renewing the lease of a member whose
      // answers do not come back in time, so a member in this state is soon no member at all.
      this.parts.problems.set(
        'connection',
        `${this.noAnswersInARow} heartbeats in a row got no answer within ${this.callTimeoutMs} ms: the member keeps its shards only until its lease runs out, and joins again once answers come in time`,
      );
    }
    if (this.options.resetStuckConnection && this.noAnswersInARow >= NO_ANSWERS_BEFORE_RESET) {
      this.noAnswersInARow = 0;
      const what = this.parts.resetConnection();
      this.events.emit(
        'error',
        new Error(
          `member ${this.options.memberId}: ${NO_ANSWERS_BEFORE_RESET} heartbeats in a row got no answer within ${this.callTimeoutMs} ms; ${what}`,
        ),
      );
    }
    this.after(Math.min(1000, Math.floor(this.options.sessionTimeoutMs / 5)));
  }

  /**
   * A heartbeat refused READONLY went to a server that is a replica now: the command connection
   * stayed on a demoted master (Redis 7 does not close it; Sentinel's reconfiguration kills clients,
   * an operator's REPLICAOF or a managed failover may not). Nothing was written, and every
   * heartbeat and acknowledgement on it will be refused until it reconnects, which ioredis does
   * only with a `reconnectOnError` that says so: listed in `stats().problems` (and so in the NestJS
   * health check) until a heartbeat is accepted, naming the option to set. A client without one is
   * reset with `resetStuckConnection` (it reconnects and asks the Sentinels for the master again);
   * what ioredis then sends again went to the replica too, which applied none of its writes.
   */
  private connectionOnReplica(error: Error): void {
    if (!isReadonlyError(error)) return;
    if (this.options.resetStuckConnection && !this.parts.leavesAReplicaByItself) {
      const what = this.parts.resetConnection();
      this.events.emit(
        'error',
        new Error(`member ${this.options.memberId}: a heartbeat was refused READONLY (the command connection is on a replica); ${what}`),
      );
    }
    this.parts.problems.set(
      'connection',
      `the command connection is on a read-only replica (${error.message.split('\n')[0]}): heartbeats and acknowledgements are refused until it reconnects; ` +
        "give the client reconnectOnError: reconnectOnReadonly (from '@redis-stream-coordinator/core') so that it reconnects to the master",
    );
  }

  /**
   * The answer asks this member to compute the target: it commits it in a call of its own, bounded
   * as a heartbeat is (SPEC 10.1). One bound for both would count a heartbeat answered in time as
   * failed whenever the round trip takes more than half of it, although the renewal reached the
   * member in time (SPEC 10.2): it would give up shards Redis just granted it, unread until it
   * expired, at every target it computed. A commit that fails or is late leaves the heartbeat's own
   * answer to act on (an `error` says why); the next heartbeat, soon while the group is ASSIGNING,
   * learns what the commit did. A commit refused (its answer says the member is no longer known) is
   * returned as it is: `beat` acts on it as on a refused heartbeat.
   */
  private async commitTarget(request: HeartbeatRequest, answer: HeartbeatResponse): Promise<HeartbeatResponse> {
    const commit = this.parts.coordinator.completeAssignment(request, answer);
    commit.then(
      (late) => this.observeClock(late),
      () => undefined,
    );
    try {
      return await withTimeout(commit, this.callTimeoutMs);
    } catch (error) {
      this.events.emit('error', new Error(`member ${this.options.memberId}: committing the target failed: ${(error as Error).message}`));
      return { ...answer, computeAssignment: false, assignmentInput: undefined };
    }
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
      answeredAt: this.answeredAt,
      acceptedAt: this.acceptedAt,
      ...reconciler.report(),
    };
  }

  private async beat(): Promise<void> {
    const { reconciler, metadata } = this.parts;
    const request = this.request();
    const sentAt = performance.now();
    request.deadline = this.deadline(sentAt);
    this.sentSinceGroupGone = true;
    let response: HeartbeatResponse;
    const call = this.parts.coordinator.heartbeatOnce(request);
    try {
      response = await withTimeout(call, this.callTimeoutMs);
    } catch (error) {
      if (error instanceof NoAnswerError) this.keepWhatALateAnswerProves(call, request.memberEpoch, sentAt);
      this.failed(error as Error);
      return;
    }
    this.observeClock(response);
    if (response.serverTimeMs !== undefined) {
      this.answeredAt = response.serverTimeMs;
      if (response.errorCode === ErrorCode.NONE) this.acceptedAt = response.serverTimeMs;
    }
    this.noAnswersInARow = 0;
    if (!this.host.heartbeating()) return;
    if (response.errorCode === ErrorCode.NO_TIMELY_ANSWER) {
      this.untimely(toCoordinatorError(response.errorCode, response.errorMessage));
      return;
    }
    this.untimelyInARow = 0;
    if (response.errorCode === ErrorCode.DEADLINE_EXCEEDED) {
      this.failed(toCoordinatorError(response.errorCode, response.errorMessage));
      return;
    }
    if (response.errorCode !== ErrorCode.NONE) {
      await this.refusals.handle(response.errorCode, response.errorMessage, sentAt);
      return;
    }
    if (response.computeAssignment) response = await this.commitTarget(request, response);
    if (!this.host.heartbeating()) return;
    if (response.errorCode !== ErrorCode.NONE) {
      // The commit was refused (UNKNOWN_MEMBER_ID: the lease ran out between the two calls, or the
      // group's keys were lost): newer than the heartbeat's answer, so it is this heartbeat's refusal.
      // Taken as an answer, its placeholder epoch (-1) made every later heartbeat a leave.
      await this.refusals.handle(response.errorCode, response.errorMessage, sentAt);
      return;
    }
    reconciler.leaseRenewed(sentAt);
    this.joinedGroup = true;
    this.refusals.accepted();
    this.parts.problems.delete('connection');
    this.parts.shardClient.setIncarnation(response.incarnation);
    reconciler.revocationsAcknowledged(request.ackedRevocations ?? []);
    // Gains wait until the metadata is synced: a shard gained during an ordered shrink needs its hold
    // first. Revocations never wait.
    let synced = response.metadataVersion === metadata.version;
    if (!synced && this.host.running()) synced = await metadata.sync(response.metadataVersion, response.incarnation);
    if (!this.host.heartbeating()) return;
    reconciler.apply(response, synced && this.host.running());
    // An unproven join (SPEC 10.2) is not yet a member the assignment counts: start() waits for the
    // answer that proves it, to the next heartbeat, which the coordinator asks for at once (interval 1 ms).
    if (!response.unproven) {
      this.joinWaiter?.resolve();
      this.joinWaiter = undefined;
    }
    let interval = synced ? response.heartbeatIntervalMs : Math.min(response.heartbeatIntervalMs, 1000);
    if (!this.host.wakeUpsHeard()) interval = Math.min(interval, WAKELESS_HEARTBEAT_INTERVAL_MS);
    this.after(interval);
  }
}
