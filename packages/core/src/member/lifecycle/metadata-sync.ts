import type { EventEmitter } from 'node:events';
import { CoordinatorAdmin } from '../../admin/coordinator-admin';
import { ShardCountConflictError } from '../../protocol/errors';
import type { CoordinatorClient } from '../../redis/coordinator-client';
import type { RedisClient } from '../../redis/scripts';
import { withTimeout } from '../abortable-sleep';
import { CutoverWatch } from './cutover-watch';
import type { MemberEvents } from '../member-events';
import type { MemberProblems } from '../member-problems';
import { commandCallTimeoutMs, type ResolvedMemberOptions } from '../member-options';
import type { ShardPoller } from '../shard-poller';

/**
 * The stream's metadata as a member sees it (SPEC 7, docs/resharding.md): it creates it when the
 * member is configured with `shardCount` and it is missing, and it follows its version: a heartbeat
 * answer with a newer `metadataVersion` means a resize happened, and the member reads the group's
 * cutover (what an ordered resize holds back, from where) before it takes new shards or starts any
 * handler. Until that read succeeds the member is "behind".
 */
export class MetadataSync {
  private synced = 0;
  /**
   * True while an answer carried a newer metadataVersion whose cutover could not be read: an ordered
   * shrink may hold shards this member already reads, from a point it does not know yet, so no
   * handler starts anywhere until the read succeeds.
   */
  private behind = false;
  /** The group's cutover after a resize, as of `version`. */
  private readonly cutover: CutoverWatch;

  constructor(
    private readonly redis: RedisClient,
    private readonly coordinator: CoordinatorClient,
    private readonly options: ResolvedMemberOptions,
    poller: ShardPoller,
    private readonly events: EventEmitter<MemberEvents>,
    private readonly problems: MemberProblems,
    /** How long the cutover read may take (it gates ownership: a third of the session). */
    callTimeoutMs: number,
    /** The member completed a cutover: the group's metadata changed, heartbeat now. */
    onCompleted: () => void,
  ) {
    this.cutover = new CutoverWatch(redis, coordinator, {
      streamPrefix: options.streamPrefix,
      consumerGroup: options.consumerGroup,
      cutoverCheckIntervalMs: options.cutoverCheckIntervalMs,
      readTimeoutMs: callTimeoutMs,
      checkTimeoutMs: commandCallTimeoutMs(options),
      setHolds: (holds) => poller.setHolds(holds),
      setResizeHistory: (history, shardCount, metadataVersion) => poller.setResizeHistory(history, shardCount, metadataVersion),
      onCheckFailed: (error) =>
        events.emit('error', new Error(`member ${options.memberId}: checking the group's cutover failed: ${error.message}`)),
      onCompleted,
    });
  }

  /** The metadata version whose cutover this member has read (0 before the first). */
  get version(): number {
    return this.synced;
  }

  /** Whether a newer version is known whose cutover is not read yet: no handler may start. */
  get isBehind(): boolean {
    return this.behind;
  }

  /**
   * The stream's metadata changed (or this member just joined): read the group's cutover, hold what
   * it holds, and check on it until it completes (docs/resharding.md). `incarnation`: the group's
   * life the answer came from (a read that finds another, or no group, fails: see CutoverWatch.sync).
   * The read is bounded (a third of the session timeout), so it cannot hold up the heartbeat loop.
   * On failure the version stays old, the next heartbeat tries again, and false tells the caller to
   * take no new shards meanwhile.
   */
  async sync(metadataVersion: number, incarnation: string): Promise<boolean> {
    // Behind from the moment a newer version is known until its cutover is read.
    this.behind = true;
    try {
      await this.cutover.sync(incarnation, metadataVersion);
    } catch (error) {
      const problem = `reading the group's cutover failed: ${(error as Error).message}; no new shards and no handler starts until it succeeds`;
      this.problems.set('metadata', problem);
      this.events.emit('error', new Error(`member ${this.options.memberId}: ${problem}`));
      return false;
    }
    this.problems.delete('metadata');
    this.behind = false;
    this.synced = metadataVersion;
    return true;
  }

  /**
   * Creates the stream's metadata with `shardCount` shards unless it exists (with any count: it may
   * have been resized after this configuration was written). True when this call created it.
   * Bounded like a coordinator call.
   */
  ensureStream(shardCount: number): Promise<boolean> {
    const admin = new CoordinatorAdmin(this.redis, { keyPrefix: this.coordinator.options.keyPrefix });
    const created = admin.createStream({ streamPrefix: this.options.streamPrefix, shardCount }).then(
      (stream) => stream.created,
      (error: unknown) => {
        if (!(error instanceof ShardCountConflictError)) throw error;
        return false;
      },
    );
    // Creating the stream renews and decides nothing: bounded like the calls beside the heartbeats
    // (commandCallTimeoutMs), not as tight as a third of a short session, which a loaded machine's
    // first round trips can pass (start() then failed with the stream created).
    return withTimeout(created, commandCallTimeoutMs(this.options));
  }

  /** The stream is gone: versions restart with the recreated stream, so sync whatever the next answer says. */
  forgetVersion(): void {
    this.synced = 0;
  }

  /** The member stops: no more cutover checks. */
  stop(): void {
    this.cutover.stop();
  }

  /** For a member started again after stop(): the next answer's version is read afresh. */
  restart(): void {
    this.synced = 0;
    this.cutover.restart();
  }
}
