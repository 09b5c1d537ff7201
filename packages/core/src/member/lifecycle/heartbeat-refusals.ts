import type { EventEmitter } from 'node:events';
import { ErrorCode } from '../../protocol/error-codes';
import { type CoordinatorError, StreamNotFoundError, toCoordinatorError } from '../../protocol/errors';
import { JOIN_EPOCH } from '../../protocol/heartbeat';
import type { MemberEvents } from '../member-events';
import type { MemberLease } from './member-lease';
import type { MemberProblems } from '../member-problems';
import type { MemberReconciler } from './member-reconciler';
import type { ResolvedMemberOptions } from '../member-options';

/** What a member's owner can do about a missing stream (StreamNotFoundError's remedy). */
const CREATE_OR_GIVE_SHARD_COUNT = 'create it with CoordinatorAdmin.createStream, or give the member shardCount to create it when it joins';

/** What a refusal may make the rest of the member do. */
export interface RefusalActions {
  /** Another live instance holds this memberId: stop for good, at once. */
  halt(error: CoordinatorError): void;
  /** A stopping member that lost its membership does not rejoin: it has nothing left to keep alive, and leaves. */
  endDrain(): void;
  /** Whether the member runs (neither starting nor stopping): only then does it recreate a lost stream. */
  running(): boolean;
  /** The group is gone with the stream: nothing to leave, nothing joined until the next success, versions restart. */
  groupGone(): void;
  /** Creates the stream's metadata unless it exists; true when this call created it. */
  ensureStream(shardCount: number): Promise<boolean>;
  requestHeartbeat(): void;
  schedule(intervalMs: number): void;
}

/**
 * What each heartbeat error code does to a member (SPEC 3 error codes, 9.4 instance ids): a fenced
 * or unknown member drops everything and rejoins with epoch 0; a refusal that is not about ownership
 * is reported and retried (twice INVALID_REQUEST in a row: the member's own view is bad, so it drops
 * it); a missing group is recreated or waited for with backoff; a duplicate instance halts for good.
 */
export class HeartbeatRefusals {
  /** Heartbeats in a row answered INVALID_REQUEST; two mean the member's view itself is bad. */
  private invalidInARow = 0;
  /** GROUP_NOT_FOUND answers in a row (the stream has no metadata): sets the backoff. */
  private missingInARow = 0;
  /** Whether a heartbeat was accepted since the member (re)started: then FENCED_INSTANCE_ID means it was taken over. */
  private acceptedSinceStart = false;
  /** When a static member's join was first refused because its previous instance still heartbeats (performance.now()). */
  private staticWaitSince: number | undefined;

  constructor(
    private readonly options: ResolvedMemberOptions,
    private readonly instanceId: string,
    private readonly events: EventEmitter<MemberEvents>,
    private readonly reconciler: MemberReconciler,
    private readonly lease: MemberLease,
    private readonly problems: MemberProblems,
    private readonly actions: RefusalActions,
  ) {}

  /** A heartbeat was accepted: the refusals in a row end, and so do the problems they reported. */
  accepted(): void {
    this.acceptedSinceStart = true;
    this.staticWaitSince = undefined;
    this.problems.delete('instance');
    this.invalidInARow = 0;
    this.missingInARow = 0;
    this.problems.delete('group');
    this.problems.delete('request');
  }

  /** For a member started again: no refusals in a row yet. */
  reset(): void {
    this.acceptedSinceStart = false;
    this.staticWaitSince = undefined;
    this.invalidInARow = 0;
    this.missingInARow = 0;
  }

  /** The coordinator refused the heartbeat sent at `sentAt` (performance.now()) with `errorCode`. */
  async handle(errorCode: Exclude<ErrorCode, 'NONE'>, message: string, sentAt: number): Promise<void> {
    if (errorCode === ErrorCode.FENCED_INSTANCE_ID) {
      if (this.waitForStaticTakeover(message)) return;
      this.actions.halt(
        toCoordinatorError(errorCode, `member ${this.options.memberId} (instance ${this.instanceId}) stopped for good: ${message}`),
      );
      return;
    }
    if (errorCode === ErrorCode.UNKNOWN_MEMBER_ID || errorCode === ErrorCode.FENCED_MEMBER_EPOCH) {
      this.lease.renewed(sentAt);
      this.invalidInARow = 0;
      this.fenced(errorCode, message);
      return;
    }
    if (errorCode === ErrorCode.GROUP_NOT_FOUND) {
      await this.groupMissing(message);
      return;
    }
    this.refused(errorCode, message);
  }

  /**
   * A static member's new instance whose join was refused because the previous instance still
   * heartbeats: that one may be a process being replaced (it stops heartbeating within moments) or
   * one that crashed a moment ago. It retries for `sessionTimeoutMs` (by then a crashed instance is
   * silent for certain) and only then halts, as for a duplicate process. An instance that was
   * accepted before and is now refused was taken over: it halts at once.
   */
  private waitForStaticTakeover(message: string): boolean {
    if (this.options.memberInstanceId === undefined || this.acceptedSinceStart) return false;
    const now = performance.now();
    this.staticWaitSince ??= now;
    if (now - this.staticWaitSince >= this.options.sessionTimeoutMs) return false;
    this.problems.set('instance', `waiting to take over static member ${this.options.memberId}: ${message}`);
    this.actions.schedule(Math.max(50, Math.min(1000, Math.floor(this.options.sessionTimeoutMs / 10))));
    return true;
  }

  /** The coordinator no longer agrees with this member's ownership: say so, drop it, rejoin at once. */
  private fenced(errorCode: ErrorCode, message: string): void {
    this.events.emit('fenced', { errorCode, message, shards: this.reconciler.ownedShards(), memberEpoch: this.reconciler.memberEpoch });
    this.reconciler.dropEverything();
    this.actions.endDrain();
    this.actions.requestHeartbeat();
  }

  /**
   * INVALID_REQUEST and other refusals that are not about ownership. The lease is checked as after a
   * failed call (nothing was renewed). A second INVALID_REQUEST in a row means the member's own view
   * no longer fits the group (e.g. it reports shards a shrink deleted while it was paused): it drops
   * everything and rejoins with an empty, valid report.
   */
  private refused(errorCode: Exclude<ErrorCode, 'NONE'>, message: string): void {
    const error = toCoordinatorError(errorCode, `member ${this.options.memberId}: ${message}`);
    this.events.emit('error', error);
    this.reconciler.checkLease();
    const retryMs = Math.min(5000, Math.floor(this.options.sessionTimeoutMs / 3));
    if (errorCode !== ErrorCode.INVALID_REQUEST) {
      this.actions.schedule(retryMs);
      return;
    }
    this.invalidInARow += 1;
    this.problems.set('request', `the coordinator refuses this member's heartbeats: ${message}`);
    if (this.invalidInARow >= 2 && this.reconciler.holdsAnything()) {
      this.fenced(errorCode, message);
      return;
    }
    this.actions.schedule(retryMs);
  }

  /**
   * The stream has no metadata: Redis lost its keys (restart without persistence, FLUSHALL) or an
   * operator deleted it. Whatever this member held is gone with the group. A member configured with
   * `shardCount` recreates the stream and rejoins; one without backs off, reports one error, and
   * lists the problem in stats() until the stream exists again.
   */
  private async groupMissing(message: string): Promise<void> {
    const { memberId, streamPrefix } = this.options;
    this.missingInARow += 1;
    if (this.reconciler.holdsShards() || this.reconciler.memberEpoch !== JOIN_EPOCH) {
      this.events.emit('fenced', {
        errorCode: ErrorCode.GROUP_NOT_FOUND,
        message,
        shards: this.reconciler.ownedShards(),
        memberEpoch: this.reconciler.memberEpoch,
      });
    }
    this.reconciler.dropEverything();
    this.actions.groupGone();
    this.actions.endDrain();
    const backoffMs = Math.min(30_000, 250 * 2 ** Math.min(7, this.missingInARow - 1));
    const shardCount = this.options.shardCount;
    if (shardCount !== undefined && this.actions.running()) {
      try {
        const created = await this.actions.ensureStream(shardCount);
        if (created) {
          this.events.emit(
            'error',
            new Error(
              `member ${memberId}: stream "${streamPrefix}" had no metadata (Redis lost its keys?); recreated it with ${shardCount} shards and rejoins`,
            ),
          );
        }
        // Rejoin at once the first time; should the stream still be missing after that, back off.
        if (this.missingInARow === 1) this.actions.requestHeartbeat();
        else this.actions.schedule(backoffMs);
        return;
      } catch (error) {
        this.events.emit(
          'error',
          new Error(`member ${memberId}: stream "${streamPrefix}" has no metadata and recreating it failed: ${(error as Error).message}`),
        );
        this.actions.schedule(backoffMs);
        return;
      }
    }
    const problem = `${new StreamNotFoundError(streamPrefix, undefined, CREATE_OR_GIVE_SHARD_COUNT).message}; retrying with backoff`;
    if (!this.problems.has('group'))
      this.events.emit(
        'error',
        new StreamNotFoundError(streamPrefix, `member ${memberId}, retrying with backoff`, CREATE_OR_GIVE_SHARD_COUNT),
      );
    this.problems.set('group', problem);
    this.actions.schedule(backoffMs);
  }
}
