import { MAX_SHARD_COUNT } from '../protocol/shard-count';
import { ErrorCode, errorCodeFromWire } from '../protocol/error-codes';
import { GroupNotFoundError, StreamNotFoundError, toCoordinatorError } from '../protocol/errors';
import { checkOption } from '../protocol/option-ranges';
import type { GroupDescription, StreamMetadata } from '../protocol/records';
import { CoordinatorClient } from '../redis/coordinator-client';
import { type CoordinatorOptions, type ResolvedCoordinatorOptions, resolveCoordinatorOptions } from '../redis/coordinator-options';
import { KeyBuilder } from '../redis/keys';
import { createStreamMetadata, ensureRoutingMarkers, routingOfMetadata } from '../redis/stream-metadata';
import { pairs, parseShardCsv } from '../redis/responses';
import { type RedisClient, runScript } from '../redis/scripts';
import { type Cutover, type CutoverProgress, cutoverProgress, readGroupCutover } from './cutover';
import { type DeadLetterPurge, purgeMany } from './dead-letter-purge';
import { type DeadLetterReplay, replayMany, replayOne, type ReplayContext, type ReplayDeadLettersOptions } from './dead-letter-replay';
import {
  DEFAULT_DEAD_LETTER_COUNT,
  type DeadLetter,
  type DeadLetterFilter,
  parseDeadLetterRef,
  readDeadLetter,
  readDeadLetters,
  type ReadDeadLettersOptions,
} from './dead-letters';
import { type GroupEvent, readGroupEvents, type ReadGroupEventsOptions } from './group-events';
import {
  applyOffsets,
  assertNoLiveMembers,
  assertOffsetTarget,
  readFenceTokens,
  type ResetOffsetsOptions,
  type ResetOffsetsResult,
  targetId,
} from './offsets';
import { readShardPositions, type ShardPosition } from './shard-positions';
import { listStreamPrefixes } from './stream-inventory';
import { trimShards, type TrimOptions, type TrimResult } from './retention';
import { type PeriodicTrimOptions, resolvePeriodicTrimOptions, TrimSchedule } from './periodic-trim';
import { groupReadableShards, toGroupDescription } from './group-description';
import { shardStats } from './shard-stats';
import {
  DEFAULT_SCHEDULE_PAGE,
  dropScheduled,
  readSchedule,
  type ReadScheduleOptions,
  releaseScheduled,
  releaseWholeSchedule,
  type ScheduleDrop,
  type SchedulePage,
  type ScheduleRelease,
  type ScheduleTarget,
} from './schedules';
import { deleteRetiredShards, pendingRetirement } from './shard-retirement';

export { MAX_SHARD_COUNT };

export interface CreateStreamOptions {
  streamPrefix: string;
  shardCount: number;
}

export interface ResizeShardsOptions {
  /**
   * Keep per-key order across the resize (default true): new shards become readable, and surviving
   * shards of a shrink read past the resize, only after the shards the keys came from are processed.
   */
  ordered?: boolean;
  /**
   * How long after the switch producers may still write with the old shard count: at least their
   * `metadataRefreshMs` plus the longest write in flight. Default 2000 ms.
   */
  graceMs?: number;
  /**
   * Ordered shrink only: producers switch this long after the call at least, and never before the
   * latest lease of any member of the prefix's groups (as of the call) has run out, so that every
   * member still handling entries has heard (through a heartbeat answer) that the surviving shards
   * are held from then on. Default 1000 ms.
   */
  switchDelayMs?: number;
}

export interface ResizeResult extends StreamMetadata {
  previousShardCount: number;
  /** False when the stream already had `newCount` shards (nothing changed). */
  changed: boolean;
}

export interface GroupCutoverStatus extends Partial<CutoverProgress> {
  consumerGroup: string;
  /** The group's pending cutover, or null when it reads every shard of the current count. */
  cutover: Cutover | null;
  /** True when this call completed the cutover. */
  completed?: boolean;
}

const MAX_SCRIPT_RETRIES = 20;

/**
 * Administration of streams and groups.
 *
 * @example
 * const admin = new CoordinatorAdmin(redis);
 * await admin.createStream({ streamPrefix: 'summary', shardCount: 8 }); // idempotent
 * const { group, members } = await admin.describeGroup('summary', 'summary-group');
 */
export class CoordinatorAdmin {
  readonly keys: KeyBuilder;
  private readonly options: ResolvedCoordinatorOptions;
  private readonly coordinator: CoordinatorClient;

  /** `options` are the coordinator's (resizes append to the groups' event logs with its settings). */
  constructor(
    private readonly redis: RedisClient,
    options: CoordinatorOptions = {},
  ) {
    this.options = resolveCoordinatorOptions(options);
    this.keys = new KeyBuilder(this.options.keyPrefix);
    this.coordinator = new CoordinatorClient(redis, this.options);
  }

  /**
   * Creates the shard metadata of a stream prefix. Calling it again with the same shard count is a
   * no-op; another count is a `ShardCountConflictError` (use `resizeShards`).
   */
  async createStream(options: CreateStreamOptions): Promise<StreamMetadata & { created: boolean }> {
    const shardCount = checkOption('shardCount', options.shardCount);
    const { created, metadata } = await createStreamMetadata(this.redis, this.keys, options.streamPrefix, shardCount);
    return { ...toStreamMetadata(options.streamPrefix, metadata), created };
  }

  /**
   * Changes the stream's shard count while producers and members run (SPEC section 6,
   * docs/resharding.md): one atomic step that sets the new count, writable set and
   * metadataVersion + 1, and gives every consumer group of the prefix a new groupEpoch, an event, and
   * (unless the change needs no waiting) a cutover. Resizing to the current count changes nothing.
   * Refused with `ResizeInProgressError` while a group still cuts over from the previous resize;
   * cutovers that are ready are completed first.
   */
  async resizeShards(streamPrefix: string, newCount: number, options: ResizeShardsOptions = {}): Promise<ResizeResult> {
    const count = checkOption('shardCount', newCount, { label: 'newCount' });
    const ordered = options.ordered ?? true;
    if (typeof ordered !== 'boolean') throw new TypeError(`ordered must be a boolean, got ${String(ordered)}`);
    const graceMs = checkOption('admin.resizeShards.graceMs', options.graceMs ?? 2000);
    const switchDelayMs = checkOption('admin.resizeShards.switchDelayMs', options.switchDelayMs ?? 1000);
    await this.completeCutovers(streamPrefix);
    // A deleteDrainedShards that did not finish: its shards are deleted before any resize, so that
    // a resize back never grows into a shard whose delete is still to come (SPEC 10.5).
    const retirement = pendingRetirement(await this.redis.hgetall(this.keys.streamMeta(streamPrefix)));
    if (retirement) await deleteRetiredShards(this.redis, this.keys, streamPrefix, retirement);
    const reply = await this.withGroups(streamPrefix, (groups) => ({
      script: 'resizeShards',
      keys: groups.flatMap((group) => {
        const { groupMeta, events, leases } = this.keys.groupKey(streamPrefix, group);
        return [groupMeta, events, leases];
      }),
      args: [
        count,
        ordered ? 1 : 0,
        graceMs,
        switchDelayMs,
        this.options.eventLogMaxLen,
        groups.length,
        ...groups,
        ...groups.map((group) => this.keys.groupWakeChannel(streamPrefix, group)),
      ],
    }));
    const raw = new Map(pairs(reply[3]));
    const metadata = toStreamMetadata(streamPrefix, [...raw]);
    const changed = Number(reply[2]) === 1;
    // Also when nothing changed: calling it again repairs markers a failed write left missing.
    if (raw.has('switchAt')) await this.writeRoutingMarkers(streamPrefix, raw);
    return { ...metadata, previousShardCount: metadata.previousShardCount ?? metadata.shardCount, changed };
  }

  /**
   * After a resize: every shard, old and new, gets the routing marker that refuses writes routed with
   * an outdated count (SPEC 9.5). The resize itself cannot write them (the markers live in the
   * shards' slots); a cutover check re-ensures them before it trusts a drain, so a failure here
   * delays nothing that matters for order, but it is reported rather than hidden.
   */
  private async writeRoutingMarkers(streamPrefix: string, raw: Map<string, string>): Promise<void> {
    const { routing, shards } = routingOfMetadata(raw);
    const count = routing.count;
    let lastError: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        return await ensureRoutingMarkers(this.redis, this.keys, streamPrefix, routing, shards);
      } catch (error) {
        lastError = error;
      }
    }
    throw new Error(
      `stream "${streamPrefix}": resized to ${count} shards (metadataVersion ${routing.version}), but the shards' routing markers ` +
        `could not be written (${(lastError as Error).message}); the cutover checks of the groups live now write them (not those of a group created later): call resizeShards(${count}) again to write them`,
    );
  }

  /** Each group's pending cutover and, for those with one, what it still waits for. Read-only. */
  async cutoverStatus(streamPrefix: string): Promise<GroupCutoverStatus[]> {
    const groups = (await this.redis.smembers(this.keys.streamGroups(streamPrefix))).sort();
    return Promise.all(
      groups.map(async (consumerGroup): Promise<GroupCutoverStatus> => {
        const { cutover } = await readGroupCutover(this.redis, this.keys, streamPrefix, consumerGroup);
        if (!cutover) return { consumerGroup, cutover };
        return { consumerGroup, cutover, ...(await cutoverProgress(this.redis, this.keys, streamPrefix, consumerGroup, cutover)) };
      }),
    );
  }

  /**
   * Completes every group's cutover that is ready. Members do this themselves while they run; this
   * is for groups with no member running (or to finish sooner).
   */
  async completeCutovers(streamPrefix: string): Promise<GroupCutoverStatus[]> {
    const statuses = await this.cutoverStatus(streamPrefix);
    for (const status of statuses) {
      if (status.cutover && status.ready) {
        status.completed = await this.coordinator.completeCutover(streamPrefix, status.consumerGroup, status.cutover.version);
      }
    }
    return statuses;
  }

  /**
   * Deletes the shard streams (and their fencing tokens) that a shrink removed, once every group has
   * drained them and no member holds them. Never automatic; refused with `ResizeInProgressError`
   * while a group still needs one. Returns the retired shards whose keys this call found deleted.
   *
   * Several steps (SPEC 10.5, docs/resharding.md#deleting-drained-shards): the shards are retired in
   * the coordinator's slot, then each one's keys are deleted in its own slot by a script that checks
   * again that it is still retired and drained. A call that failed at any step, called again,
   * finishes; a resize in between finishes the deletion before it resizes.
   */
  async deleteDrainedShards(streamPrefix: string): Promise<number[]> {
    const statuses = await this.completeCutovers(streamPrefix);
    // A group still cutting over is refused by name by retireShards; otherwise look at the streams.
    if (statuses.every((status) => !status.cutover || status.completed)) await this.assertRemovedShardsProcessed(streamPrefix);
    const reply = await this.withGroups(streamPrefix, (current) => ({
      script: 'retireShards',
      keys: current.flatMap((group) => {
        const { groupMeta, owners } = this.keys.groupKey(streamPrefix, group);
        return [groupMeta, owners];
      }),
      args: [current.length, ...current],
    }));
    return deleteRetiredShards(this.redis, this.keys, streamPrefix, {
      from: Number(reply[2]),
      end: Number(reply[3]),
      version: String(reply[4]),
    });
  }

  /**
   * Looks at the removed shards' streams themselves before they are deleted: first makes sure their
   * routing markers refuse every write (so nothing lands after the look), then refuses, naming the
   * shard, the group and the count, if any group has not processed every entry of one.
   */
  private async assertRemovedShardsProcessed(streamPrefix: string): Promise<void> {
    const raw = new Map(Object.entries(await this.redis.hgetall(this.keys.streamMeta(streamPrefix))));
    if (!raw.has('shardCount')) return; // retireShards reports the missing stream
    const count = Number(raw.get('shardCount'));
    const span = Math.max(count, Number(raw.get('shardSpan') ?? count));
    if (span === count) return;
    const removed = Array.from({ length: span - count }, (_, i) => count + i);
    await ensureRoutingMarkers(
      this.redis,
      this.keys,
      streamPrefix,
      {
        version: Number(raw.get('metadataVersion')),
        count,
        previous: Number(raw.get('previousShardCount') ?? count),
        switchAt: Number(raw.get('switchAt') ?? 0),
      },
      removed,
    );
    const groups = (await this.redis.smembers(this.keys.streamGroups(streamPrefix))).sort();
    for (const shard of removed) {
      for (const group of groups) {
        const { lag, pending, scheduled, deferred } = await shardStats(this.redis, this.keys, streamPrefix, shard, group);
        // Its schedules are released by an owner only: a removed shard has none any more (its drain waited for them).
        if (scheduled + deferred > 0) {
          throw toCoordinatorError(
            ErrorCode.RESIZE_IN_PROGRESS,
            `stream "${streamPrefix}": removed shard ${shard} still holds ${scheduled} delayed entr${scheduled === 1 ? 'y' : 'ies'} and ` +
              `${deferred} deferred retr${deferred === 1 ? 'y' : 'ies'} of group ${group} not released; it is not deleted`,
          );
        }
        if (lag + pending > 0) {
          throw toCoordinatorError(
            ErrorCode.RESIZE_IN_PROGRESS,
            `stream "${streamPrefix}": removed shard ${shard} still holds ${lag + pending} entr${lag + pending === 1 ? 'y' : 'ies'} ` +
              `group ${group} has not processed (${lag} undelivered, ${pending} pending); it is not deleted`,
          );
        }
      }
    }
  }

  /**
   * Runs a script over the stream's metadata, its set of groups and keys of every group; the script
   * answers RETRY when the set changed between reading it and the call, and the call is repeated.
   */
  private async withGroups(
    streamPrefix: string,
    call: (groups: string[]) => { script: 'resizeShards' | 'retireShards'; keys: string[]; args: (string | number)[] },
  ): Promise<unknown[]> {
    for (let attempt = 0; attempt < MAX_SCRIPT_RETRIES; attempt++) {
      const groups = await this.redis.smembers(this.keys.streamGroups(streamPrefix));
      const { script, keys, args } = call(groups);
      const reply = (await runScript(
        this.redis,
        script,
        [this.keys.streamMeta(streamPrefix), this.keys.streamGroups(streamPrefix), ...keys],
        args,
      )) as unknown[];
      if (reply[0] === 'RETRY') continue;
      const code = errorCodeFromWire(reply[0]);
      // The scripts answer GROUP_NOT_FOUND only when the stream has no metadata.
      if (code === ErrorCode.GROUP_NOT_FOUND)
        throw new StreamNotFoundError(streamPrefix, script === 'resizeShards' ? 'cannot resize' : 'no drained shards to delete');
      if (code !== ErrorCode.NONE) throw toCoordinatorError(code, `stream "${streamPrefix}": ${String(reply[1])}`);
      return reply;
    }
    throw new Error(`stream "${streamPrefix}": its consumer groups kept changing; try again`);
  }

  /**
   * The group's dead letters across every shard of the stream (0..deadLetterSpan-1: retired shards' included) that match the
   * filter, the oldest first: each with its `ref`, shard, entry id and key, the group and member
   * that gave up, the cause, the error, the attempts and the entry's own fields. Empty when the
   * stream does not exist. Here and in the other dead-letter methods `consumerGroup` names the
   * destination: the group, or the name its members give as `deadLetter.stream`.
   *
   * @example
   * for (const letter of await admin.readDeadLetters('summary', 'summary-group', { errorContains: 'Timeout', count: 50 })) {
   *   console.log(letter.ref, letter.key, letter.error);
   * }
   */
  async readDeadLetters(streamPrefix: string, consumerGroup: string, options: ReadDeadLettersOptions = {}): Promise<DeadLetter[]> {
    const count = checkOption('admin.readDeadLetters.count', options.count ?? DEFAULT_DEAD_LETTER_COUNT);
    const stream = await this.describeStream(streamPrefix);
    if (!stream) return [];
    return readDeadLetters(this.redis, this.keys, streamPrefix, consumerGroup, stream.deadLetterSpan, count, options);
  }

  /** One dead letter by its `ref` (`<shardIndex>/<deadLetterId>`), or null when it is not there. */
  async showDeadLetter(streamPrefix: string, consumerGroup: string, ref: string): Promise<DeadLetter | null> {
    const { shardIndex, deadLetterId } = parseDeadLetterRef(ref);
    return readDeadLetter(this.redis, this.keys, streamPrefix, consumerGroup, shardIndex, deadLetterId);
  }

  /**
   * Writes a dead letter's entry again, to its key as a producer would (it lands on the key's
   * current shard, after the key's newer entries; every group of the stream gets it, with the
   * `rsc-replay-*` headers), then deletes the dead letter. Safe to run again after any failure, any
   * number of times: it never writes the entry twice (docs/operations.md#replay, SPEC 10.6).
   *
   * @example
   * const { status, to } = await admin.replayDeadLetter('summary', 'summary-group', '3/1764505000000-0');
   */
  async replayDeadLetter(
    streamPrefix: string,
    consumerGroup: string,
    ref: string,
    options: ReplayDeadLettersOptions = {},
  ): Promise<DeadLetterReplay> {
    const { shardIndex, deadLetterId } = parseDeadLetterRef(ref);
    return replayOne(this.replayContext(streamPrefix, consumerGroup, options), shardIndex, deadLetterId);
  }

  /**
   * Replays every dead letter that matches `filter` (`{}`: all), in the order they were
   * dead-lettered, one at a time; stops at the first failure with a `DeadLetterReplayError`.
   */
  async replayDeadLetters(
    streamPrefix: string,
    consumerGroup: string,
    filter: DeadLetterFilter = {},
    options: ReplayDeadLettersOptions = {},
  ): Promise<DeadLetterReplay[]> {
    const context = this.replayContext(streamPrefix, consumerGroup, options);
    return replayMany(context, await this.readDeadLetters(streamPrefix, consumerGroup, { ...filter, count: Number.MAX_SAFE_INTEGER }));
  }

  /** Deletes one dead letter; `purged` false when it was already gone. */
  async purgeDeadLetter(streamPrefix: string, consumerGroup: string, ref: string): Promise<DeadLetterPurge> {
    const [result] = await purgeMany(this.redis, this.keys, streamPrefix, consumerGroup, [parseDeadLetterRef(ref)]);
    return result;
  }

  /** Deletes every dead letter that matches `filter` (`{}`: all of the group's). */
  async purgeDeadLetters(streamPrefix: string, consumerGroup: string, filter: DeadLetterFilter = {}): Promise<DeadLetterPurge[]> {
    return purgeMany(
      this.redis,
      this.keys,
      streamPrefix,
      consumerGroup,
      await this.readDeadLetters(streamPrefix, consumerGroup, { ...filter, count: Number.MAX_SAFE_INTEGER }),
    );
  }

  private replayContext(streamPrefix: string, consumerGroup: string, options: ReplayDeadLettersOptions): ReplayContext {
    return {
      redis: this.redis,
      keys: this.keys,
      streamPrefix,
      consumerGroup,
      takeOverAfterMs: checkOption('admin.replay.takeOverAfterMs', options.takeOverAfterMs ?? 15_000),
      stream: () => this.describeStream(streamPrefix),
    };
  }

  /**
   * Retention tied to the slowest group: trims each shard stream (`XTRIM MINID`) up to the lowest
   * position every consumer group of the stream has both been delivered and acknowledged; never past
   * a pending entry, never an entry a group has not read. A shard a registered group has not read
   * yet is left alone, and so is a stream no group reads unless `maxLen` is given. Throws
   * `StreamNotFoundError` for a stream without metadata, `TrimError` when some shards failed.
   *
   * @example
   * const { trimmed, shards } = await admin.trim('summary', { dryRun: true });
   */
  async trim(streamPrefix: string, options: TrimOptions = {}): Promise<TrimResult> {
    const dryRun = options.dryRun ?? false;
    if (typeof dryRun !== 'boolean') throw new TypeError(`dryRun must be a boolean, got ${String(dryRun)}`);
    const maxLen = options.maxLen === undefined ? 0 : checkOption('admin.trim.maxLen', options.maxLen);
    const stream = await this.describeStream(streamPrefix);
    if (!stream) throw new StreamNotFoundError(streamPrefix, 'nothing to trim');
    const groups = (await this.redis.smembers(this.keys.streamGroups(streamPrefix))).sort();
    return trimShards(this.redis, this.keys, streamPrefix, stream.shardSpan, groups, { dryRun, maxLen });
  }

  /**
   * Runs `trim(streamPrefix, { maxLen })` now and then every `intervalMs` after the previous run
   * ended: runs never overlap. Each result is a 'trimmed' event, each failure an 'error' (listen for
   * it) and both show in `stats()`; a failed run does not stop the schedule. `stop()` ends it.
   *
   * @example
   * const trimming = admin.startTrimming('summary', { intervalMs: 60_000 });
   * trimming.on('error', (error) => logger.warn(error.message));
   * // on shutdown:
   * await trimming.stop();
   */
  startTrimming(streamPrefix: string, options: PeriodicTrimOptions): TrimSchedule {
    const { intervalMs, maxLen, runTimeoutMs } = resolvePeriodicTrimOptions(options);
    this.keys.streamMeta(streamPrefix); // validates the name now, not at the first run
    return new TrimSchedule(streamPrefix, () => this.trim(streamPrefix, { maxLen }), intervalMs, runTimeoutMs);
  }

  /** Every stream prefix that has shard metadata under the key prefix, sorted (SCAN, never KEYS). */
  async listStreams(): Promise<string[]> {
    return listStreamPrefixes(this.redis, this.keys);
  }

  /** The consumer groups of a stream prefix, sorted. */
  async listGroups(streamPrefix: string): Promise<string[]> {
    return (await this.redis.smembers(this.keys.streamGroups(streamPrefix))).sort();
  }

  /**
   * The group's event log (the coordinator's decisions): the newest `count`, or those after `after`,
   * oldest first; with `after` and `blockMs`, waits for the next ones (for a follow).
   */
  async readGroupEvents(streamPrefix: string, consumerGroup: string, options: ReadGroupEventsOptions = {}): Promise<GroupEvent[]> {
    const count = checkOption('admin.readGroupEvents.count', options.count ?? 100);
    const blockMs = checkOption('admin.readGroupEvents.blockMs', options.blockMs ?? 0);
    if (options.after !== undefined && !/^\d{1,20}-\d{1,20}$/.test(options.after)) {
      throw new RangeError(`after must be an event id like 1764505000000-0, got ${JSON.stringify(options.after)}`);
    }
    return readGroupEvents(this.redis, this.keys, streamPrefix, consumerGroup, { after: options.after, count, blockMs });
  }

  /** The group's position on every shard of the stream: last-delivered id, pending, oldest pending and its age. */
  async shardPositions(streamPrefix: string, consumerGroup: string): Promise<ShardPosition[]> {
    const stream = await this.describeStream(streamPrefix);
    if (!stream) throw new StreamNotFoundError(streamPrefix, `no positions of group "${consumerGroup}"`);
    return readShardPositions(this.redis, this.keys, streamPrefix, consumerGroup, stream.shardSpan);
  }

  /**
   * Moves the group's position on every shard (or one) to the earliest entry, past the latest, to a
   * time or to an id, like Kafka's `--reset-offsets`. Refused while the group has members with a live
   * lease unless `force`: they would go on from where they are and mix old and new positions.
   * Pending entries stay pending (their owner, or the next, handles them). Each shard moves in its
   * own slot only if no member was granted it since the check for live members (SPEC 10.5).
   *
   * @example
   * await admin.resetOffsets('summary', 'summary-group', { to: { datetime: new Date('2026-11-30T10:00:00Z') }, dryRun: true });
   */
  async resetOffsets(streamPrefix: string, consumerGroup: string, options: ResetOffsetsOptions): Promise<ResetOffsetsResult> {
    const to = assertOffsetTarget(options?.to);
    const dryRun = options.dryRun ?? false;
    const stream = await this.describeStream(streamPrefix);
    if (!stream) throw new StreamNotFoundError(streamPrefix, `no offsets of group "${consumerGroup}" to reset`);
    if (options.shardIndex !== undefined) checkOption('shardIndex', options.shardIndex, { max: stream.shardSpan - 1 });
    const moved = await this.shardsToReset(streamPrefix, consumerGroup, stream, options.shardIndex);
    const chosen = Array.from({ length: stream.shardSpan }, (_, i) => i).filter((i) => moved.has(i));
    // The tokens first, then the check: a member granted a shard after the check changes its token,
    // and the shard's move (in its slot) sees that (SPEC 10.5).
    let fences: Map<number, string> | null = null;
    if (!options.force) {
      fences = await readFenceTokens(this.redis, this.keys, streamPrefix, consumerGroup, chosen);
      await assertNoLiveMembers(this.redis, streamPrefix, consumerGroup, () => this.describeGroup(streamPrefix, consumerGroup));
    }
    const positions = await readShardPositions(this.redis, this.keys, streamPrefix, consumerGroup, stream.shardSpan);
    const shards = positions
      .filter((position) => moved.has(position.shardIndex))
      .map((position) => ({
        shardIndex: position.shardIndex,
        from: position.lastDeliveredId,
        to: targetId(to, position),
        pending: position.pending,
      }));
    if (!dryRun) await applyOffsets(this.redis, this.keys, streamPrefix, consumerGroup, shards, fences);
    return { streamPrefix, consumerGroup, dryRun, shards };
  }

  /**
   * The shards a reset moves: every shard of the current count, and a shard a shrink removed only
   * while the group still drains it (its cutover's readable set). A removed shard the group drained
   * is read by no member again: moved back, its entries would never be re-read and
   * deleteDrainedShards would refuse it for good (undelivered entries). An explicit `shardIndex` of
   * such a shard is refused, naming it.
   */
  private async shardsToReset(
    streamPrefix: string,
    consumerGroup: string,
    stream: StreamMetadata,
    shardIndex: number | undefined,
  ): Promise<Set<number>> {
    const own = await this.redis.hget(this.keys.groupKey(streamPrefix, consumerGroup).groupMeta, 'readableShardSet');
    const draining = own === null ? [] : parseShardCsv(own);
    const moved = new Set([...Array.from({ length: stream.shardCount }, (_, i) => i), ...draining]);
    if (shardIndex === undefined) return moved;
    if (!moved.has(shardIndex))
      throw new RangeError(
        `shardIndex ${shardIndex} was removed by a shrink (the stream has ${stream.shardCount} shards) and group "${consumerGroup}" ` +
          'drained it: no member reads it again, so its offset is not moved',
      );
    return new Set([shardIndex]);
  }

  /**
   * One page of a shard's schedule, in due order: its delayed entries (every group's), or with
   * `consumerGroup` that group's deferred retries on it (docs/operations.md, Schedules).
   *
   * @example
   * let page = await admin.readSchedule({ streamPrefix: 'orders', shardIndex: 3 });
   * while (page.next) page = await admin.readSchedule({ streamPrefix: 'orders', shardIndex: 3 }, { after: page.next });
   */
  async readSchedule(target: ScheduleTarget, options: ReadScheduleOptions = {}): Promise<SchedulePage> {
    checkOption('admin.readSchedule.count', options.count ?? DEFAULT_SCHEDULE_PAGE);
    return readSchedule(this.redis, this.keys, await this.scheduleTarget(target), options);
  }

  /**
   * Makes one scheduled entry (a delayed entry's schedule id, or with `consumerGroup` a deferred
   * retry's stream id) due now: the shard's owner releases it into the stream in its next turn
   * (within about its `blockMs`), fenced as every release. Nothing is written to the stream here.
   */
  async releaseScheduled(target: ScheduleTarget, id: string): Promise<ScheduleRelease> {
    return releaseScheduled(this.redis, this.keys, await this.scheduleTarget(target), id);
  }

  /**
   * Makes every entry of a shard's schedule (or a group's deferred retries on it) due now; answers
   * how many were moved. Without `shardIndex`, every shard of the stream's span. For tests and
   * for operators who want a backlog now rather than later.
   */
  async releaseAllScheduled(target: Omit<ScheduleTarget, 'shardIndex'> & { shardIndex?: number }): Promise<number> {
    const stream = await this.describeStream(target.streamPrefix);
    if (!stream) throw new StreamNotFoundError(target.streamPrefix, 'no schedules');
    // The stream, the group and a given shard checked once; each shard's schedule then in its own slot, side by side.
    const checked = await this.scheduleTarget({ ...target, shardIndex: target.shardIndex ?? 0 }, stream);
    const shards = target.shardIndex === undefined ? Array.from({ length: stream.shardSpan }, (_, i) => i) : [checked.shardIndex];
    const counts = await Promise.all(shards.map((shardIndex) => releaseWholeSchedule(this.redis, this.keys, { ...checked, shardIndex })));
    return counts.reduce((sum, count) => sum + count, 0);
  }

  /** Removes one scheduled entry (as `releaseScheduled` names it): it is never released, nor handled. */
  async dropScheduled(target: ScheduleTarget, id: string): Promise<ScheduleDrop> {
    return dropScheduled(this.redis, this.keys, await this.scheduleTarget(target), id);
  }

  /** Checks a schedule's stream, shard (below its span) and group (one of the stream's), naming what is wrong. */
  private async scheduleTarget(target: ScheduleTarget, known?: StreamMetadata): Promise<ScheduleTarget> {
    const { streamPrefix, consumerGroup } = target;
    const stream = known ?? (await this.describeStream(streamPrefix));
    if (!stream) throw new StreamNotFoundError(streamPrefix, 'no schedules');
    const shardIndex = checkOption('shardIndex', target.shardIndex, { max: stream.shardSpan - 1 });
    if (consumerGroup !== undefined && !(await this.listGroups(streamPrefix)).includes(consumerGroup)) {
      throw new GroupNotFoundError(`group "${consumerGroup}" of stream "${streamPrefix}" does not exist (no deferred retries)`);
    }
    return consumerGroup === undefined ? { streamPrefix, shardIndex } : { streamPrefix, shardIndex, consumerGroup };
  }

  /** Redis' clock (ms): leases and stream ids use it, so ages computed against it ignore local clock skew. */
  async serverTimeMs(): Promise<number> {
    const [seconds, micros] = await this.redis.time();
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  }

  /** The stream's shard metadata, or null when the prefix has none. */
  async describeStream(streamPrefix: string): Promise<StreamMetadata | null> {
    const flat = await this.redis.hgetall(this.keys.streamMeta(streamPrefix));
    return Object.keys(flat).length === 0 ? null : toStreamMetadata(streamPrefix, Object.entries(flat));
  }

  /**
   * A consistent snapshot of one group in the JSON shapes of SPEC section 2, with per-shard owner,
   * readability, lag and pending counts for every shard that may hold entries: readable ones, and
   * those not yet readable during an ordered cutover or still draining after a shrink (SPEC 9.6).
   * Throws `StreamNotFoundError` when the stream has no metadata,
   * `GroupNotFoundError` when the group has never had a member.
   */
  async describeGroup(streamPrefix: string, consumerGroup: string): Promise<GroupDescription> {
    const reply = (await runScript(this.redis, 'describeGroup', this.keys.groupKeys(streamPrefix, consumerGroup), [])) as unknown[];
    if (reply[6] === '') {
      // Read in the same script call as the group: a stream without metadata has no group either.
      if (pairs(reply[0]).length === 0) throw new StreamNotFoundError(streamPrefix, `no group "${consumerGroup}"`);
      throw new GroupNotFoundError(`group "${consumerGroup}" of stream "${streamPrefix}" does not exist (no member has joined it)`);
    }
    const stream = new Map(pairs(reply[0]));
    const group = new Map(pairs(reply[1]));
    const readable = groupReadableShards(stream, group);
    // Every shard that may hold entries, not only the readable ones (SPEC 9.6).
    const span = Math.max(Number(stream.get('shardCount') ?? 0), Number(stream.get('shardSpan') ?? 0), ...readable.map((i) => i + 1));
    const all = Array.from({ length: span }, (_, i) => i);
    const stats = await Promise.all(all.map((shard) => shardStats(this.redis, this.keys, streamPrefix, shard, consumerGroup)));
    return toGroupDescription({
      streamPrefix,
      consumerGroup,
      stream,
      group,
      members: pairs(reply[2]),
      leases: new Map(pairs(reply[3])),
      target: pairs(reply[4]),
      owners: new Map(pairs(reply[5])),
      state: String(reply[6]),
      describedAt: Number(reply[7]),
      shardStats: new Map(all.map((shard, i) => [shard, stats[i]])),
    });
  }
}

function toStreamMetadata(streamPrefix: string, entries: [string, string][]): StreamMetadata {
  const meta = new Map(entries);
  return {
    streamPrefix,
    shardCount: Number(meta.get('shardCount')),
    metadataVersion: Number(meta.get('metadataVersion')),
    readableShardSet: parseShardCsv(meta.get('readableShardSet')),
    writableShardSet: parseShardCsv(meta.get('writableShardSet')),
    ...(meta.has('previousShardCount') ? { previousShardCount: Number(meta.get('previousShardCount')) } : {}),
    ...(meta.has('switchAt') ? { switchAt: new Date(Number(meta.get('switchAt'))).toISOString() } : {}),
    shardSpan: Math.max(Number(meta.get('shardCount')), Number(meta.get('shardSpan') ?? 0)),
    deadLetterSpan: Math.max(Number(meta.get('shardCount')), Number(meta.get('shardSpan') ?? 0), Number(meta.get('deadLetterSpan') ?? 0)),
    ...(meta.has('retiringSpan') ? { retiringShards: shardRange(Number(meta.get('shardCount')), Number(meta.get('retiringSpan'))) } : {}),
    createdAt: new Date(Number(meta.get('createdAt'))).toISOString(),
    updatedAt: new Date(Number(meta.get('updatedAt'))).toISOString(),
  };
}

/** The shard indices `from..end-1`. */
function shardRange(from: number, end: number): number[] {
  return Array.from({ length: Math.max(0, end - from) }, (_, i) => from + i);
}
